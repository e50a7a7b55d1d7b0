"""Table 4: avg@16 and pass@16 of the trained policies (``fastrl eval --k 16 --sampling paper``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments import collect as C
from experiments.evals import evaluate_finished
from experiments.grid import Context, collect_grid, specs_for
from experiments.logs import eval_results
from experiments.spec import RunSpec, load_table

TARGET = "table4"
SUBDIR = "eval_k16"
METRICS = ("avg_at_16", "pass_at_16", "avg_at_16_gain_vs_grpo", "in_domain_acc")


def k_value() -> int:
    return int(load_table(TARGET)["k"])


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def post(ctx: Context, runs: list[RunSpec]) -> None:
    """Evaluate every finished run k times per problem (in-domain and out-of-domain): one
    ``fastrl eval`` process per run for all its benchmarks, ``ctx.jobs`` at a time."""
    evaluate_finished(runs, k=k_value(), subdir=SUBDIR, include_in_domain=True, launcher=ctx.launcher, jobs=ctx.jobs)


def eval_metrics(cell: C.Cell) -> dict[int, dict[str, float]]:
    """Per seed: avg@k and pass@k per benchmark and their means over benchmarks (in %)."""
    k = k_value()
    out: dict[int, dict[str, float]] = {}
    for seed, summary in cell.summaries.items():
        res = eval_results(summary.run_dir, SUBDIR)
        if not res:
            continue
        m: dict[str, float] = {}
        for bench, vals in res.items():
            m[f"avg@{k}/{bench}"] = 100.0 * vals[f"avg@{k}"]
            m[f"pass@{k}/{bench}"] = 100.0 * vals[f"pass@{k}"]
        m[f"avg_at_{k}"] = float(np.mean([100.0 * v[f"avg@{k}"] for v in res.values()]))
        m[f"pass_at_{k}"] = float(np.mean([100.0 * v[f"pass@{k}"] for v in res.values()]))
        out[seed] = m
    return out


def derive(rows: list[C.Row]) -> list[C.Row]:
    k = k_value()
    return C.delta_rows(rows, metric=f"avg_at_{k}", reference="grpo", name=f"avg_at_{k}_gain_vs_grpo")


def collect(ctx: Context) -> list[Path]:
    return list(collect_grid(TARGET, ctx, metrics=METRICS, derive=derive, extra=eval_metrics))
