"""MDAP (released rule and greedy variant), CPPO, random and advantage-only pruning; the refill; bad input."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrl.algorithms.advantages import grpo_advantages
from fastrl.algorithms.pruning import (
    advantage_only_prune,
    cppo_prune,
    keep_all_prune,
    kept_counts,
    mdap_prune,
    random_prune,
)


# ------------------------------------------------------------------ independent references
def similarity(a, b) -> Fraction:
    """Token Jaccard similarity as an exact fraction; an empty union is 1."""
    sa, sb = set(a), set(b)
    union = len(sa | sb)
    return Fraction(1) if union == 0 else Fraction(len(sa & sb), union)


def ref_questions(uids):
    """{uid: [indices in batch order]}, uids in ascending order (ints numerically, then strings)."""
    members: dict = {}
    for i, u in enumerate(uids):
        members.setdefault(u, []).append(i)
    return [(u, members[u]) for u in sorted(members, key=lambda u: (isinstance(u, str), u))]


def ref_buckets(idx, adv):
    """Buckets by the advantage rounded to 4 decimals (numpy-style half-to-even on A * 1e4)."""
    out: dict = {}
    for i in idx:
        out.setdefault(round(adv[i] * 1e4), []).append(i)
    return list(out.values())


def ref_release_keep(adv, uids, toks, tau) -> set[int]:
    """The released rule read literally from docs/algorithms.md, steps 1-4 (no alignment)."""
    bound = 1 - Fraction(str(tau))
    keep: set[int] = set()
    for _, idx in ref_questions(uids):
        for bucket in ref_buckets(idx, adv):
            best = max(abs(adv[i]) for i in bucket)
            seed = next(i for i in bucket if abs(adv[i]) == best)
            keep.add(seed)
            keep.update(i for i in bucket if i != seed and similarity(toks[i], toks[seed]) < bound)
    return keep


def ref_greedy_keep(adv, uids, toks, tau) -> set[int]:
    """The greedy variant: prune iff some kept member of the bucket has 1 - J < tau."""
    keep: set[int] = set()
    t = Fraction(str(tau))
    for _, idx in ref_questions(uids):
        for bucket in ref_buckets(idx, adv):
            kept: list[int] = []
            for i in sorted(bucket, key=lambda i: (-abs(adv[i]), idx.index(i))):
                if not any(1 - similarity(toks[i], toks[r]) < t for r in kept):
                    kept.append(i)
            keep.update(kept)
    return keep


def ref_refill(keep: set[int], adv, uids, d: int) -> set[int]:
    keep = set(keep)
    need = (d - len(keep) % d) % d
    queues = [sorted((i for i in idx if i not in keep), key=lambda i: -abs(adv[i])) for _, idx in ref_questions(uids)]
    while need and any(queues):
        for q in queues:
            if need and q:
                keep.add(q.pop(0))
                need -= 1
    return keep


@st.composite
def batches(draw, max_q: int = 6, vocab: int = 12, continuous: bool = False):
    """Random ragged batches: interleaved questions of 1..8 responses, rewards in {0, .5, 1, 1.5}."""
    nq = draw(st.integers(1, max_q))
    sizes = [draw(st.integers(2, 8)) for _ in range(nq)]
    uids = [q for q, s in enumerate(sizes) for _ in range(s)]
    order = draw(st.permutations(range(len(uids))))
    uids = [uids[i] for i in order]
    if continuous:
        rewards = torch.tensor([draw(st.floats(0, 1, allow_nan=False)) for _ in uids], dtype=torch.float32)
    else:
        rewards = torch.tensor([draw(st.sampled_from([0.0, 0.5, 1.0, 1.5])) for _ in uids])
    toks = [draw(st.lists(st.integers(0, vocab - 1), min_size=0, max_size=6)) for _ in uids]
    adv = grpo_advantages(rewards, uids)
    return adv, uids, toks


TAUS = [0.0, 0.2, 0.3, 0.5, 0.8, 1.0]


# ------------------------------------------------------------------ MDAP, released rule
@settings(max_examples=150, deadline=None)
@given(batches(), st.sampled_from(TAUS))
def test_release_matches_reference(batch, tau):
    adv, uids, toks = batch
    got = set(mdap_prune(adv, uids, toks, tau=tau).kept.tolist())
    assert got == ref_release_keep(adv.tolist(), uids, toks, tau)


@settings(max_examples=60, deadline=None)
@given(batches(continuous=True), st.sampled_from([0.3, 0.8]))
def test_release_continuous_rewards_match_reference(batch, tau):
    adv, uids, toks = batch
    assert set(mdap_prune(adv, uids, toks, tau=tau).kept.tolist()) == ref_release_keep(adv.tolist(), uids, toks, tau)


@settings(max_examples=120, deadline=None)
@given(batches(), st.sampled_from(TAUS), st.integers(1, 16), st.sampled_from(["release", "greedy"]))
def test_properties_and_refill(batch, tau, d, rule):
    adv, uids, toks = batch
    adv_l = adv.tolist()
    base = set(mdap_prune(adv, uids, toks, tau=tau, rule=rule).kept.tolist())
    result = mdap_prune(adv, uids, toks, tau=tau, align_to=d, rule=rule)
    kept = result.kept.tolist()
    assert kept == sorted(kept) and len(set(kept)) == len(kept)
    # every advantage bucket keeps >= 1 (its seed), before and after the refill
    for _, idx in ref_questions(uids):
        for bucket in ref_buckets(idx, adv_l):
            assert base & set(bucket)
    # the refill never drops a kept response, reaches a multiple of d whenever the batch allows it
    assert base <= set(kept)
    assert set(kept) == ref_refill(base, adv_l, uids, d)
    assert len(kept) % d == 0 or len(kept) == len(uids)
    assert result.kept_before_refill == len(base)
    assert sum(result.final_counts.values()) == len(kept)
    assert result.final_counts == kept_counts(uids, result.kept)


@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from(TAUS), st.integers(1, 8), st.randoms(use_true_random=False),
       st.sampled_from(["release", "greedy"]))
def test_two_ranks_equal_one_rank(batch, tau, d, rnd, rule):
    """A batch gathered from 2 ranks interleaves questions differently; the kept (uid, rank) set is the same."""
    adv, uids, toks = batch
    one = mdap_prune(adv, uids, toks, tau=tau, align_to=d, rule=rule).kept
    by_q: dict = {}
    for i, u in enumerate(uids):
        by_q.setdefault(u, []).append(i)
    questions = list(by_q)
    rnd.shuffle(questions)
    ranks = [questions[0::2], questions[1::2]]  # rank r rolls out its own questions, then all-gather
    perm = [i for r in ranks for q in r for i in by_q[q]]
    two = mdap_prune(adv[perm], [uids[i] for i in perm], [toks[i] for i in perm], tau=tau, align_to=d, rule=rule).kept
    key = lambda idx, us: {(us[i], sum(1 for j in range(i) if us[j] == us[i])) for i in idx}  # noqa: E731
    assert key(one.tolist(), uids) == key(two.tolist(), [uids[i] for i in perm])


@settings(max_examples=60, deadline=None)
@given(batches())
def test_tau_zero_keeps_all_but_duplicates_of_the_seed(batch):
    adv, uids, toks = batch
    kept = set(mdap_prune(adv, uids, toks, tau=0.0).kept.tolist())
    adv_l = adv.tolist()
    for _, idx in ref_questions(uids):
        for bucket in ref_buckets(idx, adv_l):
            seed = max(bucket, key=lambda i: abs(adv_l[i]))
            for i in bucket:
                assert (i in kept) == (i == seed or set(toks[i]) != set(toks[seed]))


@settings(max_examples=60, deadline=None)
@given(batches())
def test_tau_one_keeps_seeds_only_and_equals_advantage_only(batch):
    adv, uids, toks = batch
    seeds = mdap_prune(adv, uids, toks, tau=1.0).kept
    assert seeds.tolist() == advantage_only_prune(adv, uids).kept.tolist()
    for d in (3, 8):
        assert mdap_prune(adv, uids, toks, tau=1.0, align_to=d).kept.tolist() == \
            advantage_only_prune(adv, uids, align_to=d).kept.tolist()


@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from([0.2, 0.5, 0.8]))
def test_greedy_matches_reference(batch, tau):
    adv, uids, toks = batch
    assert set(mdap_prune(adv, uids, toks, tau=tau, rule="greedy").kept.tolist()) == \
        ref_greedy_keep(adv.tolist(), uids, toks, tau)


# ------------------------------------------------------------------ hand-computed cases
def test_release_hand_case_seed_only_comparison():
    # One question, one bucket (all A = 1): seed = response 0 (first of equal |A|).
    # J(1, seed) = |{}|/|{1,2,3,4}| = 0 -> kept; J(2, seed) = |{1}|/|{1,2,5}| = 1/3 -> pruned at tau 0.8;
    # J(3, seed) = 0 -> kept although response 3 duplicates response 1 (greedy would prune it).
    adv = [1.0, 1.0, 1.0, 1.0, -1.0, -1.0]
    toks = [[1, 2], [3, 4], [1, 5], [3, 4], [9], [9]]
    r = mdap_prune(adv, ["q"] * 6, toks, tau=0.8)
    assert r.kept.tolist() == [0, 1, 3, 4]
    assert mdap_prune(adv, ["q"] * 6, toks, tau=0.8, rule="greedy").kept.tolist() == [0, 1, 4]
    assert r.num_buckets == 2 and r.kept_before_refill == 4
    assert sorted(r.seed_similarities) == [0.0, 0.0, 1 / 3, 1.0]


def test_release_boundary_is_exact():
    # J = 1/5 exactly = 1 - 0.8: the release keeps iff J < 0.2, so this member is pruned;
    # 1 - 1/5 in floating point is 0.8 (not below tau), the greedy variant keeps it (distance not < tau).
    seed, member = [1, 2, 3], [3, 4, 5]  # ∩ = {3}, ∪ = {1..5}
    assert similarity(seed, member) == Fraction(1, 5)
    for n_extra in range(0, 60):  # unions up to 65: every such pair must be decided exactly
        s = list(range(100, 100 + n_extra)) + seed
        m = member
        j = similarity(s, m)
        kept = mdap_prune([1.0, 1.0], ["q", "q"], [s, m], tau=0.8).kept.tolist()
        assert (1 in kept) == (j < Fraction(1, 5))
    # J = 2/10 with tau = 0.8: also exactly on the boundary
    a, b = list(range(6)), [0, 1, 6, 7, 8, 9]
    assert similarity(a, b) == Fraction(2, 10)
    assert mdap_prune([1.0, 1.0], ["q", "q"], [a, b], tau=0.8).kept.tolist() == [0]


def test_buckets_round_to_four_decimals_without_chaining():
    # 0, 6e-5, 1.2e-4, 1.8e-4 round to 0, 1e-4, 1e-4, 2e-4: three buckets (chaining gaps < 1e-4 made one)
    adv = [0.0, 6e-5, 1.2e-4, 1.8e-4]
    toks = [[1]] * 4
    r = mdap_prune(adv, ["q"] * 4, toks, tau=0.8)
    assert r.num_buckets == 3
    assert r.kept.tolist() == [0, 2, 3]  # the 1e-4 bucket's seed is 1.2e-4 (larger |A|)


def test_empty_responses():
    # two empty responses: union empty -> J = 1 -> pruned at every tau (even 0); empty vs non-empty: J = 0
    adv = [1.0, 1.0, 1.0]
    toks = [[], [], [5]]
    assert mdap_prune(adv, ["q"] * 3, toks, tau=0.0).kept.tolist() == [0, 2]
    assert mdap_prune(adv, ["q"] * 3, toks, tau=0.8).kept.tolist() == [0, 2]
    assert mdap_prune(adv, ["q"] * 3, toks, tau=1.0).kept.tolist() == [0]


def test_all_zero_advantages_keep_one_per_question_then_refill():
    adv = [0.0] * 8
    uids = ["a"] * 4 + ["b"] * 4
    toks = [[1, 2]] * 8
    assert mdap_prune(adv, uids, toks, tau=0.8).kept.tolist() == [0, 4]
    assert mdap_prune(adv, uids, toks, tau=0.8, align_to=4).kept.tolist() == [0, 1, 4, 5]


def test_refill_round_robin_in_uid_order_by_abs_advantage():
    # question 2 (uid 2) comes before 10 numerically; pruned |A| descending inside each.
    uids = [10, 10, 10, 2, 2, 2]
    adv = [1.0, 1.0, -0.5, 1.0, 1.0, 1.0]
    toks = [[1]] * 6
    # kept seeds: q10 -> 0 (bucket 1.0) and 2 (bucket -0.5); q2 -> 3
    assert mdap_prune(adv, uids, toks, tau=0.8).kept.tolist() == [0, 2, 3]
    # need 1: uid 2 first, its best pruned response is 4
    assert mdap_prune(adv, uids, toks, tau=0.8, align_to=4).kept.tolist() == [0, 2, 3, 4]
    # need 3 (to 6): 4 (q2), 1 (q10), 5 (q2)
    assert mdap_prune(adv, uids, toks, tau=0.8, align_to=6).kept.tolist() == [0, 1, 2, 3, 4, 5]


def test_refill_that_cannot_reach_a_multiple_keeps_everything():
    r = mdap_prune([1.0, 1.0, 1.0], ["q"] * 3, [[1]] * 3, tau=0.8, align_to=4)
    assert r.kept.tolist() == [0, 1, 2] and r.kept_before_refill == 1


def test_metrics_histogram():
    r = mdap_prune([1.0, 1.0, 1.0], ["q"] * 3, [[1, 2], [1, 3], [4]], tau=0.8)
    m = r.metrics(3)
    assert m["prune/pairs_compared"] == 2 and m["prune/sim_hist_03"] == 1 and m["prune/sim_hist_00"] == 1
    assert m["prune/count_mean"] == 2 and m["prune/count_max"] == 2 and m["prune/refilled"] == 0


# ------------------------------------------------------------------ CPPO, random, keep-all
def ref_cppo(adv, uids, p):
    import math

    keep = set()
    for _, idx in ref_questions(uids):
        k = max(1, math.floor(len(idx) * (1 - p) + 1e-9))
        ranked = sorted(range(len(idx)), key=lambda r: (-abs(adv[idx[r]]), 0 if adv[idx[r]] > 0 else 1, r))
        keep.update(idx[r] for r in ranked[:k])
    return keep


@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9, 1.0]))
def test_cppo_matches_reference(batch, p):
    adv, uids, _ = batch
    assert set(cppo_prune(adv, uids, prune_rate=p).kept.tolist()) == ref_cppo(adv.tolist(), uids, p)


def test_cppo_hand_case():
    adv = [0.5, -1.5, 1.5, 0.1]
    assert cppo_prune(adv, ["q"] * 4, prune_rate=0.5).kept.tolist() == [1, 2]
    assert cppo_prune(adv, ["q"] * 4, prune_rate=0.75).kept.tolist() == [2]  # tie on |A|: positive first


@settings(max_examples=50, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.5, 0.75]), st.integers(0, 2**31 - 1))
def test_random_is_seeded_and_keeps_k_per_question(batch, p, seed):
    import math

    adv, uids, _ = batch
    a = random_prune(adv, uids, prune_rate=p, generator=torch.Generator().manual_seed(seed))
    b = random_prune(adv, uids, prune_rate=p, generator=torch.Generator().manual_seed(seed))
    assert a.kept.tolist() == b.kept.tolist()
    for u, idx in ref_questions(uids):
        assert a.final_counts[u] == max(1, math.floor(len(idx) * (1 - p) + 1e-9))


def test_keep_all():
    r = keep_all_prune([0.0, 1.0, -1.0], ["a", "a", "b"])
    assert r.kept.tolist() == [0, 1, 2] and r.final_counts == {"a": 2, "b": 1}


def test_kept_counts():
    assert kept_counts(["a", "a", "b"], torch.tensor([0, 2])) == {"a": 1, "b": 1}
    with pytest.raises(ValueError, match="outside the batch"):
        kept_counts(["a"], [3])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: mdap_prune([1.0, float("nan")], ["a", "a"], [[1], [2]]).kept, "not finite"),
        (lambda: mdap_prune([1.0, 1.0], ["a"], [[1], [2]]).kept, "len\\(uids\\)"),
        (lambda: mdap_prune([1.0, 1.0], ["a", "a"], [[1]]).kept, "len\\(token_ids\\)"),
        (lambda: mdap_prune([1.0, 1.0], ["a", "a"], [[1], [2]], align_to=0).kept, "align_to"),
        (lambda: mdap_prune([], [], []).kept, "empty batch"),
        (lambda: mdap_prune([1.0, 1.0], ["a", "a"], [[1], [-2]]).kept, "negative token id"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("tau", [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9])
def test_similarity_exactly_one_minus_tau_is_pruned_for_every_union(tau):
    """J = 1 - tau exactly (e.g. 4/5, 8/10, ... at tau 0.2) must be pruned; float 1 - ∩/∪ got some wrong."""
    bound = 1 - Fraction(str(tau))
    for union in range(bound.denominator, 300, bound.denominator):
        inter = int(bound * union)
        seed = list(range(inter)) + list(range(1000, 1000 + union - inter))  # |seed| = union, ∩ = inter
        member = list(range(inter))
        assert similarity(seed, member) == bound
        assert mdap_prune([1.0, 1.0], ["q", "q"], [seed, member], tau=tau).kept.tolist() == [0], (tau, union)
        # one more shared token than the boundary allows... one fewer: J < 1 - tau -> kept
        if inter > 0:
            assert mdap_prune([1.0, 1.0], ["q", "q"], [seed, member[:-1]], tau=tau).kept.tolist() == [0, 1]
