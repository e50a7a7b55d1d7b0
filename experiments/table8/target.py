"""Table 8: grounding with a continuous IoU reward; MDAP groups advantages within 1e-4."""

from __future__ import annotations

from pathlib import Path

from experiments.grid import Context, collect_grid, specs_for
from experiments.runner import task_available
from experiments.spec import RunSpec

TARGET = "table8"
DESCRIPTION = "continuous-reward grounding: GRPO vs FastRL (adv_eps 1e-4)"
METRICS = ("in_domain_acc", "train_time_s", "speedup_vs_grpo", "kept_fraction", "mean_n")


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def collect(ctx: Context) -> list[Path]:
    missing = sorted({s.requires_task for s in specs(ctx) if s.requires_task and not task_available(s.requires_task)})
    preamble = ""
    if missing:
        preamble = (f"**Not measured at scale {ctx.scale}:** it needs the generated grounding task(s) "
                    f"{', '.join(missing)} (boxes with a continuous IoU reward), which fastrl.data.synthetic does "
                    "not provide yet. Only the paper's numbers are shown.")
    return list(collect_grid(TARGET, ctx, metrics=METRICS, preamble=preamble))
