"""MDAP, CPPO, random and advantage-only pruning; data-parallel alignment; bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrl.algorithms.advantages import grpo_advantages
from fastrl.algorithms.pruning import (
    advantage_only_select,
    cppo_select,
    keep_all_select,
    kept_counts,
    mdap_select,
    random_select,
)


# ------------------------------------------------------------------ independent references
def jaccard_distance(a, b) -> float:
    sa, sb = set(a), set(b)
    return 0.0 if not sa and not sb else 1.0 - len(sa & sb) / len(sa | sb)


def ref_advantage_groups(idx: list[int], adv: list[float], adv_eps: float | None) -> list[list[int]]:
    if adv_eps is None:
        values = sorted({adv[i] for i in idx})
        return [[i for i in idx if adv[i] == v] for v in values]
    chain = sorted(idx, key=lambda i: (adv[i], i))
    cut = [0] + [p for p in range(1, len(chain)) if adv[chain[p]] - adv[chain[p - 1]] >= adv_eps] + [len(chain)]
    return [chain[a:b] for a, b in zip(cut, cut[1:])]


def ref_mdap_keep(adv, uids, toks, tau, adv_eps=None) -> set[int]:
    """DESIGN §4 steps 1-4 read literally, question by question (no alignment)."""
    keep: set[int] = set()
    for q in set(uids):
        idx = [i for i in range(len(adv)) if uids[i] == q]
        for grp in ref_advantage_groups(idx, adv, adv_eps):
            kept_here: list[int] = []
            for i in sorted(grp, key=lambda i: (-abs(adv[i]), i)):
                if all(jaccard_distance(toks[i], toks[r]) >= tau for r in kept_here):
                    kept_here.append(i)
            keep.update(kept_here)
    return keep


def ref_add_back(keep: set[int], adv, uids, d: int) -> set[int]:
    """Alignment by adding: the round-robin written as one sort over (round, |A|, sign, uid)."""
    need = (-len(keep)) % d
    offers = []
    for q in set(uids):
        pruned = sorted((i for i in range(len(adv)) if uids[i] == q and i not in keep),
                        key=lambda i: (-abs(adv[i]), adv[i] <= 0, i))
        offers += [(rnd, -abs(adv[i]), adv[i] <= 0, repr(q), i) for rnd, i in enumerate(pruned)]
    return keep | {o[-1] for o in sorted(offers)[:need]}


# ------------------------------------------------------------------ random batches
@st.composite
def batches(draw, max_q: int = 6, continuous: bool = False, vocab: int = 12):
    sizes = draw(st.lists(st.integers(2, 8), min_size=1, max_size=max_q))
    labels = [q for q, s in enumerate(sizes) for _ in range(s)]
    order = draw(st.permutations(range(len(labels))))  # interleaved questions
    uids = [f"q{labels[p]}" for p in order]
    if continuous:
        rewards = draw(st.lists(st.floats(0, 1, allow_nan=False).map(lambda x: round(x, 3)),
                                min_size=len(uids), max_size=len(uids)))
    else:
        rewards = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5]), min_size=len(uids), max_size=len(uids)))
    adv = grpo_advantages(torch.tensor(rewards, dtype=torch.float64), uids)
    toks = draw(st.lists(st.lists(st.integers(0, vocab), max_size=8), min_size=len(uids), max_size=len(uids)))
    return adv, uids, toks


def check_invariants(kept: torch.Tensor, adv, uids, d: int) -> None:
    k = kept.tolist()
    assert kept.dtype == torch.long
    assert k == sorted(set(k)), "sorted and unique"
    assert all(0 <= i < len(uids) for i in k), "a subset of the batch"
    assert len(k) % d == 0 and len(k) > 0
    for q in set(uids):
        assert any(uids[i] == q for i in k), f"question {q} lost all its responses"


# ------------------------------------------------------------------ MDAP vs reference
@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.3, 0.5, 0.8, 1.0]))
def test_mdap_matches_reference(batch, tau):
    adv, uids, toks = batch
    got = set(mdap_select(adv, uids, toks, tau=tau).tolist())
    assert got == ref_mdap_keep(adv.tolist(), uids, toks, tau)


@settings(max_examples=60, deadline=None)
@given(batches(continuous=True), st.sampled_from([1e-4, 0.05, 0.5]), st.sampled_from([0.5, 0.8]))
def test_mdap_continuous_matches_reference(batch, adv_eps, tau):
    adv, uids, toks = batch
    got = set(mdap_select(adv, uids, toks, tau=tau, adv_eps=adv_eps).tolist())
    assert got == ref_mdap_keep(adv.tolist(), uids, toks, tau, adv_eps)


@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from([0.5, 0.8, 1.0]), st.integers(1, 8))
def test_mdap_properties_and_alignment(batch, tau, d):
    adv, uids, toks = batch
    if len(uids) < d:
        with pytest.raises(ValueError, match="fewer than dp_multiple"):
            mdap_select(adv, uids, toks, tau=tau, dp_multiple=d)
        return
    base = ref_mdap_keep(adv.tolist(), uids, toks, tau)
    try:
        kept = mdap_select(adv, uids, toks, tau=tau, dp_multiple=d)
    except ValueError as exc:
        # only possible when adding cannot reach a multiple and dropping would empty a question
        assert "would leave a question with no response" in str(exc)
        assert math.ceil(len(base) / d) * d > len(uids)
        assert (len(base) // d) * d < len(set(uids))
        return
    check_invariants(kept, adv, uids, d)
    got = set(kept.tolist())
    if math.ceil(len(base) / d) * d <= len(uids):
        assert got == ref_add_back(base, adv.tolist(), uids, d)
    else:
        assert got < base and len(got) == (len(base) // d) * d
    if d == 1:  # no advantage group loses all its responses
        a = adv.tolist()
        for q in set(uids):
            for grp in ref_advantage_groups([i for i in range(len(a)) if uids[i] == q], a, None):
                assert got & set(grp)


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([0.5, 0.8, 1.0]), st.integers(1, 6), st.randoms(use_true_random=False))
def test_mdap_is_invariant_to_batch_order(batch, tau, d, rnd):
    """Interleave the questions differently (each question's responses keep their order): the
    kept set of (uid, response) must not change — the 2-ranks-equal-1-rank property."""
    adv, uids, toks = batch
    if len(uids) < d:
        return
    rank = {}
    ident = []
    for u in uids:
        rank[u] = rank.get(u, -1) + 1
        ident.append((u, rank[u]))
    labels = list(uids)
    rnd.shuffle(labels)
    queues = {u: [i for i in range(len(uids)) if uids[i] == u] for u in set(uids)}
    perm = [queues[u].pop(0) for u in labels]
    try:
        a = {ident[i] for i in mdap_select(adv, uids, toks, tau=tau, dp_multiple=d).tolist()}
    except ValueError:
        with pytest.raises(ValueError):
            mdap_select(adv[perm], [uids[i] for i in perm], [toks[i] for i in perm], tau=tau, dp_multiple=d)
        return
    kept_p = mdap_select(adv[perm], [uids[i] for i in perm], [toks[i] for i in perm], tau=tau, dp_multiple=d)
    b = {ident[perm[j]] for j in kept_p.tolist()}
    assert a == b


# ------------------------------------------------------------------ hand-computed cases
def test_tau_zero_keeps_everything():
    adv = grpo_advantages([1.0, 1.0, 0.0, 0.0, 1.5, 0.0], ["a"] * 3 + ["b"] * 3)
    toks = [[1, 2]] * 6  # identical responses
    assert mdap_select(adv, ["a"] * 3 + ["b"] * 3, toks, tau=0.0).tolist() == [0, 1, 2, 3, 4, 5]


def test_tau_one_keeps_one_per_advantage_group_when_tokens_overlap():
    uids = ["a"] * 5 + ["b"] * 3
    adv = grpo_advantages([1.5, 0.0, 1.5, 0.0, 0.5, 1.0, 1.0, 1.0], uids)
    toks = [[7, i] for i in range(8)]  # every pair shares token 7
    kept = mdap_select(adv, uids, toks, tau=1.0).tolist()
    # question a: groups {0, 2} (1.5), {1, 3} (0.0), {4} (0.5) -> first index of each; b: one group
    assert kept == [0, 1, 4, 5]
    assert kept == advantage_only_select(adv, uids).tolist()


def test_distance_threshold_hand_case():
    uids = ["q"] * 4
    adv = [0.5, 0.5, 0.5, -1.5]
    toks = [[1, 2, 3, 4], [1, 2, 3, 5], [6, 7, 8, 9], [1]]
    # d(0,1) = 1 - 3/5 = 0.4; d(0,2) = 1; d(1,2) = 1
    assert mdap_select(adv, uids, toks, tau=0.8).tolist() == [0, 2, 3]  # 0.4 < 0.8: 1 pruned
    assert mdap_select(adv, uids, toks, tau=0.4).tolist() == [0, 1, 2, 3]  # 0.4 is not < 0.4
    # |A| order inside a group decides who is compared to whom
    assert mdap_select([0.5, 0.6, 0.5, -1.5], uids, toks, tau=0.8, adv_eps=0.2).tolist() == [1, 2, 3]


def test_continuous_rewards_with_near_equal_advantages():
    uids = ["img"] * 5
    adv = [0.30000, 0.30004, -0.6, 0.30009, 0.1]
    toks = [[1, 2], [1, 2], [3], [1, 2], [1, 2]]
    # exact equality: five singleton groups, nothing pruned
    assert mdap_select(adv, uids, toks).tolist() == [0, 1, 2, 3, 4]
    # adv_eps = 1e-4: gaps 4e-5 and 5e-5 chain 0.3, 0.30004, 0.30009 into one group; the largest
    # |A| (index 3) is kept, its duplicates pruned; 0.1 is 0.2 away: its own group
    assert mdap_select(adv, uids, toks, adv_eps=1e-4).tolist() == [2, 3, 4]


def test_interleaved_uids():
    uids = ["a", "b", "a", "b", "a", "b"]
    adv = grpo_advantages([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], uids)
    toks = [[1], [2], [1], [2], [3], [4]]
    # a: {0, 2} same A and same tokens -> 0 kept, 2 pruned; 4 alone.  b: {3, 5} disjoint -> both
    assert mdap_select(adv, uids, toks).tolist() == [0, 1, 3, 4, 5]


def test_all_zero_advantage_question():
    uids = ["z"] * 4 + ["m"] * 2
    adv = grpo_advantages([1.0, 1.0, 1.0, 1.0, 0.0, 1.0], uids)
    assert adv[:4].tolist() == [0.0] * 4
    similar = [[1, 2, 3], [1, 2, 3], [1, 2, 4], [9], [5], [6]]
    assert mdap_select(adv, uids, similar).tolist() == [0, 3, 4, 5]  # 1, 2 within 0.5 of 0
    assert mdap_select(adv, uids, [[i] for i in range(6)]).tolist() == [0, 1, 2, 3, 4, 5]


def test_alignment_adds_back_round_robin_highest_abs_advantage_first():
    uids = ["a"] * 4 + ["b"] * 4
    adv = [1.0, 1.0, -0.5, -0.5, 2.0, 2.0, 2.0, -1.0]
    toks = [[1]] * 8
    # without alignment: a keeps 0 and 2, b keeps 4 and 7 -> 4 kept
    assert mdap_select(adv, uids, toks).tolist() == [0, 2, 4, 7]
    # d = 3 -> 6: round 1 offers a:1 (|A| 1.0) and b:5 (|A| 2.0) -> both added
    assert mdap_select(adv, uids, toks, dp_multiple=3).tolist() == [0, 1, 2, 4, 5, 7]
    # d = 5 -> 5: only b:5 (higher |A|) is added
    assert mdap_select(adv, uids, toks, dp_multiple=5).tolist() == [0, 2, 4, 5, 7]


def test_alignment_drops_from_largest_groups_when_adding_cannot_work():
    uids = ["a"] * 4 + ["b"] * 2
    adv = [1.0, 1.0, 1.0, -1.0, 0.5, -0.5]
    toks = [[i] for i in range(6)]  # all distinct: MDAP keeps all 6
    # d = 4: 8 > 6 cannot be reached -> drop 2; largest advantage group is a's {0,1,2}: drop 2, 1
    assert mdap_select(adv, uids, toks, dp_multiple=4).tolist() == [0, 3, 4, 5]
    assert keep_all_select(adv, uids, dp_multiple=4).tolist() == [0, 3, 4, 5]


def test_alignment_never_empties_a_question():
    uids = ["a", "a", "b", "b", "c", "c"]
    adv = [1.0, -1.0] * 3
    # keep-all gives 6; d = 4 -> 8 > 6, drop 2 from questions that keep more than one
    kept = keep_all_select(adv, uids, dp_multiple=4).tolist()
    assert len(kept) == 4 and {uids[i] for i in kept} == {"a", "b", "c"}
    # 5 questions x 1 kept, d = 4: 8 > 5 responses? no: N = 10, so add back 3
    uids5 = [q for q in "abcde" for _ in range(2)]
    kept = cppo_select([1.0, 1.0] * 5, uids5, prune_rate=0.5, dp_multiple=4).tolist()
    assert len(kept) == 8


def test_alignment_impossible_is_a_clear_error():
    uids = ["a", "a", "b", "b", "c", "c", "d"]
    adv = [0.0] * 7
    # advantage-only keeps 4 (one per question); d = 3 -> 6 is reachable by adding: fine
    assert len(advantage_only_select(adv, uids, dp_multiple=3)) == 6
    # 7 responses, d = 5: K = 4 -> 5 by adding: fine; d = 6 -> 6 fine
    assert len(advantage_only_select(adv, uids, dp_multiple=6)) == 6
    uids = ["a", "b", "c", "d", "e", "a", "b"]
    # 5 questions, 7 responses, d = 3: K = 5 -> 6 by adding
    assert len(advantage_only_select([0.0] * 7, uids, dp_multiple=3)) == 6
    # d = 4: K = 5 -> 8 > 7 cannot be added, dropping to 4 empties a question
    with pytest.raises(ValueError, match=r"cannot align 5 kept responses to a multiple of dp_multiple = 4"):
        advantage_only_select([0.0] * 7, uids, dp_multiple=4)


# ------------------------------------------------------------------ CPPO / random / advantage-only
@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9, 1.0]))
def test_cppo_matches_reference(batch, p):
    adv, uids, _ = batch
    a = adv.tolist()
    want = set()
    for q in set(uids):
        idx = [i for i in range(len(a)) if uids[i] == q]
        k = max(1, int(len(idx) * (1 - p) + 1e-9))
        want |= set(sorted(idx, key=lambda i: (-abs(a[i]), a[i] <= 0, i))[:k])
    assert set(cppo_select(adv, uids, prune_rate=p).tolist()) == want


def test_cppo_hand_case():
    uids = ["a"] * 8
    adv = [0.1, -2.0, 0.5, 2.0, -0.5, 0.0, 1.0, -1.0]
    # k = floor(8 x 0.5) = 4: |A| 2.0 (+ first: 3, then 1), 1.0 (+: 6, then 7)
    assert cppo_select(adv, uids).tolist() == [1, 3, 6, 7]
    assert cppo_select(adv, uids, prune_rate=0.7).tolist() == [1, 3]  # floor(2.4) = 2


@settings(max_examples=50, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.5, 0.75]), st.integers(0, 2**31 - 1), st.integers(1, 4))
def test_random_is_seeded_and_keeps_k_per_question(batch, p, seed, d):
    adv, uids, _ = batch
    if len(uids) < d:
        return
    a = random_select(adv, uids, prune_rate=p, generator=torch.Generator().manual_seed(seed))
    b = random_select(adv, uids, prune_rate=p, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(a, b)
    counts = kept_counts(uids, a)
    for q, c in counts.items():
        assert c == max(1, int(uids.count(q) * (1 - p) + 1e-9))
    try:
        check_invariants(random_select(adv, uids, prune_rate=p, dp_multiple=d,
                                       generator=torch.Generator().manual_seed(seed)), adv, uids, d)
    except ValueError as exc:
        assert "would leave a question with no response" in str(exc)


def test_random_differs_across_seeds():
    uids = ["a"] * 16
    adv = torch.zeros(16)
    picks = {tuple(random_select(adv, uids, generator=torch.Generator().manual_seed(s)).tolist()) for s in range(10)}
    assert len(picks) > 1


@settings(max_examples=60, deadline=None)
@given(batches())
def test_advantage_only_equals_mdap_tau_one_when_all_tokens_overlap(batch):
    adv, uids, toks = batch
    shared = [t + [999] for t in toks]
    assert torch.equal(advantage_only_select(adv, uids), mdap_select(adv, uids, shared, tau=1.0))


def test_kept_counts():
    assert kept_counts(["a", "b", "a", "c"], torch.tensor([0, 2, 3])) == {"a": 2, "b": 0, "c": 1}
    with pytest.raises(ValueError, match=r"kept index 4 outside the batch of 4"):
        kept_counts(["a", "b", "a", "c"], [4])


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: mdap_select([0.1, 0.2], ["a"], [[1], [2]]), r"mdap_select: len\(uids\) = 1 does not match the batch size 2"),
        (lambda: mdap_select([0.1, 0.2], ["a", "a"], [[1]]), r"mdap_select: len\(token_ids\) = 1 does not match the batch size 2"),
        (lambda: mdap_select([], [], []), r"mdap_select: empty batch"),
        (lambda: mdap_select([0.1, float("nan")], ["a", "a"], [[1], [2]]), r"advantages\[1\] = nan is not finite"),
        (lambda: mdap_select([0.1, 0.2], ["a", "a"], [[1], [2]], tau=1.5), r"tau = 1.5 must lie in \[0, 1\]"),
        (lambda: mdap_select([0.1, 0.2], ["a", "a"], [[1], [2]], tau=-0.1), r"tau = -0.1 must lie in \[0, 1\]"),
        (lambda: mdap_select([0.1, 0.2], ["a", "a"], [[1], [2]], dp_multiple=0), r"dp_multiple = 0 must be an integer >= 1"),
        (lambda: mdap_select([0.1, 0.2], ["a", "a"], [[1], [2]], dp_multiple=4), r"the batch has 2 responses, fewer than dp_multiple = 4"),
        (lambda: mdap_select([0.1, 0.2], ["a", "a"], [[1], [2]], adv_eps=0.0), r"adv_eps = 0.0 must be None or a finite number > 0"),
        (lambda: cppo_select([0.1, 0.2], ["a", "a"], prune_rate=2.0), r"cppo_select: prune_rate = 2.0 must lie in \[0, 1\]"),
        (lambda: random_select([0.1], ["a", "b"]), r"random_select: len\(uids\) = 2 does not match the batch size 1"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
