"""GRPO / Dr.GRPO advantages against a plain-Python reference, plus exact cases and bad input."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrl.algorithms.advantages import drgrpo_advantages, grpo_advantages


def reference(rewards: list[float], uids: list, norm_by_std: bool = True) -> list[float]:
    """Loop-per-response reference with Python's statistics module (unbiased stdev)."""
    out = []
    for i, r in enumerate(rewards):
        group = [rewards[j] for j in range(len(rewards)) if uids[j] == uids[i]]
        mu = statistics.fmean(group)
        if norm_by_std:
            out.append((r - mu) / (statistics.stdev(group) + 1e-6))
        else:
            out.append(r - mu)
    return out


@st.composite
def ragged_batch(draw, discrete: bool = True):
    num_q = draw(st.integers(1, 6))
    sizes = draw(st.lists(st.integers(2, 7), min_size=num_q, max_size=num_q))
    uids = [f"q{q}" for q, s in enumerate(sizes) for _ in range(s)]
    perm = draw(st.permutations(range(len(uids))))  # interleaved, non-contiguous groups
    uids = [uids[p] for p in perm]
    if discrete:
        rewards = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5]), min_size=len(uids), max_size=len(uids)))
    else:
        rewards = draw(st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=len(uids), max_size=len(uids)))
    return rewards, uids


@settings(max_examples=80, deadline=None)
@given(ragged_batch(), st.booleans())
def test_matches_reference_discrete(batch, norm):
    rewards, uids = batch
    got = grpo_advantages(torch.tensor(rewards, dtype=torch.float64), uids, norm_by_std=norm)
    want = reference(rewards, uids, norm)
    assert got.tolist() == pytest.approx(want, rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(ragged_batch(discrete=False))
def test_matches_reference_continuous(batch):
    rewards, uids = batch
    got = grpo_advantages(torch.tensor(rewards, dtype=torch.float64), uids)
    want = reference(rewards, uids)
    assert got.tolist() == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_hand_computed_group():
    # rewards 0, 1, 1, 0 (uid x) -> mean 0.5, unbiased std sqrt(1/3)
    adv = grpo_advantages(torch.tensor([0.0, 1.0, 1.0, 0.0]), ["x"] * 4)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert adv.tolist() == pytest.approx([-a, a, a, -a], rel=1e-6)
    assert drgrpo_advantages([0.0, 1.0, 1.0, 0.0], ["x"] * 4).tolist() == [-0.5, 0.5, 0.5, -0.5]


def test_all_equal_rewards_give_exact_zero():
    # 0.1 + 0.1 + 0.1 over 3 is not exactly 0.1 in floating point: the zero must still be exact.
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.3, 0.3, 0.0], dtype=torch.float64)
    uids = [7, 7, 7, "b", (1, 2), (1, 2), "b"]
    adv = grpo_advantages(rewards, uids)
    assert adv[[0, 1, 2, 4, 5]].tolist() == [0.0] * 5
    assert adv[3].item() > 0 > adv[6].item()
    assert drgrpo_advantages(rewards, uids)[[0, 1, 2, 4, 5]].tolist() == [0.0] * 5


def test_any_hashable_uids_and_dtype():
    adv = grpo_advantages([1, 0, 1, 0], [(1, "a"), 2, (1, "a"), 2])
    assert adv.dtype == torch.float32
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "rewards, uids, match",
    [
        ([1.0, 0.0, 1.0], ["a", "a", "b"], r"uid='b'.*single response"),
        ([1.0, float("nan"), 1.0, 0.0], ["a", "a", "b", "b"], r"rewards\[1\].*not finite"),
        ([1.0, float("inf"), 1.0, 0.0], ["a", "a", "b", "b"], r"rewards\[1\].*not finite"),
        ([1.0, 0.0], ["a", "a", "a"], r"len\(uids\) = 3 does not match the batch size 2"),
        ([], [], r"empty batch"),
    ],
)
def test_bad_input(rewards, uids, match):
    with pytest.raises(ValueError, match=match):
        grpo_advantages(torch.tensor(rewards, dtype=torch.float32), uids)


def test_unhashable_uid_is_a_clear_error():
    with pytest.raises(ValueError, match=r"uids\[0\].*not hashable"):
        grpo_advantages([1.0, 0.0], [["a"], ["a"]])
