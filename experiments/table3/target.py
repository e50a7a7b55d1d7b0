"""Table 3: text-only MATH with a Llama-family model -- in-domain accuracy, AIME average, time."""

from __future__ import annotations

from pathlib import Path

from experiments.grid import Context, collect_grid, paper_ood_evals, specs_for
from experiments.spec import RunSpec

TARGET = "table3"
DESCRIPTION = "text-only MATH: GRPO, CPPO, GRESO, FastRL (in-domain, AIME, time)"
METRICS = ("acc_before", "in_domain_acc", "aime_avg", "ood/*", "train_time_s", "train_time_h", "speedup_vs_grpo")


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def post(ctx: Context, runs: list[RunSpec]) -> None:
    paper_ood_evals(runs, ctx)


def collect(ctx: Context) -> list[Path]:
    # "AIME average" is the mean over the out-of-domain benchmarks: AIME 2024/2025 at paper scale,
    # the held-out mini-math generators at mini scale.
    return list(collect_grid(TARGET, ctx, metrics=METRICS, rename={"ood_avg": "aime_avg"}))
