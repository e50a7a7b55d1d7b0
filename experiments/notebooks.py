"""Executing the analysis notebooks (analysis/*.ipynb) on a set of run logs.

Notebooks take their inputs from environment variables (read in their first code cell), so the
same stored notebook runs on the real logs (``make figures``), on the committed run metadata
(``make notebooks``) and on smoke-scale logs in the tests:

    FASTRL_RUNS     root of the run logs (default: runs)
    FASTRL_SCALE    scale whose logs to read (default: mini)
    FASTRL_FIGURES  where PNGs go (default: paper_figures/generated/<FASTRL_SCALE>)
    FASTRL_TABLES   where the collected tables are read (default: paper_figures/generated/<FASTRL_SCALE>)
    FASTRL_REPO     the repository root (to import experiments.*)

``python -m experiments.notebooks`` (``make notebooks``) rebuilds the run logs from the committed
``paper_figures/generated/<scale>/run_metadata/*.jsonl`` into a temporary folder and executes every
notebook there; figures go to a temporary folder too (or ``--out``), so nothing committed is written.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

REPO_ROOT = Path(__file__).resolve().parent.parent
ANALYSIS_DIR = REPO_ROOT / "analysis"


def notebooks() -> list[Path]:
    return sorted(ANALYSIS_DIR.glob("*.ipynb"))


def execute_notebook(path: Path, *, runs_root: Path, scale: str, figures_dir: Path, tables_dir: Path | None = None,
                     timeout_s: int = 600) -> "nbformat.NotebookNode":
    """Run every cell of ``path`` and return the executed notebook (outputs are not written back:
    notebooks stay stored without them). Plots show inline (ipykernel's backend) and are saved."""
    import nbformat
    from nbclient import NotebookClient

    env = {"FASTRL_RUNS": str(Path(runs_root).resolve()), "FASTRL_SCALE": scale,
           "FASTRL_FIGURES": str(Path(figures_dir).resolve()),
           "FASTRL_TABLES": str(Path(tables_dir or figures_dir).resolve()), "FASTRL_REPO": str(REPO_ROOT),
           "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nb = nbformat.read(str(path), as_version=4)
        NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                       resources={"metadata": {"path": str(REPO_ROOT)}}).execute()
        return nb
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def generated_dir(scale: str) -> Path:
    return REPO_ROOT / "paper_figures" / "generated" / scale


def runs_from_metadata(generated: Path, dest: Path) -> int:
    """Rebuild each run's ``metrics.jsonl`` (its step lines, then its validation lines, the final
    one last) from the committed ``<generated>/run_metadata/*.jsonl`` under ``dest`` (the runs root,
    laid out as ``runs/``). Returns the number of runs written."""
    written: set[Path] = set()
    for meta in sorted((generated / "run_metadata").glob("*.jsonl")):
        for line in meta.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            run_dir = dest / Path(rec["run_dir"]).relative_to("runs")
            if run_dir in written:
                continue  # a run shared by two targets (e.g. Table 1's GRPO) is the same run
            val = sorted(rec["validation"], key=lambda r: (r.get("phase") == "val_final", r.get("step", 0)))
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*rec["steps"], *val]))
            written.add(run_dir)
    return len(written)


def inline_plots(nb: "nbformat.NotebookNode") -> int:
    """How many plots an executed notebook shows inline."""
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def run_all(scale: str, out: Path, runs_root: Path | None = None) -> tuple[list[Path], dict[str, int]]:
    """Execute every notebook on ``runs_root`` (default: the committed run metadata, rebuilt in a
    temporary folder) with figures into ``out``; also redraw Table 1's speedup-vs-accuracy figure
    from the committed table1.csv. Returns the PNGs written and each notebook's inline plot count."""
    from experiments.figures import speedup_accuracy

    out.mkdir(parents=True, exist_ok=True)
    inline: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="fastrl-notebook-runs-") as tmp:
        if runs_root is None:
            runs_root = Path(tmp)
            n = runs_from_metadata(generated_dir(scale), runs_root)
            print(f"{n} runs rebuilt from {generated_dir(scale).relative_to(REPO_ROOT)}/run_metadata", flush=True)
        for nb in notebooks():
            print(f"-- notebook {nb.name}", flush=True)
            executed = execute_notebook(nb, runs_root=runs_root, scale=scale, figures_dir=out,
                                        tables_dir=generated_dir(scale))
            inline[nb.name] = inline_plots(executed)
    table1 = generated_dir(scale) / "table1.csv"
    if table1.is_file() and any(speedup_accuracy.read_points(table1).values()):
        speedup_accuracy.write_figure(table1, out / speedup_accuracy.FIGURE_NAME)
    return sorted(out.glob("*.png")), inline


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.notebooks", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", default="mini")
    p.add_argument("--runs", type=Path, default=None, help="run logs to read (default: the committed run metadata)")
    p.add_argument("--out", type=Path, default=None, help="where figures go (default: a new temporary folder)")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="fastrl-notebook-figures-"))
    pngs, inline = run_all(args.scale, out, args.runs)
    for png in pngs:
        print(f"   wrote {png}")
    print(f"every notebook in analysis/ ran ({sum(inline.values())} plots inline); figures in {out}; "
          f"open analysis/*.ipynb in Jupyter to see them beside the code")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
