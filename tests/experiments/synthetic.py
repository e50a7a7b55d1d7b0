"""Synthetic run logs in the trainer's documented format (fastrl.training.metrics), for tests.

Each helper writes ``<run_dir>/metrics.jsonl`` with a "val" line at step 0, one line per training
step with every key the collectors and notebooks read, optional validation every ``val_every``
steps, and the final "val_final" line (so the run counts as finished unless ``finished=False``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from fastrl.training.metrics import STAGES


def write_run(
    run_dir: Path,
    *,
    step_times: Sequence[float],
    acc_before: float = 0.1,
    acc_after: float = 0.5,
    ood: dict[str, float] | None = None,
    n: Sequence[int] | None = None,
    kept_fraction: Sequence[float] | None = None,
    entropy: Sequence[float] | None = None,
    val: dict[int, float] | None = None,
    prompts: int = 4,
    tokens_per_response: int = 10,
    finished: bool = True,
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = len(step_times)
    n = list(n or [4] * steps)
    kept_fraction = list(kept_fraction or [1.0] * steps)
    entropy = list(entropy or [1.0] * steps)
    lines = [{"step": 0, "val/accuracy_before": acc_before, "val/reward_before": 0.5, "val/num_before": 16.0,
              "phase": "val"}]
    for i in range(steps):
        responses = prompts * n[i]
        kept = round(responses * kept_fraction[i])
        row = {
            "step": i + 1, "epoch": 0, "reward/mean": 0.5, "reward/accuracy": 0.3,
            "rollout/n": float(n[i]), "rollout/num_prompts": float(prompts), "rollout/num_responses": float(responses),
            "rollout/mixed_groups": 0.5, "rollout/response_length": float(tokens_per_response),
            "prune/kept": float(kept), "prune/kept_fraction": kept / responses,
            "tokens/generated": float(responses * tokens_per_response), "tokens/trained": float(kept * tokens_per_response),
            "actor/pg_loss": 0.0, "actor/entropy": float(entropy[i]), "actor/kl_loss": 0.0, "actor/grad_norm": 1.0,
            **{f"timing_s/{s}": 0.0 for s in STAGES},
        }
        row["timing_s/gen"] = step_times[i] * 0.6
        row["timing_s/update_actor"] = step_times[i] * 0.3
        row["timing_s/step"] = float(step_times[i])
        if val and (i + 1) in val and (i + 1) < steps:
            row.update({"val/accuracy": val[i + 1], "val/reward": 0.5, "val/num": 16.0})
        lines.append(row)
    if finished:
        final = {"step": steps, "val/accuracy": acc_after, "val/reward": 0.5, "val/num": 16.0, "phase": "val_final"}
        for k, v in (ood or {}).items():
            final[f"ood/{k}/accuracy"] = v
            final[f"ood/{k}/num"] = 16.0
        lines.append(final)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run_dir
