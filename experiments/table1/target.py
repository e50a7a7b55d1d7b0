"""Table 1: main results -- accuracy (in-domain, out-of-domain, average), training time, speedup."""

from __future__ import annotations

from pathlib import Path

from experiments import collect as C
from experiments.grid import Context, collect_grid, paper_ood_evals, specs_for
from experiments.spec import RunSpec

TARGET = "table1"
DESCRIPTION = "main results: 8 methods x 2 visual datasets x 2 model sizes"
# acc_before: the warm start's in-domain accuracy (same for every method of a seed): what RL moved.
METRICS = ("acc_before", "in_domain_acc", "ood/*", "ood_avg", "avg_acc", "avg_acc_gain", "train_time_s",
           "speedup_vs_grpo", "speedup_vs_grpo_max", "kept_fraction", "mean_n", "tokens_trained")
FASTRL_FAMILY = ("fastrl", "fastrl_dapo", "fastrl_gspo")


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def post(ctx: Context, runs: list[RunSpec]) -> None:
    paper_ood_evals(runs, ctx)


def derive(rows: list[C.Row]) -> list[C.Row]:
    """FastRL's average-accuracy gain over GRPO, and its largest speedup per dataset (over model
    sizes) -- the two forms in which the paper states Table 1's result."""
    out = C.delta_rows(rows, metric="avg_acc", reference="grpo", name="avg_acc_gain", methods=("fastrl",))
    speed = [r for r in rows if r.method == "fastrl" and r.metric == "speedup_vs_grpo"]
    for ds in sorted({r.dataset for r in speed}):
        best = max((r for r in speed if r.dataset == ds), key=lambda r: float(r.value))
        out.append(C.Row(**{**best.__dict__, "model": "", "metric": "speedup_vs_grpo_max",
                            "note": f"max over model sizes (at {best.model})"}))
    return out


def collect(ctx: Context) -> list[Path]:
    return list(collect_grid(TARGET, ctx, metrics=METRICS, derive=derive))
