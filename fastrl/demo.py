"""``make demo``: GRPO and FastRL on mini-math with the same seed and steps, side by side.

Writes ``<out>/summary.json`` as ``{"methods": {"grpo": {...}, "fastrl": {...}}}`` and prints a
table of wall-clock per stage, tokens generated and trained, kept fraction, n per period and
validation accuracy before and after.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from fastrl import metric_keys as K
from fastrl.training.metrics import STAGES, read_metrics
from fastrl.training.token_bound import token_bound

DEMO_METHODS = ("grpo", "fastrl")
DEMO_VAL_EVERY = 20  # validation points for the accuracy-vs-wall-clock comparison


def summarize_run(run_dir: Path, fit_summary: dict[str, Any]) -> dict[str, Any]:
    """Totals over a run's metrics.jsonl (train steps only) plus the fit() summary."""
    rows = [r for r in read_metrics(run_dir) if K.STEP_TIME in r]
    total = lambda key: float(sum(r.get(key, 0.0) for r in rows))  # noqa: E731
    # Validation accuracy against cumulative train-step wall-clock (validation time excluded).
    curve, wall = [(0, 0.0, fit_summary.get("acc_before"))], 0.0
    for r in rows:
        wall += r[K.STEP_TIME]
        if K.VAL_ACCURACY in r:
            curve.append((r[K.STEP], wall, r[K.VAL_ACCURACY]))
    if curve[-1][0] != len(rows):
        curve.append((len(rows), wall, fit_summary.get("acc_after")))
    return {
        "steps": len(rows),
        "wall_s": total(K.STEP_TIME),
        "cpu_s": total(K.STEP_CPU),
        "train_wall_s": fit_summary.get("train_wall_s"),
        "acc_before": fit_summary.get("acc_before"),
        "acc_after": fit_summary.get("acc_after"),
        "tokens_generated": total(K.TOKENS_GENERATED),
        "tokens_trained": total(K.TOKENS_TRAINED),
        "kept_fraction": total(K.PRUNE_KEPT) / max(total(K.ROLLOUT_NUM_RESPONSES), 1.0),
        "n_per_step": [int(r.get(K.ROLLOUT_N, 0)) for r in rows],
        "timing_s": {s: total(K.timing_key(s)) for s in STAGES},
        "val_curve": [{"step": st, "wall_s": w, "accuracy": a} for st, w, a in curve],
        "run_dir": str(run_dir),
    }


def add_token_bounds(methods: dict[str, dict[str, Any]], ref: str = "grpo") -> None:
    """``bound_s`` (the run's time at ``ref``'s speed per token, fastrl.training.token_bound) and
    ``bound_efficiency`` = bound_s / wall_s, for every method but ``ref``."""
    base = methods[ref]
    for name, m in methods.items():
        if name != ref:
            m["bound_s"] = token_bound(base["timing_s"], (base["tokens_generated"], base["tokens_trained"]),
                                       (m["tokens_generated"], m["tokens_trained"]))
            m["bound_efficiency"] = m["bound_s"] / m["wall_s"]


def format_table(methods: dict[str, dict[str, Any]]) -> str:
    names = list(methods)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label: str, fn) -> None:
        lines.append(f"| {label} | " + " | ".join(fn(methods[n]) for n in names) + " |")

    row("steps", lambda m: str(m["steps"]))
    row("wall-clock, train steps (s)", lambda m: f"{m['wall_s']:.1f}")
    row("CPU seconds, train steps (this process)", lambda m: f"{m.get('cpu_s', float('nan')):.1f}")
    for s in STAGES[:-1]:
        row(f"  timing_s/{s}", lambda m, s=s: f"{m['timing_s'][s]:.1f}")
    row("tokens generated", lambda m: f"{m['tokens_generated']:.0f}")
    row("tokens trained", lambda m: f"{m['tokens_trained']:.0f}")
    row("kept fraction", lambda m: f"{m['kept_fraction']:.2f}")
    row("n per step (first..last)", lambda m: _compress(m["n_per_step"]))
    row("val accuracy before", lambda m: f"{m['acc_before']:.3f}")
    row("val accuracy after", lambda m: f"{m['acc_after']:.3f}")
    if "grpo" in methods:
        base = methods["grpo"]["wall_s"]
        row("speedup vs GRPO (wall-clock)", lambda m: f"{base / max(m['wall_s'], 1e-9):.2f}x")
        base_cpu = methods["grpo"].get("cpu_s", float("nan"))
        row("speedup vs GRPO (CPU seconds)", lambda m: f"{base_cpu / max(m.get('cpu_s', float('nan')), 1e-9):.2f}x")
        row("token-bound efficiency (GRPO's time per token / this)", lambda m: f"{m.get('bound_efficiency', 1.0):.2f}")
    if "grpo" in methods and "fastrl" in methods:
        budget = methods["fastrl"]["wall_s"]
        row("val accuracy at FastRL's total wall-clock", lambda m: f"{accuracy_at(m['val_curve'], budget):.3f}")
    return "\n".join(lines)


def accuracy_at(curve: Sequence[dict[str, Any]], wall_s: float) -> float:
    """The last validation accuracy measured within ``wall_s`` seconds of training."""
    within = [p["accuracy"] for p in curve if p["wall_s"] <= wall_s + 1e-9 and p["accuracy"] is not None]
    return within[-1] if within else float("nan")


def _compress(ns: Sequence[int]) -> str:
    out: list[str] = []
    for n in ns:
        if not out or out[-1].split("x")[0] != str(n):
            out.append(f"{n}x1")
        else:
            v, c = out[-1].split("x")
            out[-1] = f"{v}x{int(c) + 1}"
    return " ".join(out)


def run_demo(out_dir: Path, *, scale: str = "mini", overrides: Sequence[str] = ()) -> dict[str, Any]:
    from fastrl.api import train

    out_dir.mkdir(parents=True, exist_ok=True)
    methods: dict[str, dict[str, Any]] = {}
    start = time.perf_counter()
    for name in DEMO_METHODS:
        run_dir = out_dir / name
        for stale in (run_dir / "metrics.jsonl",):
            stale.unlink(missing_ok=True)
        fit = train(f"methods/{name}.yaml",
                    [f"trainer.val_every={DEMO_VAL_EVERY}", *overrides, f"trainer.run_dir={run_dir}", "trainer.resume=false"],
                    scale)
        methods[name] = summarize_run(run_dir, fit)
    add_token_bounds(methods)
    summary = {"scale": scale, "overrides": list(overrides), "total_s": time.perf_counter() - start, "methods": methods}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    table = format_table(methods)
    (out_dir / "summary.md").write_text(table + "\n")
    print(table)
    print(f"\nwrote {out_dir / 'summary.json'}")
    return summary
