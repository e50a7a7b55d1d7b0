"""experiments.ars_replay: the released ARS rule replayed on logged kept counts."""

from __future__ import annotations

import json
import random

import pytest

from experiments import ars_replay as R
from fastrl import metric_keys as K


def _steady(questions: int, kept: int, count_max: int | None, steps: int) -> list[R.StepCounts]:
    return [R.StepCounts(questions, kept, count_max)] * steps


def test_replay_follows_the_documented_worked_example():
    """docs/algorithms.md: with mean 3 and max 6 kept, g1 = 4.5 and f3 = 6 - 3a, so n falls from 8
    only once a > 1/2, to round(8 - (3a - 1.5)) (half to even)."""
    total = 10
    rep = R.replay(_steady(8, 24, 6, total), period_steps=1, total_steps=total)
    expected = [8]  # step 1 runs before any decision
    for s in range(1, total):  # the decision after step s sets the n of step s + 1
        a = s / total
        f3, g1 = a * 3 + (1 - a) * 6, 4.5
        expected.append(round(8 - (g1 - f3)) if f3 < g1 else 8)
    assert rep.ns == expected
    assert rep.changes == sum(1 for x, y in zip(expected, expected[1:]) if x != y) and rep.changes > 0
    assert rep.first_move == expected.index(min(expected)) + 1


def test_flat_counts_with_a_spread_of_at_most_one_never_move_n():
    """f1 constant and f2 <= f1 + 1: g1 - f3 <= 1/2, which rounds back to n0 -- the mini Geo3K picture."""
    steps = _steady(8, 16, 3, 30)
    for period in (1, 2, 3, 5):
        for total in (30, 60, 200):
            assert R.replay(steps, period_steps=period, total_steps=total).changes == 0
            assert R.required_spread(steps, period_steps=period, total_steps=total) == 1.0


def test_required_spread_is_a_bound_on_every_move():
    """Whenever a replay moves n, its first period's spread exceeds ``required_spread`` (random
    count series, fixed seed)."""
    rng = random.Random(0)
    moved = 0
    for _ in range(300):
        steps = []
        for _ in range(rng.randint(4, 20)):
            kept = rng.randint(8, 24)
            lo, hi = -(-kept // 8), min(8, kept - 7)
            steps.append(R.StepCounts(8, kept, rng.randint(lo, hi)))
        period, total = rng.choice([1, 2, 3]), rng.randint(4, 40)
        rep = R.replay(steps, period_steps=period, total_steps=total)
        if rep.changes:
            moved += 1
            first = [steps[i % len(steps)] for i in range(period)]
            spread = sum(s.count_max - s.f1 for s in first) / period  # type: ignore[operator]
            assert spread > R.required_spread(steps, period_steps=period, total_steps=total)
    assert moved > 10  # the property was exercised


def test_counts_for_gives_the_step_its_mean_and_max():
    step = R.StepCounts(8, 20, None)
    for f2 in range(3, 14):
        counts = R.counts_for(step, f2)
        assert len(counts) == 8 and sum(counts) == 20 and max(counts) == f2 and min(counts) >= 1
    with pytest.raises(ValueError):
        R.counts_for(step, 2)  # a max below the mean
    with pytest.raises(ValueError):
        R.counts_for(step, 14)  # the other 7 questions keep at least their seed


def test_f2_models_and_the_logged_max():
    step = R.StepCounts(8, 12, None)
    assert [R.f2_of(step, m) for m in ("d0", "d1", "d2")] == [2, 3, 4]
    assert R.f2_of(R.StepCounts(8, 8, None), "d1") == 1  # every question at 1: no room for a larger max
    assert R.f2_of(R.StepCounts(8, 12, 5), "logged") == 5
    with pytest.raises(ValueError, match="count_max"):
        R.f2_of(step, "logged")


def test_metadata_and_run_directories_are_read(tmp_path):
    rows = [{K.STEP: s, K.PRUNE_KEPT: 16.0, K.ROLLOUT_NUM_PROMPTS: 8.0, K.ROLLOUT_N: 8.0} for s in (2, 1)]
    record = {"dataset": "geometry3k", "model": "vl_3b", "variant": "fastrl", "seed": 1, "steps": rows}
    other = {**record, "variant": "grpo"}
    meta = tmp_path / "table1.jsonl"
    meta.write_text(json.dumps(record) + "\n" + json.dumps(other) + "\n")
    ((label, steps),) = R.load_series(meta, "fastrl")
    assert label == "geometry3k-vl_3b/fastrl/seed1" and [s.f1 for s in steps] == [2.0, 2.0]
    assert steps[0].count_max is None
    run = tmp_path / "runs" / "table1" / "mini" / "geometry3k-vl_3b" / "fastrl" / "seed1"
    run.mkdir(parents=True)
    logged = [{**r, K.PRUNE_COUNT_MAX: 3.0, K.STEP_TIME: 1.0} for r in rows] + [{K.PHASE: K.PHASE_VAL_FINAL}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in logged))
    ((run_label, steps),) = R.load_series(run)
    assert run_label == label and R.setting_of(run_label) == "geometry3k-vl_3b"
    assert [s.count_max for s in steps] == [3, 3]


def test_the_command_prints_one_line_per_setting_and_point(tmp_path, capsys):
    rows = [{K.STEP: s, K.PRUNE_KEPT: 16.0 if s < 4 else 8.0, K.ROLLOUT_NUM_PROMPTS: 8.0} for s in range(1, 11)]
    meta = tmp_path / "t.jsonl"
    meta.write_text("".join(json.dumps({"dataset": "d", "model": "m", "variant": "fastrl", "seed": k, "steps": rows})
                            + "\n" for k in (1, 2)))
    assert R.main([str(meta), "--periods", "1", "3", "--total-steps", "10", "--f2", "d0"]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| d-m |")]
    assert len(table) == 2
    # f1 falls from 2 to 1 after step 3 with f2 = f1: g1 - f3 = 1 > 1/2 in both runs
    assert all("| 2/2 |" in line for line in table)
