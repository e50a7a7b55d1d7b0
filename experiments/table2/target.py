"""Table 2: ablation -- FastRL without MDAP and without ARS (larger model, both visual datasets)."""

from __future__ import annotations

from pathlib import Path

from experiments import collect as C
from experiments.grid import Context, collect_grid, paper_ood_evals, specs_for
from experiments.spec import RunSpec

TARGET = "table2"
DESCRIPTION = "ablation: FastRL without MDAP / without ARS (GRPO and FastRL shared with table1)"
METRICS = ("acc_before", "in_domain_acc", "ood_avg", "avg_acc", "avg_acc_delta_vs_fastrl", "train_time_s", "speedup_vs_grpo",
           "kept_fraction", "mean_n")


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def post(ctx: Context, runs: list[RunSpec]) -> None:
    paper_ood_evals(runs, ctx)


def derive(rows: list[C.Row]) -> list[C.Row]:
    return C.delta_rows(rows, metric="avg_acc", reference="fastrl", name="avg_acc_delta_vs_fastrl",
                        methods=("fastrl_no_mdap", "fastrl_no_ars"))


def collect(ctx: Context) -> list[Path]:
    # paired by seed against GRPO (speed) and against FastRL (what removing a component costs)
    return list(collect_grid(TARGET, ctx, metrics=METRICS, derive=derive, paired_refs=("grpo", "fastrl")))
