"""``make figures``: Fig. 3 (the Table 1 FastRL and CPPO runs) and every figure the notebooks in
analysis/ rebuild from run logs, as PNG in paper_figures/generated/<scale>/."""

from __future__ import annotations

from pathlib import Path

from experiments.grid import Context, specs_for
from experiments.notebooks import execute_notebook, notebooks
from experiments.spec import RunSpec

TARGET = "figures"


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for("fig3", ctx, resolve_paper_steps=ctx.scale == "paper")


def post(ctx: Context, runs: list[RunSpec]) -> None:
    for nb in notebooks():
        print(f"-- notebook {nb.name}", flush=True)
        execute_notebook(nb, runs_root=ctx.runs_root, scale=ctx.scale, figures_dir=ctx.figures_dir or ctx.out_dir)


def collect(ctx: Context) -> list[Path]:
    return sorted((ctx.figures_dir or ctx.out_dir).glob("*.png"))
