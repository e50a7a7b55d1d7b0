"""Reading run logs: ``<run_dir>/metrics.jsonl`` (keys: fastrl.metric_keys) and eval outputs.

A run is *finished* when its log ends with the ``"phase": "val_final"`` line the trainer writes
after training (final validation and out-of-domain accuracy). Everything here is pure reading,
so collectors and notebooks can run on logs copied from another machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fastrl import metric_keys as K
from fastrl.training.metrics import read_metrics

SPEC_FILE = "run_spec.json"  # written by experiments.runner next to metrics.jsonl


def is_finished(run_dir: Path) -> bool:
    rows = read_metrics(Path(run_dir))
    return bool(rows) and rows[-1].get(K.PHASE) == K.PHASE_VAL_FINAL


def train_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-step training lines (those with a step time), in step order."""
    return sorted((r for r in rows if K.STEP_TIME in r), key=lambda r: r[K.STEP])


def val_curve(rows: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(step, validation accuracy): before training, every val_every, and the final one."""
    out: list[tuple[int, float]] = []
    for r in rows:
        if r.get(K.PHASE) == K.PHASE_VAL and K.VAL_ACCURACY_BEFORE in r:
            out.append((int(r[K.STEP]), float(r[K.VAL_ACCURACY_BEFORE])))
        elif K.VAL_ACCURACY in r:
            out.append((int(r[K.STEP]), float(r[K.VAL_ACCURACY])))
    # a val_every point at the last step and the final line can coincide: keep the final one
    dedup: dict[int, float] = {}
    for s, a in out:
        dedup[s] = a
    return sorted(dedup.items())


@dataclass
class RunSummary:
    """What the tables need from one finished run."""

    run_dir: Path
    steps: int
    train_time_s: float  # sum of timing_s/step over training steps (excludes validation)
    acc_before: float | None
    acc_after: float
    ood: dict[str, float]  # benchmark -> accuracy
    tokens_generated: float
    tokens_trained: float
    kept_fraction: float  # kept / generated responses over the run
    mean_n: float
    timing: dict[str, float] = field(default_factory=dict)  # stage -> total seconds
    spec: dict[str, Any] = field(default_factory=dict)
    # sum of cpu_s/step (this process's CPU seconds; NaN for runs logged before it existed): the
    # speedup measure that the neighbours of a shared machine do not move
    train_cpu_s: float = float("nan")
    cpu: dict[str, float] = field(default_factory=dict)  # stage -> total CPU seconds (cpu_s/<stage>)
    # how often the rollout scaler moved n (``n_changes``); NaN where the steps did not log n
    n_changes: float = float("nan")

    @property
    def avg_acc(self) -> float:
        """Mean of in-domain and every out-of-domain accuracy (the paper's "average")."""
        return float(np.mean([self.acc_after, *self._ood_sorted()]))

    @property
    def ood_avg(self) -> float | None:
        return float(np.mean(self._ood_sorted())) if self.ood else None

    def _ood_sorted(self) -> list[float]:
        # by benchmark name: a live run lists its OOD benchmarks in config order, the run metadata
        # (sort_keys) in name order, and a float sum in another order differs in the last digit, so a
        # table collected live would not be byte-identical to its rebuild from the metadata
        return [self.ood[k] for k in sorted(self.ood)]


def n_changes(ns: Sequence[float]) -> int:
    """How often n moved in a run: the steps whose rollouts per prompt (``rollout/n``, the n the
    step generated with) differ from the step before's. 0 for a run whose ARS never acted, the
    quantity Fig. 3 and the ARS ablation need to be non-zero to say anything about ARS."""
    return sum(1 for prev, cur in zip(ns, ns[1:]) if float(cur) != float(prev))


def read_spec(run_dir: Path) -> dict[str, Any]:
    p = Path(run_dir) / SPEC_FILE
    return json.loads(p.read_text()) if p.is_file() else {}


def eval_results(run_dir: Path, subdir: str = "eval") -> dict[str, dict[str, float]]:
    """``<run_dir>/<subdir>/<name>/eval.json`` files -> {benchmark: metrics} (paper-scale OOD, k=16)."""
    out: dict[str, dict[str, float]] = {}
    root = Path(run_dir) / subdir
    if not root.is_dir():
        return out
    for f in sorted(root.glob("*/eval.json")):
        data = json.loads(f.read_text())
        for bench, m in data.get("benchmarks", {}).items():
            out[bench] = {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
    return out


def summarize(run_dir: Path) -> RunSummary:
    """Summary of a finished run; raises ValueError naming the run when it is not finished."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows or rows[-1].get(K.PHASE) != K.PHASE_VAL_FINAL:
        raise ValueError(f"{run_dir}/metrics.jsonl: run not finished (no final 'val_final' line)")
    final = rows[-1]
    if K.VAL_ACCURACY not in final:
        raise ValueError(f"{run_dir}: the run had no validation set (no val/* metrics), so it has no accuracy to "
                         "tabulate; give it data.val_files (or data.num_val > 0)")
    steps = train_rows(rows)
    before = [r for r in rows if r.get(K.PHASE) == K.PHASE_VAL and K.VAL_ACCURACY_BEFORE in r]
    total = lambda key: float(sum(float(r.get(key, 0.0)) for r in steps))  # noqa: E731
    ood = {name: float(v) for k, v in final.items() if (name := K.ood_accuracy_name(k)) is not None}
    # paper scale: out-of-domain benchmarks are evaluated by `fastrl eval` into <run>/eval/<name>/
    ood.update({b: m["accuracy"] for b, m in eval_results(run_dir).items() if "accuracy" in m})
    timing = {k.removeprefix(K.TIMING_PREFIX): total(k) for k in (steps[0] if steps else {}) if k.startswith(K.TIMING_PREFIX)}
    cpu = {k.removeprefix(K.CPU_PREFIX): total(k) for k in (steps[0] if steps else {}) if k.startswith(K.CPU_PREFIX)}
    generated = total(K.ROLLOUT_NUM_RESPONSES)
    return RunSummary(
        run_dir=run_dir,
        steps=len(steps),
        train_time_s=total(K.STEP_TIME),
        acc_before=float(before[0][K.VAL_ACCURACY_BEFORE]) if before else None,
        acc_after=float(final[K.VAL_ACCURACY]),
        ood=ood,
        tokens_generated=total(K.TOKENS_GENERATED),
        tokens_trained=total(K.TOKENS_TRAINED),
        kept_fraction=total(K.PRUNE_KEPT) / generated if generated else float("nan"),
        mean_n=float(np.mean([float(r[K.ROLLOUT_N]) for r in steps])) if steps else float("nan"),
        n_changes=float(n_changes([r[K.ROLLOUT_N] for r in steps])) if steps else float("nan"),
        timing=timing,
        cpu=cpu,
        spec=read_spec(run_dir),
        train_cpu_s=total(K.STEP_CPU) if steps and K.STEP_CPU in steps[0] else float("nan"),
    )


def find_runs(runs_root: Path, group: str, scale: str) -> list[Path]:
    """Every run directory (holding metrics.jsonl) under ``<runs_root>/<group>/<scale>/``."""
    base = Path(runs_root) / group / scale
    return sorted(p.parent for p in base.glob("*/*/seed*/metrics.jsonl"))


def series(rows: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``key`` over the training lines that have it."""
    pts = [(r[K.STEP], float(r[key])) for r in train_rows(rows) if key in r]
    if not pts:
        return np.zeros(0), np.zeros(0)
    s, v = zip(*pts)
    return np.asarray(s, dtype=float), np.asarray(v, dtype=float)


def cumulative_wall(rows: list[dict[str, Any]]) -> dict[int, float]:
    """step -> training wall-clock seconds up to the end of that step (sum of timing_s/step)."""
    out, acc = {0: 0.0}, 0.0
    for r in train_rows(rows):
        acc += float(r[K.STEP_TIME])
        out[int(r[K.STEP])] = acc
    return out
