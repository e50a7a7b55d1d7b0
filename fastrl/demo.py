"""``make demo``: GRPO and FastRL's two update semantics on mini-math, same seed and steps, side by side.

The three arms:

* ``grpo``: the baseline (4 optimizer steps of 32 trajectories per rollout step);
* ``fastrl``: FastRL as released and as in Table 1 (mini-batches a quarter of GRPO's, so
  kept / 8 optimizer steps per rollout step);
* ``fastrl_fixed_updates``: FastRL as in the paper's App. C.1 (exactly 4 optimizer steps per
  rollout step, the kept trajectories split evenly over them).

Validation: n = 1 every ``DEMO_VAL_EVERY`` steps (the curve), and avg@8 over 320 problems before
and after training (``rollout.val_n_final``), with its standard error. Writes ``<out>/summary.json``
as ``{"methods": {"grpo": {...}, "fastrl": {...}, "fastrl_fixed_updates": {...}}}`` and
``<out>/summary.md``; each arm's run is ``<out>/<arm>/`` (a rerun moves the previous one aside).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Sequence

from fastrl import metric_keys as K
from fastrl.training.metrics import STAGES, read_metrics
from fastrl.training.token_bound import token_bound

# arm -> (method file, its overrides)
DEMO_ARMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "grpo": ("methods/grpo.yaml", ()),
    "fastrl": ("methods/fastrl.yaml", ()),
    "fastrl_fixed_updates": ("methods/fastrl.yaml", ("trainer.update_mode=fixed_updates", "trainer.updates_per_step=4")),
}
DEMO_METHODS = tuple(DEMO_ARMS)
DEMO_VAL_EVERY = 20  # validation points for the accuracy-vs-wall-clock comparison
# avg@8 over 320 of mini-math's 324 validation problems at the ends: a standard error near 1 point.
DEMO_VALIDATION = ("data.num_val=320", "rollout.val_n=1", "rollout.val_n_final=8")


def summarize_run(run_dir: Path, fit_summary: dict[str, Any]) -> dict[str, Any]:
    """Totals over a run's metrics.jsonl (train steps only) plus the fit() summary."""
    rows = [r for r in read_metrics(run_dir) if K.STEP_TIME in r]
    total = lambda key: float(sum(r.get(key, 0.0) for r in rows))  # noqa: E731
    # Validation accuracy against cumulative train-step wall-clock (validation time excluded).
    # The curve is n = 1 throughout (the end points' first samples), so its points compare.
    curve, wall = [(0, 0.0, fit_summary.get("acc_before_n1"))], 0.0
    for r in rows:
        wall += r[K.STEP_TIME]
        if K.VAL_ACCURACY_N1 in r:
            curve.append((r[K.STEP], wall, r[K.VAL_ACCURACY_N1]))
    if curve[-1][0] != len(rows):
        curve.append((len(rows), wall, fit_summary.get("acc_after_n1")))
    return {
        "steps": len(rows),
        "wall_s": total(K.STEP_TIME),
        "cpu_s": total(K.STEP_CPU),
        "train_wall_s": fit_summary.get("train_wall_s"),
        "acc_before": fit_summary.get("acc_before"),
        "acc_after": fit_summary.get("acc_after"),
        "acc_after_se": fit_summary.get("acc_after_se"),
        **_final_validation_size(run_dir),
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
    row("val accuracy before (avg@8)", lambda m: f"{m['acc_before']:.3f}")
    row("val accuracy after (avg@8 ± s.e.)", lambda m: f"{m['acc_after']:.3f} ± {m['acc_after_se']:.3f}")
    if "grpo" in methods:
        base = methods["grpo"]["wall_s"]
        row("speedup vs GRPO (wall-clock)", lambda m: f"{base / max(m['wall_s'], 1e-9):.2f}x")
        base_cpu = methods["grpo"].get("cpu_s", float("nan"))
        row("speedup vs GRPO (CPU seconds)", lambda m: f"{base_cpu / max(m.get('cpu_s', float('nan')), 1e-9):.2f}x")
        row("token-bound efficiency (GRPO's time per token / this)", lambda m: f"{m.get('bound_efficiency', 1.0):.2f}")
    if "grpo" in methods and "fastrl" in methods:
        budget = methods["fastrl"]["wall_s"]
        row("val accuracy (n = 1) at FastRL's total wall-clock", lambda m: f"{accuracy_at(m['val_curve'], budget):.3f}")
    return "\n".join(lines)


def in_words(methods: dict[str, dict[str, Any]]) -> str:
    """The result for a newcomer: each FastRL arm's speedup and accuracy difference vs GRPO, with
    the difference's 95 % interval over the final validation's sampled answers (k per problem, the
    problems fixed). No interval is claimed where the samples did not vary (greedy validation gives
    k identical answers), and none covers seed-to-seed variation (one seed)."""
    base = methods["grpo"]
    out = []
    for name, m in methods.items():
        if name == "grpo":
            continue
        speed = base["wall_s"] / max(m["wall_s"], 1e-9)
        speed_cpu = base["cpu_s"] / max(m["cpu_s"], 1e-9)
        diff = 100 * (m["acc_after"] - base["acc_after"])
        out.append(f"- **{name}** trained {speed:.2f}x faster than GRPO by wall-clock ({speed_cpu:.2f}x by CPU "
                   f"seconds), keeping {m['kept_fraction']:.0%} of the trajectories. Its final accuracy differs "
                   f"from GRPO's by {diff:+.1f} points {_difference_interval(m, base, diff)}.")
    out.append("- One seed: no interval here covers how much another seed would move either run; the paired "
               "5-seed comparisons are in the README.")
    return "\n".join(out)


def _difference_interval(m: dict[str, Any], base: dict[str, Any], diff: float) -> str:
    """'(95 % interval ...)' over the validation's samples, or why there is none."""
    se = math.sqrt(m["acc_after_se"] ** 2 + base["acc_after_se"] ** 2)
    over = f"{m.get('val_samples_per_problem') or '?'} samples per problem on the same {m.get('val_problems') or '?'} problems"
    if not se > 0:  # 0 (every problem's samples agree) or nan (no samples)
        return (f"(no interval: the final validation's {over} did not vary, e.g. greedy decoding, so "
                "there is no sampling noise to measure it from)")
    half = 196 * se
    verdict = "within the validation's noise" if abs(diff) <= half else "more than the validation's noise explains"
    return f"(95 % interval ±{half:.1f} over the validation's {over}: {verdict})"


def _final_validation_size(run_dir: Path) -> dict[str, int | None]:
    """How many problems and samples per problem the last validation of the run scored."""
    rows = [r for r in read_metrics(run_dir) if K.VAL_SAMPLES_PER_PROBLEM in r]
    last = rows[-1] if rows else {}
    size = lambda key: int(last[key]) if key in last else None  # noqa: E731
    return {"val_problems": size(K.VAL_NUM), "val_samples_per_problem": size(K.VAL_SAMPLES_PER_PROBLEM)}


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
    for name, (config, arm_overrides) in DEMO_ARMS.items():
        run_dir = out_dir / name
        fit = train(config, [f"trainer.val_every={DEMO_VAL_EVERY}", *DEMO_VALIDATION, *arm_overrides, *overrides,
                             f"trainer.run_dir={run_dir}"], scale, force_new=True)
        methods[name] = summarize_run(run_dir, fit)
    add_token_bounds(methods)
    summary = {"scale": scale, "overrides": list(overrides), "total_s": time.perf_counter() - start, "methods": methods}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    table = format_table(methods)
    (out_dir / "summary.md").write_text(f"{in_words(methods)}\n\n{table}\n")
    print(in_words(methods) + "\n\n" + table)
    print(f"\nwrote {out_dir / 'summary.json'}")
    return summary
