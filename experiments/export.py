"""Run metadata of a target, committed beside its table: ``<out>/run_metadata/<target>-<scale>.jsonl``.

``runs/`` (checkpoints, full logs) is not committed; this file is the part of it a reader needs to
check a generated table: one line per finished run with the exact command, the run's identity
(config, overrides, scale), its wall time, the code commit that wrote the table, the run's summary
(the numbers the collector used) and a per-step series of the quantities the figures plot.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Sequence

from experiments.logs import is_finished, read_metrics, read_spec, summarize, train_rows
from experiments.spec import RunSpec

# Per-step quantities kept in the export (the full metrics.jsonl has ~60 per step).
STEP_KEYS: tuple[str, ...] = (
    "step", "timing_s/step", "timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor",
    "reward/mean", "reward/accuracy", "rollout/n", "rollout/num_prompts", "rollout/num_responses",
    "rollout/mixed_groups", "prune/kept", "prune/kept_fraction", "tokens/generated", "tokens/trained",
    "actor/entropy",
)


def code_commit(repo: Path) -> str:
    """The checked-out commit (with ``-dirty`` when the tree has changes), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def run_record(spec: RunSpec, commit: str) -> dict[str, Any]:
    """One finished run as a JSON-able dict (see the module docstring)."""
    s = summarize(spec.run_dir)
    written = read_spec(spec.run_dir) or {}
    rows = read_metrics(spec.run_dir)
    val = [r for r in rows if str(r.get("phase", "")).startswith("val")]
    return {
        "target": spec.target, "group": spec.group, "scale": spec.scale, "dataset": spec.dataset, "model": spec.model,
        "variant": spec.variant, "seed": spec.seed, "run_dir": str(spec.run_dir), "identity": spec.identity(),
        "command": written.get("command"), "run_wall_s": written.get("run_wall_s"), "labels": spec.labels,
        "trained_at_commit": written.get("code_commit", "unknown"), "collected_at_commit": commit,
        "summary": {"steps": s.steps, "train_time_s": s.train_time_s, "acc_before": s.acc_before,
                    "acc_after": s.acc_after, "ood": s.ood, "tokens_generated": s.tokens_generated,
                    "tokens_trained": s.tokens_trained, "kept_fraction": s.kept_fraction, "mean_n": s.mean_n,
                    "timing_s": s.timing},
        "validation": [{k: _round(v) for k, v in r.items() if "accuracy" in k or k in ("step", "phase")} for r in val],
        "steps": [{k: _round(r[k]) for k in STEP_KEYS if k in r} for r in train_rows(rows)],
    }


def _round(value: Any) -> Any:
    """5 significant digits: the export is for reading and plotting, not for bitwise replay."""
    return float(f"{value:.5g}") if isinstance(value, float) else value


def export_runs(target: str, scale: str, specs: Sequence[RunSpec], out_dir: Path, repo: Path) -> Path | None:
    """Write ``out_dir/run_metadata/<target>-<scale>.jsonl`` for the finished runs; None when none finished."""
    done = [s for s in specs if is_finished(s.run_dir)]
    if not done:
        return None
    commit = code_commit(repo)
    path = out_dir / "run_metadata" / f"{target}-{scale}.jsonl"  # not "runs/": .gitignore
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for s in sorted(done, key=lambda s: (s.dataset, s.model, s.variant, s.seed)):
            fh.write(json.dumps(run_record(s, commit), sort_keys=True) + "\n")
    return path
