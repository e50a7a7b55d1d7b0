"""Trajectory pruners: MDAP, CPPO, random and advantage-only, plus data-parallel alignment.

Every pruner maps a flat batch (advantages [N], uids, optionally token ids) to the *sorted*
indices of the responses to keep, and all of them finish with the same
:func:`align_to_multiple`, so the kept count is a multiple of the data-parallel unit d
(world size x micro-batch).

MDAP (DESIGN §4), per question:

1. Advantage groups: equal A (``adv_eps=None``), or sort A and start a new group wherever the
   gap to the previous value is >= ``adv_eps`` (continuous rewards).
2. Visit groups by |A| descending, ties positive A first; inside a group visit responses by |A|
   descending, then by position.
3. Greedy: the first response of a group is kept; a later one is pruned iff some already-kept
   response r of the same group has Jaccard distance d(t, r) < tau.
4. Hence every advantage group keeps at least one response.
5. Alignment (shared): see :func:`align_to_multiple`.

"Position" is the response's rank among its question's responses in batch order, and ties
between questions are broken by the uid (never by batch position), so the kept set of
(uid, response) is the same for any batch order that keeps each question's responses in the
same relative order — e.g. questions interleaved, or the batch gathered from several ranks.
That is what makes a 2-rank run prune exactly like a 1-rank run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence

import torch
from torch import Tensor

from fastrl.algorithms._common import as_1d_float, check_fraction, check_positive_int, group_index, uid_sort_key
from fastrl.algorithms.similarity import TokenIds, as_packed, grouped_jaccard_distances


@dataclass
class _Batch:
    """Python-side view of a batch for the (tiny, sequential) greedy and alignment steps."""

    adv: list[float]  # [N] advantages
    qid: list[int]  # [N] question (uid group) index, by first appearance
    rank: list[int]  # [N] rank of the response among its question's responses, batch order
    members: list[list[int]]  # [Q] global indices of each question's responses, ascending
    uids: list[Hashable]  # [Q]
    adv_group: list[int]  # [N] global advantage-group id
    groups: list[list[int]]  # [num adv groups] members in visiting order
    group_qid: list[int]  # [num adv groups] the question of each advantage group

    def visit_key(self, i: int) -> tuple[float, int]:
        """MDAP's order inside an advantage group: |A| descending, then position in the question."""
        return (-abs(self.adv[i]), self.rank[i])

    def priority_key(self, i: int) -> tuple[float, int, int]:
        """Order across groups (alignment, CPPO): |A| descending, positive A first, then position."""
        a = self.adv[i]
        return (-abs(a), 0 if a > 0 else 1, self.rank[i])


def _build_batch(advantages: Tensor | Sequence[float], uids: Sequence[Hashable], adv_eps: float | None,
                 where: str) -> _Batch:
    adv_t = as_1d_float(advantages, "advantages", where)
    gid_t, unique = group_index(uids, adv_t.numel(), where)
    if adv_eps is not None and (isinstance(adv_eps, bool) or not isinstance(adv_eps, (int, float))
                                or not math.isfinite(adv_eps) or adv_eps <= 0):
        raise ValueError(f"{where}: adv_eps = {adv_eps!r} must be None or a finite number > 0")
    adv = adv_t.tolist()
    qid = gid_t.tolist()
    members: list[list[int]] = [[] for _ in unique]
    rank = [0] * len(adv)
    for i, q in enumerate(qid):
        rank[i] = len(members[q])
        members[q].append(i)
    batch = _Batch(adv, qid, rank, members, unique, [0] * len(adv), [], [])
    for q, mem in enumerate(members):
        for grp in _advantage_groups(mem, adv, adv_eps):
            grp.sort(key=batch.visit_key)
            for i in grp:
                batch.adv_group[i] = len(batch.groups)
            batch.groups.append(grp)
            batch.group_qid.append(q)
    return batch


def _advantage_groups(mem: list[int], adv: list[float], adv_eps: float | None) -> list[list[int]]:
    """Partition one question's responses into advantage groups (DESIGN §4 MDAP step 1)."""
    if adv_eps is None:
        by_value: dict[float, list[int]] = {}
        for i in mem:
            by_value.setdefault(adv[i], []).append(i)
        return list(by_value.values())
    ordered = sorted(mem, key=lambda i: adv[i])
    groups = [[ordered[0]]]
    for prev, cur in zip(ordered, ordered[1:]):
        if adv[cur] - adv[prev] >= adv_eps:
            groups.append([cur])
        else:
            groups[-1].append(cur)
    return groups


def _check_dp(dp_multiple: int, n: int, where: str) -> None:
    check_positive_int(dp_multiple, "dp_multiple", where)
    if n < dp_multiple:
        raise ValueError(f"{where}: the batch has {n} responses, fewer than dp_multiple = {dp_multiple} "
                         f"(world size x micro-batch): no non-empty kept set can be split evenly; "
                         f"use more prompts or rollouts per step, or a smaller micro-batch")


