"""``make figures``: Fig. 3 (the Table 1 FastRL and CPPO runs), every figure the notebooks in
analysis/ rebuild from run logs, and Table 1's speedup-vs-accuracy figure (from the collected
table1.csv, so ``--collect-only`` redraws it without runs), as PNG in paper_figures/generated/<scale>/."""

from __future__ import annotations

from pathlib import Path

from experiments.figures import speedup_accuracy
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
    figures = ctx.figures_dir or ctx.out_dir
    table1 = ctx.out_dir / "table1.csv"  # written by `make table1` at this scale
    if table1.is_file() and any(speedup_accuracy.read_points(table1).values()):
        speedup_accuracy.write_figure(table1, figures / speedup_accuracy.FIGURE_NAME)
    else:  # a missing table, or one seed (no paired intervals), leaves the other figures standing
        print(f"   {speedup_accuracy.FIGURE_NAME} not drawn: {table1} has no paired intervals; "
              f"`make table1 SCALE={ctx.scale}` with at least 2 seeds first")
    return sorted(figures.glob("*.png"))
