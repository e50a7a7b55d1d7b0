"""Generated files are keyed by scale: a smoke run never touches the committed mini tables, and the
grid tables can be rebuilt from the committed run metadata without runs/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import collect as C
from experiments import run as R
from experiments.spec import build_runs
from tests.experiments.synthetic import write_run

REPO = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _table3_runs(runs: Path, scale: str, seeds=(1, 2)) -> None:
    for i, s in enumerate(build_runs("table3", scale, list(seeds), runs)):
        write_run(s.run_dir, step_times=[1.0 + 0.5 * (s.variant == "grpo") + 0.1 * s.seed, 1.0],
                  acc_after=0.3 + 0.01 * i, ood={"long": 0.1 + 0.02 * s.seed})


@pytest.fixture
def generated_root(tmp_path, monkeypatch) -> Path:
    """A stand-in for paper_figures/generated holding committed-looking mini files."""
    root = tmp_path / "generated"
    mini = root / "mini"
    (mini / "run_metadata").mkdir(parents=True)
    for name in ("table3.csv", "table3.md", "table1.csv", "fig3_rollout_scale.png", "run_metadata/table3.jsonl"):
        (mini / name).write_text(f"committed mini {name}\n")
    monkeypatch.setattr(C, "GENERATED_ROOT", root)  # the default of `--out`
    return root


def test_generated_dir_is_keyed_by_scale(tmp_path):
    assert C.generated_dir("smoke", tmp_path) == tmp_path / "smoke"
    assert C.generated_dir("mini") == REPO / "paper_figures" / "generated" / "mini"
    with pytest.raises(ValueError):
        C.generated_dir("huge", tmp_path)


def test_a_smoke_collect_writes_only_under_smoke(tmp_path, generated_root):
    runs = tmp_path / "runs"
    _table3_runs(runs, "smoke")
    before = _files(generated_root / "mini")

    rc = R.main(["table3", "--scale", "smoke", "--seeds", "1 2", "--runs-root", str(runs), "--collect-only"])

    assert rc == 0
    assert _files(generated_root / "mini") == before  # the mini files are untouched
    assert sorted(p.name for p in generated_root.iterdir()) == ["mini", "smoke"]
    assert sorted(_files(generated_root / "smoke")) == ["run_metadata/table3.jsonl", "table3.csv", "table3.md"]
    rows = C.read_rows(generated_root / "smoke" / "table3.csv")
    assert {r["scale"] for r in rows if r["source"] == "measured"} == {"smoke"}
    records = [json.loads(x) for x in (generated_root / "smoke" / "run_metadata" / "table3.jsonl").read_text().splitlines()]
    assert len(records) == 8 and {r["scale"] for r in records} == {"smoke"}


def test_the_committed_mini_files_are_the_only_tracked_ones():
    """.gitignore keeps every scale but mini (and stray files) out of git."""
    import subprocess

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    probe = ["paper_figures/generated/smoke/table1.csv", "paper_figures/generated/paper/table1.md",
             "paper_figures/generated/table1.csv", "paper_figures/generated/mini/table1.csv",
             "paper_figures/generated/mini/run_metadata/table1.jsonl"]
    out = subprocess.run(["git", "check-ignore", "--no-index", *probe], cwd=REPO, capture_output=True, text=True).stdout
    assert set(out.split()) == set(probe[:3])


def test_tables_rebuild_from_the_run_metadata_alone(tmp_path, generated_root):
    runs = tmp_path / "runs"
    _table3_runs(runs, "smoke")
    assert R.main(["table3", "--scale", "smoke", "--seeds", "1 2", "--runs-root", str(runs), "--collect-only"]) == 0
    smoke = generated_root / "smoke"
    from_runs = (smoke / "table3.csv").read_text()
    metadata = (smoke / "run_metadata" / "table3.jsonl").read_text()
    (smoke / "table3.csv").unlink()
    (smoke / "table3.md").unlink()

    # no run directory left: the table comes from run_metadata/table3.jsonl, which is not rewritten
    rc = R.main(["table3", "--scale", "smoke", "--seeds", "1 2", "--runs-root", str(tmp_path / "gone"), "--from-metadata"])
    assert rc == 0
    assert (smoke / "run_metadata" / "table3.jsonl").read_text() == metadata
    # the run_dirs column names the runs the metadata recorded; everything else is identical
    rebuilt = (smoke / "table3.csv").read_text()
    assert rebuilt == from_runs
    assert "d_in_domain_acc_vs_grpo" in rebuilt and "speedup_vs_grpo_ci95" in rebuilt


def test_from_metadata_refuses_what_it_cannot_rebuild(tmp_path, generated_root, capsys):
    runs = tmp_path / "runs"
    _table3_runs(runs, "smoke")
    assert R.main(["table3", "--scale", "smoke", "--seeds", "1 2", "--runs-root", str(runs), "--collect-only"]) == 0
    smoke = generated_root / "smoke"
    table = (smoke / "table3.csv").read_bytes()
    # targets that read more of a run directory than the metadata holds
    assert R.main(["table4", "--scale", "smoke", "--from-metadata"]) == 2
    assert "--from-metadata rebuilds only" in capsys.readouterr().err
    # no metadata at that scale
    assert R.main(["table3", "--scale", "paper", "--from-metadata"]) == 2
    assert "no run metadata" in capsys.readouterr().err
    # a record made by another command (an override changed since) is an error, not mixed in
    path = smoke / "run_metadata" / "table3.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    recs[0]["identity"]["overrides"].append("trainer.total_steps=999")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert R.main(["table3", "--scale", "smoke", "--seeds", "1 2", "--runs-root", str(runs), "--from-metadata"]) == 2
    assert "different command" in capsys.readouterr().err
    assert (smoke / "table3.csv").read_bytes() == table  # nothing was rewritten
    assert not (generated_root / "paper").exists()
