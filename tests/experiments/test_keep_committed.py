"""``--keep-committed``: a re-measure longer than one sitting is built setting by setting.

A setting whose every run is in the committed metadata, made by the command the configs now ask
for, is collected from it and written back instead of retrained; anything less (a missing run, a
record made by another command, a run directory here) retrains the whole setting, so a setting's
paired comparisons never mix machines or sessions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments import export as E
from experiments import run as R
from experiments.collect import read_rows
from experiments.grid import Context
from experiments.spec import build_runs
from tests.experiments.synthetic import write_run

KEPT = "geometry3k-vl_3b"


def _trained(tmp_path: Path) -> tuple[list, Path]:
    """Synthetic finished runs of smoke Table 1 (seed 1), exported to <tmp>/out/run_metadata/table1.jsonl."""
    specs = build_runs("table1", "smoke", [1], tmp_path / "runs")
    for i, s in enumerate(specs):
        write_run(s.run_dir, step_times=[1.0 + i % 3, 2.0], acc_before=0.2, acc_after=0.3 + 0.01 * i, n=[8, 7],
                  ood={"total" if s.dataset == "geometry3k" else "default": 0.1})
    path = E.export_runs("table1", specs, tmp_path / "out", tmp_path)
    assert path is not None
    return specs, path


def _drop_runs(specs, setting: str) -> None:
    for s in specs:
        if s.setting == setting:
            shutil.rmtree(s.run_dir)


def test_only_whole_settings_without_local_runs_are_kept(tmp_path):
    specs, path = _trained(tmp_path)
    _drop_runs(specs, KEPT)
    records = E.load_records(tmp_path / "out", "table1")
    kept = E.committed_settings(records, specs)
    assert {s.setting for s in kept} == {KEPT}  # the other settings have their run directories here
    assert len(kept) == sum(s.setting == KEPT for s in specs)

    # one run missing from the metadata: the whole setting is retrained
    lines = path.read_text().splitlines()
    one = next(i for i, x in enumerate(lines) if json.loads(x)["dataset"] == "geometry3k" and json.loads(x)["model"] == "vl_3b")
    assert E.committed_settings(E.RunRecords([json.loads(x) for j, x in enumerate(lines) if j != one]), specs) == {}
    # a record made by another command (e.g. the warm-start recipe changed since): retrained too
    changed = [json.loads(x) for x in lines]
    changed[one]["identity"]["overrides"] = [*changed[one]["identity"]["overrides"], "model.tiny.sft_steps=2000"]
    assert E.committed_settings(E.RunRecords(changed), specs) == {}


def test_a_kept_setting_is_not_retrained_but_collected_and_written_back(tmp_path, capsys):
    specs, path = _trained(tmp_path)
    committed = {(r["dataset"], r["model"], r["variant"]): r for r in map(json.loads, path.read_text().splitlines())}
    _drop_runs(specs, KEPT)
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                  launcher="inprocess", keep_committed=True)
    assert R.run_target("table1", ctx, dry_run=True) == []
    plan = capsys.readouterr().out
    assert f"kept from {path}: 8 runs of {KEPT} (not retrained)" in plan
    assert "24 runs, 24 finished (reused), 0 to run" in plan  # the plan counts what is left besides the kept 8

    assert R.run_target("table1", ctx, collect_only=True) == []
    rows = [r for r in read_rows(tmp_path / "out" / "table1.csv") if r["source"] == "measured"]
    kept_rows = [r for r in rows if r["dataset"] == "Geometry3K" and r["model"] == "Qwen2.5-VL-3B-Instruct"]
    assert kept_rows and {r["method"] for r in kept_rows} >= {"grpo", "fastrl"}
    written = {(r["dataset"], r["model"], r["variant"]): r for r in map(json.loads, path.read_text().splitlines())}
    assert written.keys() == committed.keys()
    for key, record in committed.items():
        if key[:2] == ("geometry3k", "vl_3b"):
            assert written[key] == record  # written back as it was, commit and all
        else:
            assert written[key]["summary"] == record["summary"]  # collected again from the runs here


def test_without_the_flag_the_committed_metadata_is_not_read(tmp_path, capsys):
    specs, _ = _trained(tmp_path)
    _drop_runs(specs, KEPT)
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out", launcher="inprocess")
    R.run_target("table1", ctx, dry_run=True)
    out = capsys.readouterr().out
    assert "kept from" not in out and "8 to run" in out


def test_a_sitting_of_some_settings_leaves_the_others_committed_records_as_they_are(tmp_path, capsys):
    """``--settings``: only those settings are trained and collected; the committed records of the
    others (made by other commands, say: a re-measure in progress) are written back untouched."""
    specs, path = _trained(tmp_path)
    old = [json.loads(x) for x in path.read_text().splitlines()]
    for r in old:  # the committed metadata predates the configs (another warm-start recipe)
        r["identity"]["overrides"] = [*r["identity"]["overrides"], "model.tiny.sft_steps=2000"]
        r["summary"]["acc_after"] = 0.99
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in old))
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                  launcher="inprocess", keep_committed=True, settings=(KEPT,))
    assert R.run_target("table1", ctx, collect_only=True) == []
    out = capsys.readouterr().out
    assert "kept from" in out and "no complete setting" in out and "left alone: 24 committed runs" in out
    rows = [r for r in read_rows(tmp_path / "out" / "table1.csv") if r["source"] == "measured" and r["model"]]
    assert {(r["dataset"], r["model"]) for r in rows} == {("Geometry3K", "Qwen2.5-VL-3B-Instruct")}
    written = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(written) == len(old)
    mine = [r for r in written if (r["dataset"], r["model"]) == ("geometry3k", "vl_3b")]
    assert len(mine) == 8 and all(r["summary"]["acc_after"] < 0.9 for r in mine)  # trained here, today's command
    others = sorted((r for r in written if (r["dataset"], r["model"]) != ("geometry3k", "vl_3b")), key=json.dumps)
    assert others == sorted((r for r in old if (r["dataset"], r["model"]) != ("geometry3k", "vl_3b")), key=json.dumps)


def test_an_unknown_setting_is_refused_with_the_valid_ones(tmp_path):
    from experiments.spec import SpecError

    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out", launcher="inprocess",
                  settings=("geometry3k-vl_9b",))
    with pytest.raises(SpecError, match="geometry3k-vl_9b: not a setting of table1; valid: geometry3k-vl_3b, "):
        R.run_target("table1", ctx, dry_run=True)
