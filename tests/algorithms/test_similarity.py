"""Token-level Jaccard distance against Python sets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrl.algorithms import similarity as sim
from fastrl.algorithms.similarity import PackedTokens, grouped_jaccard_distances, jaccard_distance_matrix


def ref_distance(a, b) -> float:
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 0.0
    return 1.0 - len(sa & sb) / len(sa | sb)


token_lists = st.lists(st.lists(st.integers(0, 30), max_size=12), min_size=1, max_size=9)


@settings(max_examples=80, deadline=None)
@given(token_lists, st.data())
def test_grouped_matches_sets(seqs, data):
    groups = data.draw(st.lists(st.integers(0, 3), min_size=len(seqs), max_size=len(seqs)))
    g = torch.tensor(groups)
    out = grouped_jaccard_distances(seqs, g, 4, dtype=torch.float64)
    for k in range(4):
        members = [i for i, x in enumerate(groups) if x == k]
        assert out[k].shape == (len(members), len(members))
        for a, i in enumerate(members):
            for b, j in enumerate(members):
                # bit-for-bit: the same float64 operations as the reference
                assert out[k][a, b].item() == ref_distance(seqs[i], seqs[j])


@settings(max_examples=15, deadline=None)
@given(st.integers(11, 20), st.integers(0, 1000))
def test_large_groups_take_the_dense_path(n, seed):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, 40, size=rng.integers(0, 15)).tolist() for _ in range(n)]
    d = jaccard_distance_matrix(seqs)
    assert n > sim._HIST_MAX_SLOTS
    want = [[ref_distance(a, b) for b in seqs] for a in seqs]
    assert d.tolist() == [pytest.approx(row, abs=1e-6) for row in want]


def test_empty_sets_are_identical_and_far_from_everything_else():
    d = jaccard_distance_matrix([[], [], [3, 3], [3]])
    assert d.tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]


def test_repeats_count_once_and_big_vocab_ids():
    v = 151_935
    d = jaccard_distance_matrix([[v, v, v, 1], [v, 2]])
    assert d[0, 1].item() == pytest.approx(1 - 1 / 3)


def test_input_forms_agree():
    seqs = [[5, 1, 2], [2, 2], [], [9, 5]]
    from_lists = jaccard_distance_matrix(seqs)
    from_tensors = jaccard_distance_matrix([torch.tensor(s, dtype=torch.long) for s in seqs])
    ids = torch.zeros(4, 3, dtype=torch.long)
    mask = torch.zeros(4, 3, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = True
    ids[~mask] = 7  # padding ids must be ignored
    from_padded = jaccard_distance_matrix(PackedTokens.from_padded(ids, mask))
    assert torch.equal(from_lists, from_tensors) and torch.equal(from_lists, from_padded)


def test_packed_select_reorders_rows():
    p = PackedTokens.from_sequences([[1, 2], [], [3, 4, 5], [6]])
    q = p.select(torch.tensor([2, 0, 3, 1, 2]))
    assert q.lengths.tolist() == [3, 2, 1, 0, 3]
    assert q.flat.tolist() == [3, 4, 5, 1, 2, 6, 3, 4, 5]
    assert q.row(2).tolist() == [6]


def test_bad_token_ids():
    with pytest.raises(ValueError, match=r"negative token id -1 in response 1"):
        PackedTokens.from_sequences([[1], [2, -1]])
    with pytest.raises(ValueError, match=r"token_ids\[0\] must be a 1-D integer tensor"):
        PackedTokens.from_sequences([torch.tensor([0.5])])
    with pytest.raises(ValueError, match=r"token ids must be integers"):
        PackedTokens.from_sequences([["a"]])
    with pytest.raises(ValueError, match=r"len\(token_ids\) = 2 does not match the batch size 3"):
        grouped_jaccard_distances([[1], [2]], torch.tensor([0, 0, 1]))
