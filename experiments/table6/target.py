"""Table 6: dataset statistics, written by ``python -m data_prep.all`` (owned by data_prep)."""

from __future__ import annotations

from pathlib import Path

from experiments.grid import Context
from experiments.spec import RunSpec

TARGET = "table6"


def specs(ctx: Context) -> list[RunSpec]:
    return []


def post(ctx: Context, runs: list[RunSpec]) -> None:
    from data_prep.all import main

    main(["--table-dir", str(ctx.out_dir)])


def collect(ctx: Context) -> list[Path]:
    return [ctx.out_dir / "table6.csv", ctx.out_dir / "table6.md"]