def _to_indices(keep: list[bool]) -> Tensor:
    return torch.tensor([i for i, k in enumerate(keep) if k], dtype=torch.long)


def align_to_multiple(keep: list[bool], batch: _Batch, dp_multiple: int, where: str) -> list[bool]:
    """Data-parallel alignment (DESIGN §4 MDAP step 5), shared by every pruner.

    If the kept count K is not a multiple of d = ``dp_multiple``: add pruned responses back,
    round-robin over questions — each round offers every question's best pruned response
    (|A| descending, positive first, then position) and takes them in that order (ties between
    questions by uid) — until K is a multiple of d. If the batch has too few pruned responses
    for that, drop instead: repeatedly take the advantage group with the most kept responses
    (ties: lower |A|, then negative before positive, then uid) among questions that still keep
    more than one response, and drop its kept response visited last (lowest |A|, last
    position). A question never loses its last kept response; if no alignment is possible
    without that, ``ValueError``.

    Args:
        keep: [N] booleans, modified copy returned.
        batch: the batch view (advantages, questions, advantage groups).
        dp_multiple: d >= 1.

    Returns:
        [N] booleans whose count is a multiple of d.
    """
    keep = list(keep)
    n = len(keep)
    _check_dp(dp_multiple, n, where)
    k = sum(keep)
    if k % dp_multiple == 0 and k > 0:
        return keep
    target_up = -(-max(k, 1) // dp_multiple) * dp_multiple
    if target_up <= n:
        pruned = [sorted((i for i in mem if not keep[i]), key=batch.priority_key) for mem in batch.members]
        pos = [0] * len(pruned)
        while k < target_up:
            offers = [(batch.priority_key(pruned[q][pos[q]])[:2], uid_sort_key(batch.uids[q]), q)
                      for q in range(len(pruned)) if pos[q] < len(pruned[q])]
            offers.sort()
            for _, _, q in offers:
                if k == target_up:
                    break
                keep[pruned[q][pos[q]]] = True
                pos[q] += 1
                k += 1
        return keep
    target_down = (k // dp_multiple) * dp_multiple
    kept_per_q = [0] * len(batch.members)
    for i, kk in enumerate(keep):
        kept_per_q[batch.qid[i]] += kk
    kept_in_group = [[i for i in grp if keep[i]] for grp in batch.groups]
    while k > target_down:
        best: tuple | None = None
        for g, kept in enumerate(kept_in_group):
            q = batch.group_qid[g]
            if not kept or kept_per_q[q] <= 1:
                continue
            a = batch.adv[kept[0]]
            cand = (-len(kept), abs(a), 1 if a > 0 else 0, uid_sort_key(batch.uids[q]), g)
            if best is None or cand < best:
                best = cand
        if best is None:
            raise ValueError(
                f"{where}: cannot align {k} kept responses to a multiple of dp_multiple = "
                f"{dp_multiple}: adding back needs {target_up} > {n} responses and dropping to "
                f"{target_down} would leave a question with no response ({len(batch.members)} "
                f"questions); use a dp_multiple that divides the batch or more rollouts per prompt")
        g = best[-1]
        drop = kept_in_group[g].pop()  # kept lists are in visiting order: last = lowest |A|
        keep[drop] = False
        kept_per_q[batch.qid[drop]] -= 1
        k -= 1
    return keep


def mdap_select(
    advantages: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    token_ids: TokenIds,
    *,
    tau: float = 0.8,
    dp_multiple: int = 1,
    adv_eps: float | None = None,
) -> Tensor:
    """Maximizing Differential Advantage Pruning (DESIGN §4 MDAP, steps 1–5).

    Args:
        advantages: [N] per-response advantages (finite).
        uids: length N, question id per response (hashable; groups need not be contiguous).
        token_ids: N response token-id sequences (response tokens only), or a
            :class:`~fastrl.algorithms.similarity.PackedTokens` (the fast path for tensors).
        tau: Jaccard-distance threshold in [0, 1]; a response closer than tau to a kept one of
            its advantage group is pruned. 0 keeps everything; 1 keeps only responses sharing
            no token with a kept one.
        dp_multiple: the kept count is aligned to a multiple of this (>= 1).
        adv_eps: None groups equal advantages; a float > 0 groups sorted advantages with gaps
            < adv_eps (continuous rewards).

    Returns:
        LongTensor [K] of kept indices, ascending, K a multiple of ``dp_multiple``.
    """
    where = "mdap_select"
    check_fraction(tau, "tau", where)
    batch = _build_batch(advantages, uids, adv_eps, where)
    n = len(batch.adv)
    _check_dp(dp_multiple, n, where)
    packed = as_packed(token_ids, n, where)
    keep = [False] * n
    if tau == 0.0:  # d < 0 never holds: everything is kept, no need for distances
        keep = [True] * n
    else:
        dists = grouped_jaccard_distances(packed, torch.tensor(batch.qid, dtype=torch.long),
                                          len(batch.members), dtype=torch.float64)
        dist_rows = [d.tolist() for d in dists]
        for grp in batch.groups:
            d = dist_rows[batch.qid[grp[0]]]
            kept_ranks: list[int] = []
            for i in grp:
                ri = batch.rank[i]
                row = d[ri]
                if not any(row[r] < tau for r in kept_ranks):
                    kept_ranks.append(ri)
                    keep[i] = True
    return _to_indices(align_to_multiple(keep, batch, dp_multiple, where))


def advantage_only_select(
    advantages: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    *,
    dp_multiple: int = 1,
    adv_eps: float | None = None,
) -> Tensor:
    """Keep one response per advantage group (the first in MDAP's visiting order), ignoring tokens.

    This is MDAP with tau = 1 when all token sets of a group overlap (Table 5's "advantage
    only" ablation). [N] advantages, N uids -> sorted LongTensor of kept indices.
    """
    where = "advantage_only_select"
    batch = _build_batch(advantages, uids, adv_eps, where)
    _check_dp(dp_multiple, len(batch.adv), where)
    keep = [False] * len(batch.adv)
    for grp in batch.groups:
        keep[grp[0]] = True
    return _to_indices(align_to_multiple(keep, batch, dp_multiple, where))


def _keep_count(n: int, prune_rate: float) -> int:
    # +1e-9: n (1 - P) can land a hair below an integer in floating point (e.g. 20 x (1 - 0.9)).
    return max(1, math.floor(n * (1.0 - prune_rate) + 1e-9))


def cppo_select(
    advantages: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    *,
    prune_rate: float = 0.5,
    dp_multiple: int = 1,
) -> Tensor:
    """CPPO: per question keep the top k = max(1, floor(n (1 - P))) responses by |A|.

    Ties by |A| go to positive A, then to the earlier response of the question.
    [N] advantages, N uids -> sorted LongTensor of kept indices (aligned to ``dp_multiple``).
    """
    where = "cppo_select"
    check_fraction(prune_rate, "prune_rate", where)
    batch = _build_batch(advantages, uids, None, where)
    _check_dp(dp_multiple, len(batch.adv), where)
    keep = [False] * len(batch.adv)
    for mem in batch.members:
        for i in sorted(mem, key=batch.priority_key)[: _keep_count(len(mem), prune_rate)]:
            keep[i] = True
    return _to_indices(align_to_multiple(keep, batch, dp_multiple, where))


def random_select(
    advantages: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    *,
    prune_rate: float = 0.5,
    dp_multiple: int = 1,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Random pruning (Table 5): per question keep max(1, floor(n (1 - P))) responses at random.

    Questions are visited in order of first appearance, each drawing ``torch.randperm(n)`` from
    ``generator``, so a seeded generator gives a reproducible choice. Advantages are used only
    by the alignment step. Returns sorted kept indices.
    """
    where = "random_select"
    check_fraction(prune_rate, "prune_rate", where)
    batch = _build_batch(advantages, uids, None, where)
    _check_dp(dp_multiple, len(batch.adv), where)
    keep = [False] * len(batch.adv)
    for mem in batch.members:
        perm = torch.randperm(len(mem), generator=generator).tolist()
        for j in perm[: _keep_count(len(mem), prune_rate)]:
            keep[mem[j]] = True
    return _to_indices(align_to_multiple(keep, batch, dp_multiple, where))


def keep_all_select(
    advantages: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    *,
    dp_multiple: int = 1,
) -> Tensor:
    """No pruning: every response, then the shared alignment (which may have to drop a few)."""
    where = "keep_all_select"
    batch = _build_batch(advantages, uids, None, where)
    _check_dp(dp_multiple, len(batch.adv), where)
    return _to_indices(align_to_multiple([True] * len(batch.adv), batch, dp_multiple, where))


def kept_counts(uids: Sequence[Hashable], kept: Tensor | Sequence[int]) -> dict[Hashable, int]:
    """Kept responses per question (what ARS observes): N uids, [K] kept indices -> {uid: k}.

    Every uid of the batch appears, with 0 if none of its responses was kept.
    """
    counts: dict[Hashable, int] = {u: 0 for u in uids}
    for i in (kept.tolist() if isinstance(kept, Tensor) else kept):
        if not 0 <= i < len(uids):
            raise ValueError(f"kept_counts: kept index {i} outside the batch of {len(uids)}")
        counts[uids[i]] += 1
    return counts
