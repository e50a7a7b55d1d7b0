"""DAPO dynamic sampling: the accuracy keep rule and the refill buffer."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrl.algorithms.group_filter import DynamicSamplingBuffer, NoGroupFilter, dapo_keep_groups


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 1.0])), min_size=1, max_size=30))
def test_keep_rule_against_reference(rows):
    uids = [f"u{q}" for q, _ in rows]
    acc = [a for _, a in rows]
    got = dapo_keep_groups(torch.tensor(acc), uids)
    for u in set(uids):
        vals = {a for q, a in zip(uids, acc) if q == u}
        assert got[u] == (len(vals) == 2)
    assert list(got) == list(dict.fromkeys(uids))  # first-appearance order


def test_filters_on_accuracy_not_on_overall_reward():
    # overall reward = accuracy + 0.5 x format: group "a" could have rewards (1.0, 1.5) — mixed —
    # yet its accuracies are all 1, so DAPO drops it; "b" is all wrong; only "c" is kept
    uids = ["a", "a", "b", "b", "c", "c"]
    acc = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert dapo_keep_groups(acc, uids) == {"a": False, "b": False, "c": True}


def test_buffer_fills_across_tries_and_truncates():
    buf = DynamicSamplingBuffer(target_groups=3, max_tries=5)
    d = buf.add([1, 1, 0, 1], ["a", "a", "b", "b"])
    assert d == {"a": False, "b": True} and not buf.full and buf.num_kept == 1
    buf.add([0, 1, 1, 0, 0, 1], ["c", "c", "d", "d", "e", "e"], payloads={"c": "C", "d": "D", "e": "E"})
    assert buf.full
    assert buf.take() == [("b", [2, 3]), ("c", "C"), ("d", "D")]  # surplus "e" dropped
    assert buf.metrics() == {"rollout/tries": 2.0} and buf.num_kept == 4 and buf.seen_groups == 5


def test_kept_uids_are_what_a_later_try_must_not_roll_out_again():
    """Issue 24, defect 1: the trainer passes them to the prompt stream, so a DAPO try after an
    epoch wrap cannot draw a prompt already kept (its groups would merge by uid)."""
    buf = DynamicSamplingBuffer(target_groups=3, max_tries=5)
    buf.add([1, 1, 0, 1, 0, 1], ["a", "a", "b", "b", "c", "c"])
    assert buf.kept_uids == {"b", "c"}


def test_buffer_error_after_max_tries():
    buf = DynamicSamplingBuffer(target_groups=2, max_tries=20)
    for _ in range(19):
        buf.add([1, 1], ["easy", "easy"])
    with pytest.raises(ValueError, match=r"DAPO dynamic sampling could not fill the batch: got 0 of 2 "
                                         r"groups with mixed accuracy after 20 tries.*lower.*raise"):
        buf.add([0, 0], ["hard", "hard"])


def test_take_before_full_and_missing_payload():
    buf = DynamicSamplingBuffer(target_groups=2)
    with pytest.raises(ValueError, match=r"only 0 of 2 groups kept so far"):
        buf.take()
    with pytest.raises(ValueError, match=r"no payload for kept group uid='x'"):
        buf.add([0, 1], ["x", "x"], payloads={})


def test_no_group_filter_keeps_everything_in_one_try():
    buf = NoGroupFilter(target_groups=1)
    assert not buf.full
    assert buf.add([1, 1, 0, 1], ["a", "a", "b", "b"]) == {"a": True, "b": True}
    assert buf.full and buf.take() == [("a", [0, 1]), ("b", [2, 3])]


@pytest.mark.parametrize(
    "acc, uids, match",
    [
        ([0.5, 1.5], ["a", "a"], r"accuracies\[1\] = 1.5 \(uid='a'\) is outside \[0, 1\]"),
        ([float("nan"), 1.0], ["a", "a"], r"accuracies\[0\] = nan is not finite"),
        ([1.0], ["a", "b"], r"len\(uids\) = 2 does not match the batch size 1"),
        ([], [], r"empty batch"),
    ],
)
def test_bad_input(acc, uids, match):
    with pytest.raises(ValueError, match=match):
        dapo_keep_groups(acc, uids)


def test_bad_construction():
    with pytest.raises(ValueError, match=r"target_groups = 0 must be an integer >= 1"):
        DynamicSamplingBuffer(0)
    with pytest.raises(ValueError, match=r"max_tries = 0 must be an integer >= 1"):
        DynamicSamplingBuffer(4, max_tries=0)
