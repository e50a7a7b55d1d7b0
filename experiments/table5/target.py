"""Table 5: random pruning (several ratios) vs advantage-only vs advantage + Jaccard (MDAP)."""

from __future__ import annotations

from pathlib import Path

from experiments.grid import Context, collect_grid, paper_ood_evals, specs_for
from experiments.spec import RunSpec

TARGET = "table5"
DESCRIPTION = "pruning rules: random (0.25/0.5/0.75), advantage-only, advantage + Jaccard"
METRICS = ("acc_before", "in_domain_acc", "ood_avg", "avg_acc", "train_time_s", "speedup_vs_grpo", "kept_fraction", "mean_n")


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def post(ctx: Context, runs: list[RunSpec]) -> None:
    paper_ood_evals(runs, ctx)


def collect(ctx: Context) -> list[Path]:
    # paired by seed against GRPO and against FastRL (advantage + Jaccard), the rule the others replace
    return list(collect_grid(TARGET, ctx, metrics=METRICS, paired_refs=("grpo", "fastrl")))
