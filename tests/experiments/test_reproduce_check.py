"""make reproduce-check: re-trained runs compared with the committed run metadata, cell by cell."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from experiments import export as E
from experiments import reproduce_check as RC
from experiments.logs import SPEC_FILE
from experiments.stats import t_quantile
from tests.experiments.synthetic import write_run


def _write(specs, acc_before, acc_after, grpo_time, fastrl_time):
    for s in specs:
        t = grpo_time[s.seed] if s.variant == "grpo" else fastrl_time[s.seed]
        write_run(s.run_dir, step_times=[t / 2, t / 2], acc_before=acc_before[s.seed], acc_after=acc_after[s.seed],
                  cpu_per_wall=1.0)
        (s.run_dir / SPEC_FILE).write_text(json.dumps({"identity": s.identity(), "command": "train"}))


def _committed(tmp_path):
    seeds = [1, 2, 3, 4, 5]
    specs = RC.sample_specs("smoke", seeds, tmp_path / "committed_runs")
    acc_before = {k: 0.30 + 0.01 * k for k in seeds}  # 31..35 %
    acc_after = {k: 0.40 + 0.01 * k for k in seeds}
    _write(specs, acc_before, acc_after, {k: 10.0 for k in seeds}, {k: 5.0 + 0.1 * k for k in seeds})
    E.export_runs("table1", specs, tmp_path / "out", tmp_path)
    return E.load_records(tmp_path / "out", "table1"), RC.sample_specs("smoke", seeds, tmp_path / "runs")


def test_a_rerun_like_the_committed_seeds_agrees_and_one_far_off_is_outside_by_how_much(tmp_path):
    records, committed = _committed(tmp_path)
    assert records.seeds() == [1, 2, 3, 4, 5]
    new = RC.sample_specs("smoke", [1], tmp_path / "new")
    _write(new, {1: 0.33}, {1: 0.43}, {1: 10.0}, {1: 5.3})
    checks = RC.compare(new, records, committed)
    settings = {s.setting for s in new}
    assert len(checks) == 6 * len(settings)  # 2 accuracies x 2 methods + 2 speedups, per setting
    assert all(c.verdict == "agrees" for c in checks), RC.report(checks)

    far = RC.sample_specs("smoke", [1], tmp_path / "far")
    _write(far, {1: 0.90}, {1: 0.43}, {1: 10.0}, {1: 5.3})  # the warm start lands elsewhere
    checks = RC.compare(far, records, committed)
    bad = [c for c in checks if c.verdict != "agrees"]
    assert bad and {c.quantity for c in bad} == {"acc_before (grpo)", "acc_before (fastrl)"}
    values = [31.0, 32.0, 33.0, 34.0, 35.0]
    half = t_quantile(0.975, 4) * math.sqrt(2.5) * math.sqrt(1 + 1 / 5)
    assert bad[0].outside_by == pytest.approx(90.0 - (33.0 + half))
    assert bad[0].committed.mean == pytest.approx(sum(values) / 5) and bad[0].same_seed == pytest.approx(31.0)
    assert "outside by" in RC.report(checks) and f"{len(checks) - len(bad)} of {len(checks)} cells agree" in RC.report(checks)


def test_the_cli_trains_nothing_with_collect_only_and_fails_when_a_cell_is_outside(tmp_path, capsys):
    records, _ = _committed(tmp_path)
    new = RC.sample_specs("smoke", [1], tmp_path / "new")
    _write(new, {1: 0.90}, {1: 0.43}, {1: 10.0}, {1: 5.3})
    argv = ["--scale", "smoke", "--seeds", "1", "--runs-root", str(tmp_path / "new"), "--metadata", str(tmp_path / "out"),
            "--collect-only"]
    assert RC.main(argv) == 1
    out = capsys.readouterr().out
    assert "outside by" in out and (tmp_path / "new" / "reproduce_check_smoke.md").is_file()


def test_prediction_range_is_wider_than_the_interval_of_the_mean():
    lo, hi = RC.prediction_range([1.0, 2.0, 3.0])
    half_mean = t_quantile(0.975, 2) * 1.0 / math.sqrt(3)
    assert hi - 2.0 == pytest.approx(half_mean * math.sqrt(3) * math.sqrt(1 + 1 / 3)) and lo < 2.0 - half_mean
    assert RC.prediction_range([1.0]) is None


def test_a_record_made_by_another_command_is_refused_before_anything_trains(tmp_path, capsys, monkeypatch):
    records, _ = _committed(tmp_path)
    trained: list = []
    monkeypatch.setattr(RC, "execute", lambda *a, **k: trained.append(a) or [])
    monkeypatch.setattr(RC, "sample_specs", lambda scale, seeds, root: [
        dataclasses.replace(s, overrides=s.overrides + ("model.tiny.sft_steps=7",))
        for s in _real_sample_specs(scale, seeds, root)])
    argv = ["--scale", "smoke", "--seeds", "1", "--runs-root", str(tmp_path / "new"), "--metadata", str(tmp_path / "out")]
    assert RC.main(argv) == 2
    assert not trained and "nothing to agree with: no setting's runs were made by today's commands" in capsys.readouterr().out


def test_a_stale_committed_table1_is_refused_with_its_reason(tmp_path, monkeypatch):
    from experiments import targets as T

    real = T.discover()
    monkeypatch.setattr(T, "discover", lambda: {**real, "table1": dataclasses.replace(real["table1"], stale="a new recipe")})
    records, committed = _committed(tmp_path)
    other = [dataclasses.replace(s, overrides=s.overrides + ("model.tiny.sft_steps=7",)) for s in committed]
    with pytest.raises(RC.SpecError, match="a new recipe"):
        RC.checkable_settings(other, records, "mini")


def test_a_table1_re_measured_in_part_is_checked_in_the_re_measured_settings_only(tmp_path, capsys, monkeypatch):
    """Table 1 re-measured setting by setting (--keep-committed): the settings whose committed runs are
    today's are re-trained and compared, the others are named and skipped, before anything trains."""
    records, _ = _committed(tmp_path)
    done = "geometry3k-vl_3b"
    trained: list = []
    monkeypatch.setattr(RC, "build_warm_starts", lambda *a, **k: {})
    monkeypatch.setattr(RC, "execute", lambda specs, *a, **k: trained.extend(specs) or [])
    monkeypatch.setattr(RC, "sample_specs", lambda scale, seeds, root: [
        s if s.setting == done else dataclasses.replace(s, overrides=s.overrides + ("model.tiny.sft_steps=7",))
        for s in _real_sample_specs(scale, seeds, root)])
    argv = ["--scale", "smoke", "--seeds", "1", "--runs-root", str(tmp_path / "new"), "--metadata", str(tmp_path / "out")]
    RC.main(argv)
    out = capsys.readouterr().out
    assert trained and {s.setting for s in trained} == {done}
    assert "skipping geometry3k-vl_7b, geoqa8k-vl_3b, geoqa8k-vl_7b" in out and "not re-measured yet" in out


_real_sample_specs = RC.sample_specs


def test_warm_starts_are_built_first_and_the_runs_timed_one_at_a_time(tmp_path, monkeypatch):
    """A run that builds its own warm start is timed beside another SFT and its partner alone: on Dec 6
    that moved seed 1's CPU speedup 1.49x -> 1.28x (Geo3K, large) with identical accuracies. So the warm
    starts go first, --jobs at a time, and the timed runs one at a time whatever --jobs says."""
    _committed(tmp_path)
    calls: list = []
    monkeypatch.setattr(RC, "build_warm_starts", lambda specs, jobs: calls.append(("sft", jobs)) or {})
    monkeypatch.setattr(RC, "execute", lambda specs, launcher, **k: calls.append(("train", k["jobs"])) or [])
    argv = ["--scale", "smoke", "--seeds", "1", "--runs-root", str(tmp_path / "new"), "--metadata", str(tmp_path / "out"),
            "--jobs", "2"]
    RC.main(argv)
    assert calls == [("sft", 2), ("train", 1)]
