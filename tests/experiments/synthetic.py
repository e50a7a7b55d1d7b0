"""Synthetic run logs in the trainer's documented format (keys: fastrl.metric_keys), for tests.

Each helper writes ``<run_dir>/metrics.jsonl`` with a "val" line at step 0, one line per training
step with every key the collectors and notebooks read, optional validation every ``val_every``
steps, and the final "val_final" line (so the run counts as finished unless ``finished=False``).
Stage times: 60 % of each step in ``gen``, 30 % in ``update_actor``, the rest untimed; CPU seconds
per stage (``cpu_s/*``) only with ``cpu_per_wall``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from fastrl import metric_keys as K
from fastrl.metric_keys import STAGES


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
    cpu_per_wall: float | None = None,
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = len(step_times)
    n = list(n or [4] * steps)
    kept_fraction = list(kept_fraction or [1.0] * steps)
    entropy = list(entropy or [1.0] * steps)
    lines = [{K.STEP: 0, K.VAL_ACCURACY_BEFORE: acc_before, K.before_key(K.VAL_REWARD): 0.5,
              K.before_key(K.VAL_NUM): 16.0, K.PHASE: K.PHASE_VAL}]
    for i in range(steps):
        responses = prompts * n[i]
        kept = round(responses * kept_fraction[i])
        row = {
            K.STEP: i + 1, K.EPOCH: 0, K.REWARD_MEAN: 0.5, K.REWARD_ACCURACY: 0.3,
            K.ROLLOUT_N: float(n[i]), K.ROLLOUT_NUM_PROMPTS: float(prompts), K.ROLLOUT_NUM_RESPONSES: float(responses),
            K.ROLLOUT_MIXED_GROUPS: 0.5, K.ROLLOUT_RESPONSE_LENGTH: float(tokens_per_response),
            K.PRUNE_KEPT: float(kept), K.PRUNE_KEPT_FRACTION: kept / responses,
            K.TOKENS_GENERATED: float(responses * tokens_per_response), K.TOKENS_TRAINED: float(kept * tokens_per_response),
            K.ACTOR_PG_LOSS: 0.0, K.ACTOR_ENTROPY: float(entropy[i]), K.ACTOR_KL_LOSS: 0.0, K.ACTOR_GRAD_NORM: 1.0,
            **{K.timing_key(s): 0.0 for s in STAGES},
        }
        row[K.timing_key("gen")] = step_times[i] * 0.6
        row[K.timing_key("update_actor")] = step_times[i] * 0.3
        row[K.STEP_TIME] = float(step_times[i])
        if cpu_per_wall is not None:  # cpu_s/<stage>: that fraction of each stage's wall-clock seconds
            row.update({K.cpu_key(s): cpu_per_wall * row[K.timing_key(s)] for s in STAGES})
        if val and (i + 1) in val and (i + 1) < steps:
            row.update({K.VAL_ACCURACY: val[i + 1], K.VAL_REWARD: 0.5, K.VAL_NUM: 16.0})
        lines.append(row)
    if finished:
        final = {K.STEP: steps, K.VAL_ACCURACY: acc_after, K.VAL_REWARD: 0.5, K.VAL_NUM: 16.0,
                 K.PHASE: K.PHASE_VAL_FINAL}
        for k, v in (ood or {}).items():
            final[K.ood_accuracy_key(k)] = v
            final[K.ood_num_key(k)] = 16.0
        lines.append(final)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run_dir
