"""Executing the analysis notebooks (analysis/*.ipynb) on a set of run logs.

Notebooks take their inputs from environment variables (read in their first cell), so the same
stored notebook runs on the real logs (``make figures``) and on smoke-scale logs in the tests:

    FASTRL_RUNS     root of the run logs (default: runs)
    FASTRL_SCALE    scale whose logs to read (default: mini)
    FASTRL_FIGURES  where PNGs go (default: paper_figures/generated/<FASTRL_SCALE>)
    FASTRL_REPO     the repository root (to import experiments.*)
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ANALYSIS_DIR = REPO_ROOT / "analysis"


def notebooks() -> list[Path]:
    return sorted(ANALYSIS_DIR.glob("*.ipynb"))


def execute_notebook(path: Path, *, runs_root: Path, scale: str, figures_dir: Path, timeout_s: int = 600) -> None:
    """Run every cell of ``path`` (outputs are not written back: notebooks stay stored without them)."""
    import nbformat
    from nbclient import NotebookClient

    env = {"FASTRL_RUNS": str(Path(runs_root).resolve()), "FASTRL_SCALE": scale,
           "FASTRL_FIGURES": str(Path(figures_dir).resolve()), "FASTRL_REPO": str(REPO_ROOT), "MPLBACKEND": "Agg"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nb = nbformat.read(str(path), as_version=4)
        NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                       resources={"metadata": {"path": str(REPO_ROOT)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
