"""Every analysis notebook executes on smoke-scale logs and writes its figures, and on the committed
run metadata alone (`make notebooks`) it shows its plots inline, redraws every committed figure and
writes nothing committed."""

from __future__ import annotations

import random
from pathlib import Path

import nbformat
import pytest

from experiments.correlation.gradcorr import Pair, write_pairs
from experiments.grid import Context
from experiments.notebooks import REPO_ROOT, execute_notebook, generated_dir, notebooks, run_all
from experiments.run import target_module
from tests.experiments.synthetic import write_run

EXPECTED_PNGS = {
    "fig3_rollout_scale.ipynb": ["fig3_rollout_scale.png"],
    "fig5_correlation.ipynb": ["fig5_correlation.png"],
    "fig6_7_policy_lag.ipynb": ["fig6_policy_lag_low.png", "fig7_policy_lag_high.png"],
    "tau_sweep.ipynb": ["table7_tau_sweep.png"],
    "tables_overview.ipynb": ["table1_overview.png"],
}


def test_every_notebook_is_covered_and_stored_without_outputs():
    assert {p.name for p in notebooks()} == set(EXPECTED_PNGS)
    for p in notebooks():
        nb = nbformat.read(str(p), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{p.name} is stored with outputs"


def _smoke_logs(root: Path) -> None:
    rng = random.Random(0)
    scale = "smoke"
    for seed in (1, 2):
        for v, n in (("fastrl", [4, 4, 3, 2]), ("cppo", [4, 4, 4, 4]), ("grpo", [4] * 4)):
            write_run(root / "table1" / scale / "geometry3k-vl_7b" / v / f"seed{seed}", step_times=[1.0 + rng.random()] * 4,
                      n=n, kept_fraction=[0.5, 0.75, 0.5, 0.5] if v != "grpo" else None, ood={"total": 0.3},
                      acc_after=0.4 + 0.1 * rng.random())
        for tau in (0.2, 0.8, 1.0):
            write_run(root / "table7" / scale / "geometry3k-vl_7b" / f"tau{tau}" / f"seed{seed}",
                      step_times=[1.0 + tau] * 3, kept_fraction=[1 - tau / 2] * 3, acc_after=0.5 - tau / 10)
        for lag in (4, 16):
            for m in ("grpo", "fastrl"):
                write_run(root / "lag" / scale / "geometry3k-vl_7b" / f"{m}_lag{lag}" / f"seed{seed}",
                          step_times=[2.0 if m == "grpo" else 1.0] * 4, val={2: 0.3, 4: 0.4}, acc_after=0.45,
                          entropy=[1.0, 1.1, 1.3, 1.6])
    for setting in ("geometry3k-vl_3b", "geoqa8k-vl_3b"):
        pairs = []
        for q in range(5):
            for i in range(4):
                for j in range(i + 1, 4):
                    jac = rng.random()
                    pairs.append(Pair(f"q{q}", i, j, 1.0, 1.0, 0.0, 0.0, rng.random() < 0.7, q % 2 == 0, 10, 12,
                                      jac, 0.8 * jac + 0.2 * rng.random()))
        d = root / "correlation" / scale / setting / "seed1"
        d.mkdir(parents=True)
        write_pairs(pairs, d / "pairs.csv")


def test_notebooks_execute_on_smoke_logs(tmp_path):
    T1 = target_module("table1")

    runs, figures = tmp_path / "runs", tmp_path / "figures"
    _smoke_logs(runs)
    T1.collect(Context(scale="smoke", seeds=[1, 2], runs_root=runs, out_dir=figures, launcher="inprocess"))
    for nb in notebooks():
        execute_notebook(nb, runs_root=runs, scale="smoke", figures_dir=figures, timeout_s=300)
        for png in EXPECTED_PNGS[nb.name]:
            path = figures / png
            assert path.is_file() and path.stat().st_size > 5000, f"{nb.name} did not write {png}"
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_notebook_without_logs_says_what_to_run(tmp_path):
    from nbclient.exceptions import CellExecutionError

    with pytest.raises(CellExecutionError, match="make lag SCALE=smoke"):
        execute_notebook(Path(__file__).resolve().parents[2] / "analysis" / "fig6_7_policy_lag.ipynb",
                         runs_root=tmp_path, scale="smoke", figures_dir=tmp_path)


@pytest.mark.slow
def test_make_notebooks_runs_on_the_committed_data_and_redraws_every_committed_figure(tmp_path, monkeypatch):
    """No runs/: every notebook executes on the committed run metadata, shows its plots inline, and every
    PNG committed under paper_figures/generated/mini/ is redrawn from committed data (so none is stale
    or drawn from data the repository lacks); the committed folder is left untouched."""
    monkeypatch.chdir(tmp_path)  # no runs/ anywhere it could look
    committed = generated_dir("mini")
    before = {p: p.stat().st_mtime_ns for p in committed.rglob("*")}
    pngs, inline = run_all("mini", tmp_path / "out")
    assert {p: p.stat().st_mtime_ns for p in committed.rglob("*")} == before
    assert set(inline) == {p.name for p in notebooks()}
    assert all(inline[nb] >= 1 for nb in inline if nb != "fig5_correlation.ipynb"), inline  # fig5: no pairs committed
    redrawn = {p.name for p in pngs}
    for png in sorted(committed.glob("*.png")):
        assert png.name in redrawn, f"{png.relative_to(REPO_ROOT)} is not redrawn from committed data"
