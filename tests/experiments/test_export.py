"""Run metadata export: one line per finished run, with the command, identity, commit and numbers."""

from __future__ import annotations

import json
import math
import shlex
import shutil
from pathlib import Path

import pytest

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


def test_a_record_gives_how_often_n_moved_from_its_steps():
    """Committed records predate n_changes; their per-step rollout/n gives it without re-export."""
    record = {"run_dir": "r", "summary": {"steps": 3, "train_time_s": 1.0, "acc_after": 0.5, "tokens_generated": 1.0,
                                          "tokens_trained": 1.0, "kept_fraction": 1.0, "mean_n": 7.0},
              "steps": [{K.ROLLOUT_N: n} for n in (8.0, 7.0, 7.0, 8.0)]}
    assert E.summary_from_record(record).n_changes == 2
    assert math.isnan(E.summary_from_record({**record, "steps": [{}, {K.ROLLOUT_N: 8.0}]}).n_changes)


def test_nothing_finished_writes_nothing(tmp_path):
    specs = build_runs("table3", "smoke", [1], tmp_path / "runs")
    assert E.export_runs("table3", specs, tmp_path / "out", tmp_path) is None
    assert not (tmp_path / "out").exists()


def test_an_exported_command_carries_no_interpreter_path():
    cmd = "/work/measure/.venv/bin/python -m fastrl.cli train methods/grpo.yaml 'data.ood_variants=[total]' --scale mini"
    assert E.portable_command(cmd) == "python -m fastrl.cli train methods/grpo.yaml 'data.ood_variants=[total]' --scale mini"
    assert E.portable_command("deepspeed --num_gpus 2 --module fastrl.cli train x.yaml").startswith("deepspeed ")
    assert E.portable_command(None) is None


def test_an_old_record_reads_under_the_current_key_names():
    record = {"identity": {"config": "methods/grpo.yaml", "overrides": ["model.sft_steps=2000", "trainer.lr=1e-4"]},
              "command": "/x/bin/python -m fastrl.cli train methods/grpo.yaml model.sft_steps=2000 trainer.lr=1e-4",
              "summary": {"acc_after": 0.5}}
    up = E.upgrade_record(record)
    assert up["identity"]["overrides"] == ["model.tiny.sft_steps=2000", "trainer.optim.lr=1e-4"]
    assert up["command"] == "python -m fastrl.cli train methods/grpo.yaml model.tiny.sft_steps=2000 trainer.optim.lr=1e-4"
    assert up["summary"] == record["summary"] and E.upgrade_record(up) == up


COMMITTED = Path(__file__).resolve().parents[2] / "paper_figures" / "generated" / "mini"


def test_committed_run_metadata_is_portable_and_under_current_key_names():
    """What a user re-runs from the committed metadata must run on their machine, as it is."""
    from fastrl.migrations import RENAMED_KEYS

    files = sorted((COMMITTED / E.METADATA_DIR).glob("*.jsonl"))
    assert files
    for path in files:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            record = json.loads(line)
            argv = shlex.split(record["command"])
            assert not [a for a in argv if a.startswith("/")], f"{path.name}:{i}: absolute path in {record['command']}"
            keys = {o.partition("=")[0] for o in record["identity"]["overrides"]}
            assert not keys & set(RENAMED_KEYS), f"{path.name}:{i}: old key names {keys & set(RENAMED_KEYS)}"


def test_every_committed_table_is_rebuilt_from_its_committed_metadata(tmp_path):
    """``make reproduce EXP_FLAGS=--from-metadata`` rebuilds the committed tables byte for byte (the
    records' identities match what the configs now ask for)."""
    from experiments import run as R

    from experiments.targets import discover

    shutil.copytree(COMMITTED / E.METADATA_DIR, tmp_path / "mini" / E.METADATA_DIR)
    assert R.main(["reproduce", "--scale", "mini", "--from-metadata", "--out", str(tmp_path)]) == 0
    rebuilt = sorted(p.name for p in (tmp_path / "mini").glob("*.csv"))
    current = [t.name for t in discover().values() if t.from_metadata and not t.stale
               and E.metadata_path(COMMITTED, t.name).is_file()]
    assert current and sorted(f"{n}.csv" for n in current) == rebuilt
    for name in rebuilt + [n.replace(".csv", ".md") for n in rebuilt]:
        assert (tmp_path / "mini" / name).read_bytes() == (COMMITTED / name).read_bytes(), name


def test_a_stale_mark_holds_only_while_the_committed_metadata_predates_the_configs():
    """``register.stale`` skips a table in ``--from-metadata``; it must come off once the table is
    re-measured: every run the configs ask for recorded, by the command they now ask for (a re-measure
    in progress, ``--keep-committed``, commits whole settings and keeps the mark until the last)."""
    from experiments.spec import SpecError, build_runs
    from experiments.targets import discover

    stale = [t for t in discover().values() if t.stale and t.from_metadata]
    for target in stale:
        records = E.load_records(COMMITTED, target.name)
        specs = build_runs(target.name, "mini", records.seeds(), Path("runs"))
        mismatched = missing = 0
        for spec in specs:
            try:
                missing += records.summary(spec) is None
            except SpecError:
                mismatched += 1
        assert mismatched or missing, f"{target.name}: its committed metadata matches the configs; drop register.stale"


def test_a_stale_table_is_refused_from_metadata_with_its_reason(tmp_path, capsys):
    from experiments import run as R
    from experiments.targets import discover

    stale = next((t for t in discover().values() if t.stale and t.from_metadata), None)
    if stale is None:
        pytest.skip("no table is marked stale")
    shutil.copytree(COMMITTED / E.METADATA_DIR, tmp_path / "mini" / E.METADATA_DIR)
    assert R.main([stale.name, "--scale", "mini", "--from-metadata", "--out", str(tmp_path)]) == 2
    assert stale.stale in capsys.readouterr().err
