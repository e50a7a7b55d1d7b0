"""Run metadata export: one line per finished run, with the command, identity, commit and numbers."""

from __future__ import annotations

import json

from experiments import export as E
from experiments.logs import SPEC_FILE
from experiments.spec import build_runs
from fastrl import metric_keys as K
from tests.experiments.synthetic import write_run


def test_export_writes_finished_runs_with_their_command_and_numbers(tmp_path):
    specs = build_runs("table3", "smoke", [1, 2], tmp_path / "runs")
    finished, unfinished = specs[:-1], specs[-1]
    for i, s in enumerate(finished):
        write_run(s.run_dir, step_times=[1.0 + i, 2.0], acc_before=0.2, acc_after=0.4, n=[8, 6],
                  kept_fraction=[0.5, 0.75], cpu_per_wall=0.5)
        (s.run_dir / SPEC_FILE).write_text(json.dumps({"identity": s.identity(), "command": f"train {s.variant}",
                                                       "run_wall_s": 3.5, "code_commit": "abc123",
                                                       "environment": {"packages": {"torch": "2.13.0+cpu"}}}))
    write_run(unfinished.run_dir, step_times=[1.0], finished=False)

    path = E.export_runs("table3", specs, tmp_path / "out", tmp_path)
    lines = [json.loads(x) for x in path.read_text().splitlines()]

    assert path == tmp_path / "out" / "run_metadata" / "table3.jsonl" and len(lines) == len(finished)
    assert {r["scale"] for r in lines} == {"smoke"}
    assert {(r["variant"], r["seed"]) for r in lines} == {(s.variant, s.seed) for s in finished}
    first = next(r for r in lines if (r["variant"], r["seed"]) == (finished[0].variant, finished[0].seed))
    assert first["command"] == f"train {finished[0].variant}" and first["trained_at_commit"] == "abc123"
    assert first["trained_in"] == {"packages": {"torch": "2.13.0+cpu"}}
    assert first["identity"] == finished[0].identity()
    assert first["summary"]["train_time_s"] == 3.0 and first["summary"]["acc_after"] == 0.4
    assert first["summary"]["cpu_s"]["step"] == 1.5  # per-stage CPU seconds, for the CPU token bound
    assert [s[K.ROLLOUT_N] for s in first["steps"]] == [8, 6]
    assert first["collected_at_commit"] == "unknown"  # tmp_path is not a git checkout


def test_nothing_finished_writes_nothing(tmp_path):
    specs = build_runs("table3", "smoke", [1], tmp_path / "runs")
    assert E.export_runs("table3", specs, tmp_path / "out", tmp_path) is None
    assert not (tmp_path / "out").exists()
