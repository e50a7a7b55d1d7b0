"""Table 7: MDAP's tau in {0.2, 0.4, 0.6, 0.8, 1.0} -- accuracy, training time, speedup."""

from __future__ import annotations

from pathlib import Path

from experiments.grid import Context, collect_grid, paper_ood_evals, specs_for
from experiments.spec import RunSpec

TARGET = "table7"
DESCRIPTION = "tau sweep (configs/tables/table7/tau_*.yaml)"
METRICS = ("acc_before", "in_domain_acc", "ood_avg", "avg_acc", "train_time_s", "speedup_vs_grpo", "kept_fraction", "mean_n")


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def post(ctx: Context, runs: list[RunSpec]) -> None:
    paper_ood_evals(runs, ctx)


def collect(ctx: Context) -> list[Path]:
    return list(collect_grid(TARGET, ctx, metrics=METRICS))
