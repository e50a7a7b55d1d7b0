"""The data-parallel mini-batch plan: same union on any number of ranks, equal work per rank."""

from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from fastrl.training.update import micro_batches, minibatch_sizes, plan_minibatches, shard


def test_minibatch_sizes_are_multiples_of_world():
    assert minibatch_sizes(12, 4, 2) == [4, 4, 2, 2]
    assert minibatch_sizes(8, 1, 2) == [8]
    assert minibatch_sizes(4, 8, 2) == [2, 2]  # never more mini-batches than world-sized units


@settings(max_examples=60, deadline=None)
@given(
    units=st.integers(1, 40), world=st.sampled_from([1, 2, 4]), k=st.integers(1, 6),
    mode=st.sampled_from(["fixed_updates", "fixed_minibatch"]), mb=st.integers(1, 64), micro=st.integers(1, 8),
)
def test_plan_is_rank_invariant_and_balanced(units, world, k, mode, mb, micro):
    total = units * world
    plans = {}
    for w in (1, world):
        g = torch.Generator().manual_seed(0)
        plans[w] = plan_minibatches(total, mode=mode, updates_per_step=k, mini_batch_size=mb, world=w, generator=g)
    # Same members in every global mini-batch as long as the sizes agree (they do when world divides).
    flat = sorted(i for m in plans[world] for i in m)
    assert flat == list(range(total))
    if mode == "fixed_updates":
        assert len(plans[world]) == min(k, units)
    for members in plans[world]:
        assert len(members) % world == 0
        per_rank = [shard(members, r, world) for r in range(world)]
        assert len({len(p) for p in per_rank}) == 1
        assert len({len(micro_batches(p, micro)) for p in per_rank}) == 1
        assert sorted(i for p in per_rank for i in p) == sorted(members)
