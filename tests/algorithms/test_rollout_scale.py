"""ARS rule on hand-computed cases, growth, clipping, per-prompt mode, state round trip."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from types import SimpleNamespace

from fastrl.algorithms import registry as R
from fastrl.algorithms.rollout_scale import FixedRolloutScaler, ReleaseRolloutScaler, RetentionRolloutScaler
from fastrl.algorithms.sections import ARSConfig, RetentionARSConfig


def test_paper_example():
    s = RetentionRolloutScaler(n_init=8)
    s.observe([3, 5, 4])
    # k̄ = 4, k_max = 5, ρ = 0.5 -> ⌈4 + 0.5 · 1⌉ + 1 = 6
    assert s.end_period() == 6 and s.n == 6
    d = s.last_decision
    assert (d["k_mean"], d["k_max"], d["rho"], d["n_prev"], d["n_next"]) == (4.0, 5.0, 0.5, 8.0, 6.0)


def test_mapping_input_and_several_steps_per_period():
    s = RetentionRolloutScaler(n_init=8)
    s.observe({"a": 2, "b": 2})
    s.observe({"c": 2, "d": 6})
    # k̄ = 3, k_max = 6: ⌈3 + 1.5⌉ + 1 = 6
    assert s.end_period() == 6


def test_growth_when_retention_is_high():
    s = RetentionRolloutScaler(n_init=8, n_max=12)
    s.observe([8, 7, 7, 8])  # ρ = 7.5 / 8 = 0.9375 >= 0.9
    assert s.end_period() == 10 and s.last_decision["grew"] == 1.0
    s.observe([10] * 3)
    assert s.end_period() == 12
    s.observe([12] * 3)
    assert s.end_period() == 12  # capped at n_max


def test_growth_is_capped_at_the_initial_n_by_default():
    s = RetentionRolloutScaler(n_init=8)
    s.observe([8, 8])
    assert s.end_period() == 8


def test_clipping_to_n_min():
    s = RetentionRolloutScaler(n_init=8, n_min=4)
    s.observe([1, 1, 1])  # ⌈1⌉ + 1 = 2 -> clipped to 4
    assert s.end_period() == 4
    s2 = RetentionRolloutScaler(n_init=8, n_min=2, headroom=0)
    s2.observe([0, 0])  # ⌈0⌉ + 0 = 0 -> never below 2
    assert s2.end_period() == 2


def test_empty_period_leaves_n_unchanged():
    s = RetentionRolloutScaler(n_init=8)
    s.observe([2, 2])
    assert s.end_period() == 4
    assert s.end_period() == 4
    assert math.isnan(s.last_decision["k_mean"]) and s.last_decision["num_observations"] == 0.0


def test_integer_target_does_not_round_up():
    s = RetentionRolloutScaler(n_init=8, beta=0.1)
    s.observe([3, 3, 3, 3, 3, 3, 3, 3, 3, 6])  # k̄ = 3.3, k_max = 6: 3.3 + 0.27 = 3.57 -> 4 + 1
    assert s.end_period() == 5
    s = RetentionRolloutScaler(n_init=10, n_min=2, beta=0.5)
    s.observe([4, 6])  # 5 + 0.5 = 5.5 -> 6 + 1
    assert s.end_period() == 7
    s = RetentionRolloutScaler(n_init=10, n_min=2, beta=0.5)
    s.observe([3, 3, 6])  # k̄ = 4, + 1 = 5 exactly -> 5 + 1 (no float creep to 7)
    assert s.end_period() == 6


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 16), st.data())
def test_rule_against_reference(n_init, data):
    n_min = data.draw(st.integers(2, n_init))
    beta = data.draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    s = RetentionRolloutScaler(n_init=n_init, n_min=n_min, beta=beta)
    for _ in range(3):
        n = s.n
        ks = data.draw(st.lists(st.integers(0, n), min_size=1, max_size=10))
        s.observe(ks)
        mean, top = Fraction(sum(ks), len(ks)), max(ks)  # exact arithmetic reference
        if mean / n >= Fraction(9, 10):
            want = min(n + 2, n_init)
        else:
            want = min(n_init, max(n_min, math.ceil(mean + Fraction(beta) * (top - mean)) + 1))
        assert s.end_period() == want
        assert n_min <= s.n <= n_init


def test_per_prompt_mode():
    s = RetentionRolloutScaler(n_init=8, per_prompt=True)
    assert s.n_for("easy") == 8
    s.observe({"easy": 1, "diverse": 8, "mid": 4})
    s.end_period()
    assert s.n_for("easy") == 4  # ⌈1⌉ + 1 = 2 -> n_min 4
    assert s.n_for("diverse") == 8  # ρ = 1: grow, capped at 8
    assert s.n_for("mid") == 5  # ⌈4⌉ + 1
    assert s.n_for("unseen") == s.n  # global rule over all observations: k̄ = 13/3, k_max = 8
    assert s.n == 8 and s.last_decision["per_prompt_changed"] == 2.0
    s.observe({"easy": 4})  # observed under its own n = 4: ρ = 1 -> grow to 6
    s.end_period()
    assert s.n_for("easy") == 6 and s.n_for("mid") == 5
    with pytest.raises(ValueError, match="per-prompt mode needs a mapping"):
        s.observe([1, 2])


def test_global_mode_n_for_is_n():
    s = RetentionRolloutScaler(n_init=8)
    s.observe({"a": 2, "b": 2})
    s.end_period()
    assert s.n_for("a") == s.n_for("zzz") == s.n == 4


def test_counts_above_n_are_clipped():
    s = RetentionRolloutScaler(n_init=8)
    s.observe({"twice": 12, "b": 8})
    s.end_period()
    assert s.last_decision["k_max"] == 8.0


def test_state_dict_round_trip():
    a = RetentionRolloutScaler(n_init=8, per_prompt=True)
    a.observe({"x": 2, "y": 7})
    a.end_period()
    a.observe({"x": 3, "z": 1})  # an open period must survive a checkpoint too
    b = RetentionRolloutScaler(n_init=8, per_prompt=True)
    b.load_state_dict(a.state_dict())
    assert b.n == a.n and b.n_for("x") == a.n_for("x") and b.last_decision == a.last_decision
    assert a.end_period() == b.end_period()
    assert a.state_dict() == b.state_dict()
    with pytest.raises(ValueError, match=r"missing keys \['period'"):
        b.load_state_dict({"n": 4})


def test_fixed_scaler_interface():
    s = FixedRolloutScaler(6)
    s.observe({"a": 1, "b": 2})
    assert s.end_period() == 6 and s.n == 6 and s.n_for("a") == 6
    assert s.last_decision["k_mean"] == 1.5 and s.last_decision["n_next"] == 6.0
    t = FixedRolloutScaler(6)
    t.load_state_dict(s.state_dict())
    assert t.n == 6


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_min=6, n_max=5), r"n_min = 6 > n_max = 5"),
        (dict(n_init=8, n_min=1), r"n_min = 1 must be an integer >= 2"),
        (dict(n_init=1), r"n_init = 1 must be an integer >= 2"),
        (dict(n_init=8, n_max=6), r"n_init = 8 must lie in \[n_min, n_max\] = \[4, 6\]"),
        (dict(beta=-1.0), r"beta = -1.0"),
        (dict(rho_high=0.0), r"rho_high = 0.0 must lie in \(0, 1\]"),
        (dict(headroom=-1), r"headroom = -1"),
    ],
)
def test_bad_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RetentionRolloutScaler(**kwargs)


def test_bad_counts():
    s = ReleaseRolloutScaler()
    with pytest.raises(ValueError, match=r"kept count \['a'\] = -1 must be a non-negative integer"):
        s.observe({"a": -1})
    with pytest.raises(ValueError, match=r"kept count #0 = 2.5"):
        s.observe([2.5])


# ------------------------------------------------------------------ the released rule
def ref_release(stats, progresses, n0, floor=2):
    """docs/algorithms.md, ARS released rule, read literally: periods of (f1, f2) lists -> n after each."""
    f3 = g1 = None
    out = []
    for period, a in zip(stats, progresses):
        if period:
            m1 = sum(f for f, _ in period) / len(period)
            m2 = sum(f for _, f in period) / len(period)
            f3 = a * m1 + (1 - a) * m2
            if g1 is None:
                g1 = (m1 + m2) / 2
        n = n0 if f3 is None or g1 is None or not f3 < g1 else max(round(min(n0 - (g1 - f3), n0)), floor)
        out.append(n)
    return out


def test_one_class_per_rule_each_registered_and_built_from_its_own_section():
    sections = SimpleNamespace(ars=ARSConfig(n_floor=3, period_steps=2),
                               ars_retention=RetentionARSConfig(n_min=2, beta=0.25, period_steps=5))
    fixed = R.build(R.ROLLOUT_SCALERS, "fixed", sections, n_init=8)
    release = R.build(R.ROLLOUT_SCALERS, "ars", sections, n_init=8)
    assert type(fixed) is FixedRolloutScaler and (fixed.n, fixed.period.steps) == (8, 2)
    assert type(release) is ReleaseRolloutScaler and (release.n_floor, release.period.steps) == (3, 2)
    retention = R.build(R.ROLLOUT_SCALERS, "ars_retention", sections, n_init=8)
    assert type(retention) is RetentionRolloutScaler
    assert (retention.n_min, retention.beta, retention.n_max, retention.period.steps) == (2, 0.25, 8, 5)
    assert not hasattr(ARSConfig(), "n_min") and not hasattr(ARSConfig(), "rule")  # each rule's options apart
    assert not any(issubclass(a, b) for a in (FixedRolloutScaler, ReleaseRolloutScaler, RetentionRolloutScaler)
                   for b in (FixedRolloutScaler, ReleaseRolloutScaler, RetentionRolloutScaler) if a is not b)
    with pytest.raises(TypeError):
        ReleaseRolloutScaler(n_init=8, n_min=4)  # a retention option given to the release rule


def test_release_steady_statistics_hand_case():
    # mean 3, max 6 every step; 12 periods of 1 step each: g1 = 4.5 after the first, f3 = 6 - 3a;
    # f3 < g1 from a > 1/2: n = round(8 - (4.5 - f3)) = round(9.5 - 3a): a = 7/12 -> 7.75 -> 8,
    # 8/12 -> 7.5 -> 8 (half to even), 9/12 -> 7.25 -> 7, ..., 12/12 -> 6.5 -> 6.
    s = ReleaseRolloutScaler(n_init=8)
    got = []
    for e in range(1, 13):
        s.observe({"a": 6, "b": 0})
        got.append(s.end_period(e / 12))
    assert got == [8, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 6]
    assert s.g1 == 4.5 and s.last_decision["f3"] == 3.0 and s.last_decision["n_next"] == 6.0


def test_release_g1_is_set_once_and_empty_periods_change_nothing():
    s = ReleaseRolloutScaler(n_init=8)
    assert s.end_period(0.1) == 8 and s.g1 is None and s.f3 is None  # nothing observed yet
    s.observe([2, 2])
    s.end_period(0.5)
    assert s.g1 == 2.0 and s.f3 == 2.0
    s.observe([1, 1])
    assert s.end_period(0.9) == 7  # f3 = 1 < g1 = 2: 8 - 1
    assert s.g1 == 2.0
    assert s.end_period(1.0) == 7  # empty period: f3 and g1 keep their values
    assert s.last_decision["num_observations"] == 0.0


def test_release_floor():
    s = ReleaseRolloutScaler(n_init=4)
    s.observe([8, 8])
    s.end_period(0.0)  # g1 = 8
    s.observe([1, 1])
    assert s.end_period(1.0) == 2  # 4 - 7 -> floor 2


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 12), st.data())
def test_release_against_reference(n0, data):
    periods = data.draw(st.lists(st.lists(st.lists(st.integers(0, 16), min_size=1, max_size=5), max_size=4),
                                 min_size=1, max_size=8))
    progresses = sorted(data.draw(st.lists(st.floats(0, 1), min_size=len(periods), max_size=len(periods))))
    s = ReleaseRolloutScaler(n_init=n0)
    got = []
    stats = []
    for period, a in zip(periods, progresses):
        for counts in period:
            s.observe(counts)
        stats.append([(sum(c) / len(c), max(c)) for c in period])
        got.append(s.end_period(a))
        assert 2 <= s.n <= n0
    assert got == ref_release(stats, progresses, n0)


def test_release_state_dict_round_trip():
    a = ReleaseRolloutScaler(n_init=8)
    a.observe([3, 6])
    a.end_period(0.2)
    a.observe([1, 2])  # an open period travels with the checkpoint
    b = ReleaseRolloutScaler(n_init=8)
    b.load_state_dict(a.state_dict())
    assert a.end_period(0.9) == b.end_period(0.9) and a.state_dict() == b.state_dict()
    with pytest.raises(ValueError, match="release"):
        b.load_state_dict(RetentionRolloutScaler(n_init=8).state_dict())


def test_release_end_period_needs_progress():
    with pytest.raises(ValueError, match="progress"):
        ReleaseRolloutScaler(n_init=8).end_period()


# ------------------------------------------------------------------ periods: the scaler ends them
def _steps(scaler, epochs, counts=None, total=None):
    """Feed one end_step per entry of ``epochs`` (the epoch after each step); the metrics of each."""
    out = []
    for step, epoch in enumerate(epochs, start=1):
        scaler.end_step(counts or {"a": 2, "b": 4}, step=step, epoch=epoch, progress=step / (total or len(epochs)))
        out.append(scaler.metrics())
    return out


def test_a_period_ends_every_period_steps_steps():
    s = ReleaseRolloutScaler(n_init=8, period_steps=2)
    got = _steps(s, [0] * 5)
    assert [bool(m) for m in got] == [False, True, False, True, False]
    assert got[1]["ars/num_observations"] == 2.0 and got[1]["ars/progress"] == 2 / 5
    assert got[3]["ars/progress"] == 4 / 5 and s.periods == 2


def test_a_period_ends_at_each_epoch_boundary_when_period_steps_is_zero():
    s = ReleaseRolloutScaler(n_init=8)
    got = _steps(s, [0, 0, 1, 1, 1, 3])
    assert [bool(m) for m in got] == [False, False, True, False, False, True]
    assert got[2]["ars/num_observations"] == 3.0  # the step that reached epoch 1 belongs to epoch 0's period
    assert got[5]["ars/num_observations"] == 3.0 and s.period.start_epoch == 3


def test_metrics_are_the_decision_as_ars_keys_for_every_rule():
    for scaler in (ReleaseRolloutScaler(n_init=8, period_steps=1),
                   RetentionRolloutScaler(n_init=8, period_steps=1),
                   FixedRolloutScaler(8, period_steps=1)):
        (m,) = _steps(scaler, [0])
        assert m == {f"ars/{k}": float(v) for k, v in scaler.last_decision.items()} and m


def test_the_open_period_resumes_from_the_state_dict():
    for make in (lambda: ReleaseRolloutScaler(n_init=8, period_steps=3),
                 lambda: RetentionRolloutScaler(n_init=8, period_steps=3)):
        a, b = make(), make()
        _steps(a, [0] * 4, total=10)  # a period ended at step 3; step 4 is open
        b.load_state_dict(a.state_dict())
        assert b.period.start_step == 3
        for step in (5, 6):  # the period that began after step 3 ends with step 6
            a.end_step({"a": 1, "b": 1}, step=step, epoch=0, progress=step / 10)
            b.end_step({"a": 1, "b": 1}, step=step, epoch=0, progress=step / 10)
            assert a.metrics() == b.metrics() and bool(a.metrics()) == (step == 6)
        assert a.state_dict() == b.state_dict() and b.period.start_step == 6


def test_period_steps_must_be_a_non_negative_integer():
    with pytest.raises(ValueError, match=r"period_steps = -1 must be an integer >= 0"):
        ReleaseRolloutScaler(n_init=8, period_steps=-1)
