"""Where ``fastrl eval`` writes, decided before any model loads, with the run directories' rule: an
existing result is never replaced silently.

- Default (no ``--out``): inside the evaluated run, ``<run>/eval/<benchmark>/eval.json`` (+ eval.md)
  per benchmark; for a model directory or a hub id that is not a run,
  ``runs/eval/<model name>/<benchmark>/``.
- An ``eval.json`` already there stops the evaluation with one line; ``--force-new`` moves that
  folder's eval.json and eval.md to ``<folder>.replaced-<UTC time>/`` first (nothing is deleted).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Sequence

from fastrl.evaluation.metrics import benchmark_dirname

EVAL_FILES = ("eval.json", "eval.md")
REPLACED_INFIX = ".replaced-"  # as run directories (fastrl.training.run_dir)


def default_eval_root(model: str) -> Path:
    """``<run>/eval`` for a run directory (or its ``final/``), else ``runs/eval/<model name>``."""
    path = Path(model)
    if (path / "final").is_dir():
        return path / "eval"
    if path.name == "final" and (path.parent / "metrics.jsonl").is_file():
        return path.parent / "eval"
    name = path.name if path.exists() else model.strip("/")
    return Path("runs") / "eval" / re.sub(r"[^A-Za-z0-9_.-]+", "--", name)


def eval_dirs(benchmarks: Sequence[str], out: Path, *, per_benchmark: bool) -> dict[str, Path]:
    """{benchmark name or "" (all in one file): the folder its eval.json goes to}."""
    return {b: out / benchmark_dirname(b) for b in benchmarks} if per_benchmark else {"": out}


def claim(dirs: Sequence[Path], *, force_new: bool) -> list[Path]:
    """Refuse (one ``ValueError`` line) when a folder already holds an eval.json; with
    ``force_new`` move its eval.json and eval.md aside instead. Returns the folders moved to."""
    taken = [d for d in dirs if (d / "eval.json").exists()]
    if taken and not force_new:
        raise ValueError(f"{taken[0] / 'eval.json'} exists{f' (and {len(taken) - 1} more)' if len(taken) > 1 else ''}; "
                         "an evaluation is never replaced silently: pass --force-new to move it aside to "
                         f"{taken[0]}{REPLACED_INFIX}<UTC time>/, or --out another folder")
    return [_move_aside(d) for d in taken]


def _move_aside(folder: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = folder.with_name(f"{folder.name}{REPLACED_INFIX}{stamp}")
    suffix = 1
    while dest.exists():
        suffix += 1
        dest = folder.with_name(f"{folder.name}{REPLACED_INFIX}{stamp}-{suffix}")
    dest.mkdir(parents=True)
    for name in EVAL_FILES:
        if (folder / name).exists():
            os.replace(folder / name, dest / name)
    return dest
