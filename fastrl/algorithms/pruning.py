"""Trajectory pruners: MDAP (released rule and greedy variant), CPPO, random, advantage-only.

Every pruner maps a flat batch (advantages [N], uids, optionally token ids) to the *sorted*
indices of the responses to keep. Groups are ragged (keyed by uid, never ``view(-1, n)``).
The trainer calls them through the pruner classes at the end of this module (:class:`MDAPPruner`,
...), one per registered name, each built from its typed config section (its hyper-parameters,
checked by the section: fastrl.algorithms.sections) and called with a :class:`PruneBatch`; the
functions take the hyper-parameters as given.

MDAP, released rule (``rule="release"``, the authors' released code; docs/algorithms.md):

1. Questions are processed in ascending *question id* when the batch has them (the integer
   dataset row the release sorts by: its ``question_id`` is the row's index in the training set),
   else in ascending uid order (:func:`question_order_key`); either way the result does not depend
   on how ranks interleave questions in the batch. String uids ("geometry3k-train-123") sort
   lexicographically ("...-10" < "...-9"), so without question ids a partial refill can go to
   other questions than the release's.
2. Inside a question, responses are bucketed by their advantage rounded to 4 decimals
   (half-to-even on A * 10^4), for discrete and continuous rewards alike.
3. Each bucket's **seed** is its largest-|A| response (ties: the first in the question's
   response order); the seed is always kept.
4. Every other member is compared with the seed only: token Jaccard similarity
   J = |T ∩ T_seed| / |T ∪ T_seed| on distinct response token ids (empty union: J = 1); it is
   kept iff J < 1 - tau, compared exactly (integers against the decimal tau, no float rounding).
5. Alignment (:func:`refill_to_multiple`): pruned responses are added back, |A| descending,
   round-robin over questions in step-1 order, until the kept count is a multiple of
   ``align_to`` (the optimizer mini-batch) or nothing is left. A kept response is never dropped.

MDAP, greedy variant (``rule="greedy"``, this repository's earlier reading): same buckets;
members visited by |A| descending then response order; a member is pruned iff its Jaccard
distance to *any* already-kept member of its bucket is < tau (exactly: J > 1 - tau); step 5 as above.

"Response order" is a response's rank among its question's responses in batch order, so any batch
order that keeps each question's responses in the same relative order (questions interleaved,
or gathered from several ranks) gives the same kept set of (uid, rank): 2 ranks = 1 rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, ClassVar, Hashable, Mapping, Sequence

import torch

from torch import Tensor

from fastrl import metric_keys as K
from fastrl.algorithms._common import as_1d_float, check_positive_int, group_index
from fastrl.algorithms.sections import CPPOConfig, MDAPConfig, MDAPRule, RandomPruneConfig
from fastrl.algorithms.similarity import TokenIds, as_packed, grouped_intersections

SIMILARITY_BINS = 10  # histogram of seed-member similarities: [0, 0.1), ..., [0.9, 1.0]


def question_order_key(uid: Hashable) -> tuple:
    """A total order on uids that does not depend on batch position: integers numerically
    (as the release sorts its int64 question ids), then strings, then anything else by repr."""
    if isinstance(uid, int) and not isinstance(uid, bool):
        return (0, uid, "")
    if isinstance(uid, str):
        return (1, 0, uid)
    return (2, 0, f"{type(uid).__name__}:{uid!r}")


def question_sort_key(uid: Hashable, question_id: int | None) -> tuple:
    """MDAP step 1's order: questions with an integer question id first, ascending (the release),
    then the others by :func:`question_order_key`; the uid breaks ties between equal ids."""
    if isinstance(question_id, int) and not isinstance(question_id, bool):
        return (0, question_id, *question_order_key(uid))
    return (1, 0, *question_order_key(uid))


def bucket_key(advantage: float) -> int:
    """The advantage rounded to 4 decimals, as an integer (A * 10^4, half-to-even)."""
    return round(advantage * 10_000)


@dataclass(frozen=True)
class PruneResult:
    """What a pruner kept and why (the per-step MDAP log of docs/algorithms.md).

    Attributes:
        kept: [K] LongTensor of kept batch indices, ascending.
        final_counts: {uid: kept responses after the refill}, every uid of the batch.
        kept_before_refill: K before the alignment refill.
        num_buckets: advantage buckets (0 for pruners that do not bucket).
        seed_similarities: Jaccard similarity of every non-seed bucket member with its seed.
    """

    kept: Tensor
    final_counts: dict[Hashable, int]
    kept_before_refill: int
    num_buckets: int = 0
    seed_similarities: tuple[float, ...] = field(default_factory=tuple)

    def metrics(self, num_responses: int) -> dict[str, float]:
        """Scalars for metrics.jsonl: kept counts, per-question counts, a similarity histogram."""
        counts = list(self.final_counts.values())
        out = {
            K.PRUNE_KEPT_BEFORE_REFILL: float(self.kept_before_refill),
            K.PRUNE_REFILLED: float(len(self.kept) - self.kept_before_refill),
            K.PRUNE_COUNT_MEAN: sum(counts) / max(len(counts), 1),
            K.PRUNE_COUNT_MAX: float(max(counts, default=0)),
            K.PRUNE_NUM_BUCKETS: float(self.num_buckets),
            K.PRUNE_PAIRS_COMPARED: float(len(self.seed_similarities)),
        }
        if self.seed_similarities:
            sims = self.seed_similarities
            out[K.PRUNE_SIM_MEAN] = sum(sims) / len(sims)
            hist = [0] * SIMILARITY_BINS
            for s in sims:
                hist[min(int(s * SIMILARITY_BINS), SIMILARITY_BINS - 1)] += 1
            out.update({K.prune_sim_hist_key(b): float(c) for b, c in enumerate(hist)})
        return out


@dataclass
class _Questions:
    """Python-side view of a batch: per-question members in response order, questions in uid order."""

    adv: list[float]  # [N]
    uids: list[Hashable]  # [Q] in first-appearance order
    members: list[list[int]]  # [Q] global indices of each question's responses, ascending
    order: list[int]  # question indices in ascending question_order_key (MDAP step 1)

    @staticmethod
    def build(advantages: Tensor | Sequence[float], uids: Sequence[Hashable], where: str,
              question_ids: Sequence[int | None] | None = None) -> "_Questions":
        adv_t = as_1d_float(advantages, "advantages", where)
        gid, unique = group_index(uids, adv_t.numel(), where)
        members: list[list[int]] = [[] for _ in unique]
        for i, q in enumerate(gid.tolist()):
            members[q].append(i)
        ids = _question_ids(question_ids, members, unique, where)
        order = sorted(range(len(unique)), key=lambda q: question_sort_key(unique[q], ids[q]))
        return _Questions(adv_t.double().tolist(), unique, members, order)

    def buckets(self, q: int) -> list[list[int]]:
        """MDAP step 2: question q's responses by rounded advantage (each bucket in response order)."""
        by_key: dict[int, list[int]] = {}
        for i in self.members[q]:
            by_key.setdefault(bucket_key(self.adv[i]), []).append(i)
        return list(by_key.values())

    def seed(self, bucket: list[int]) -> int:
        """MDAP step 3: largest |A|; ``max`` returns the first of equal maxima (response order)."""
        return max(bucket, key=lambda i: abs(self.adv[i]))

    def final_counts(self, keep: list[bool]) -> dict[Hashable, int]:
        return {self.uids[q]: sum(keep[i] for i in mem) for q, mem in enumerate(self.members)}


def _question_ids(question_ids: Sequence[int | None] | None, members: list[list[int]],
                  unique: list[Hashable], where: str) -> list[int | None]:
    """Each question's id (one per response given; a question's responses must agree)."""
    if question_ids is None:
        return [None] * len(unique)
    n = sum(len(m) for m in members)
    if len(question_ids) != n:
        raise ValueError(f"{where}: len(question_ids) = {len(question_ids)} does not match the batch size {n}")
    out = []
    for q, mem in enumerate(members):
        ids = {question_ids[i] for i in mem}
        if len(ids) != 1:
            raise ValueError(f"{where}: the responses of question {unique[q]!r} carry question ids {sorted(ids, key=repr)}")
        out.append(ids.pop())
    return out


def _check_align(align_to: int, where: str) -> None:
    check_positive_int(align_to, "align_to", where)


def refill_to_multiple(keep: list[bool], questions: _Questions, align_to: int) -> list[bool]:
    """MDAP step 5: add pruned responses back until the kept count is a multiple of ``align_to``.

    need = (d - K mod d) mod d. Each question's pruned responses are sorted by |A| descending
    (stable: response order breaks ties); questions are visited round-robin in ascending uid order,
    one response per visit, until need = 0 or no pruned response is left. Kept responses are never
    dropped, so when the batch is too small the result keeps what there is (not a multiple of d).

    Args:
        keep: [N] booleans (a modified copy is returned).
        questions: the batch view.
        align_to: d >= 1.
    """
    keep = list(keep)
    need = (align_to - sum(keep) % align_to) % align_to
    if need == 0:
        return keep
    queues = [sorted((i for i in questions.members[q] if not keep[i]), key=lambda i: -abs(questions.adv[i]))
              for q in questions.order]
    pos = [0] * len(queues)
    while need > 0 and any(p < len(qu) for p, qu in zip(pos, queues)):
        for j, qu in enumerate(queues):
            if need == 0:
                break
            if pos[j] < len(qu):
                keep[qu[pos[j]]] = True
                pos[j] += 1
                need -= 1
    return keep


def _to_indices(keep: list[bool]) -> Tensor:
    return torch.tensor([i for i, k in enumerate(keep) if k], dtype=torch.long)


def _result(keep_before: list[bool], questions: _Questions, align_to: int, num_buckets: int = 0,
            sims: Sequence[float] = ()) -> PruneResult:
    keep = refill_to_multiple(keep_before, questions, align_to)
    return PruneResult(_to_indices(keep), questions.final_counts(keep), sum(keep_before), num_buckets, tuple(sims))


def _similarity_bound(tau: float) -> tuple[int, int]:
    """1 - tau as an exact fraction (num, den) of the decimal tau written in the config."""
    one_minus = 1 - Fraction(repr(float(tau)))
    return one_minus.numerator, one_minus.denominator


def _release_keeps(seed: int, others: Sequence[int], counts: Callable[[int, int], tuple[int, int]],
                   num: int, den: int) -> list[int]:
    """The released rule: keep a member iff its Jaccard similarity to the bucket's seed is below
    1 - tau, i.e. x * den < num * u (an empty union is J = 1, never below)."""
    kept = []
    for i in others:
        x, u = counts(i, seed)
        if u > 0 and x * den < num * u:
            kept.append(i)
    return kept


def _greedy_keeps(seed: int, ordered: Sequence[int], counts: Callable[[int, int], tuple[int, int]],
                  num: int, den: int) -> list[int]:
    """The greedy reading, members visited by descending |A| then rank: pruned iff some kept
    response r has distance 1 - J < tau, i.e. J > 1 - tau."""
    kept_here = [seed]
    for i in ordered:
        close = False
        for r in kept_here:
            x, u = counts(i, r)
            if (x * den > num * u) if u else (1 > Fraction(num, den)):
                close = True
                break
        if not close:
            kept_here.append(i)
    return kept_here[1:]


def mdap_prune(
    advantages: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    token_ids: TokenIds,
    *,
    tau: float = 0.8,
    align_to: int = 1,
    rule: MDAPRule = "release",
    question_ids: Sequence[int | None] | None = None,
) -> PruneResult:
    """MDAP with its per-step log (see the module docstring for the rules).

    Args:
        advantages: [N] per-response scalar advantages (finite).
        uids: length N, question id per response (hashable; groups need not be contiguous).
        token_ids: N response token-id sequences (response tokens under the mask, EOS included),
            or a :class:`~fastrl.algorithms.similarity.PackedTokens`.
        tau: in [0, 1]; release keeps a member iff J(member, seed) < 1 - tau.
        align_to: d, the kept count is refilled up to a multiple of d (1: no alignment).
        rule: ``release`` (default) or ``greedy``.
        question_ids: length N, the integer question id (dataset row) of each response's question,
            or None per question without one; orders the questions (step 1). None: uid order.

    ``tau`` and ``rule`` are taken as given: :class:`~fastrl.algorithms.sections.MDAPConfig` checks them.

    Returns:
        :class:`PruneResult`; ``kept`` is a LongTensor [K], ascending.
    """
    where = "mdap_prune"
    _check_align(align_to, where)
    qs = _Questions.build(advantages, uids, where, question_ids)
    n = len(qs.adv)
    packed = as_packed(token_ids, n, where)
    gid = torch.empty(n, dtype=torch.long)
    slot = [0] * n
    for q, mem in enumerate(qs.members):
        for s, i in enumerate(mem):
            gid[i], slot[i] = q, s
    inter, sizes = grouped_intersections(packed, gid, len(qs.members))
    num, den = _similarity_bound(tau)

    def counts(i: int, j: int) -> tuple[int, int]:  # (|Ti ∩ Tj|, |Ti ∪ Tj|), i and j in one question
        q, a, b = int(gid[i]), slot[i], slot[j]
        x = int(inter[q, a, b])
        return x, int(sizes[q, a]) + int(sizes[q, b]) - x

    keep = [False] * n
    sims: list[float] = []
    num_buckets = 0
    for q in qs.order:
        for bucket in qs.buckets(q):
            num_buckets += 1
            seed = qs.seed(bucket)
            keep[seed] = True
            others = [i for i in bucket if i != seed]
            for i in others:
                x, u = counts(i, seed)
                sims.append(x / u if u else 1.0)
            if rule == "release":
                kept = _release_keeps(seed, others, counts, num, den)
            else:
                kept = _greedy_keeps(seed, sorted(others, key=lambda i: (-abs(qs.adv[i]), slot[i])), counts, num, den)
            for i in kept:
                keep[i] = True
    return _result(keep, qs, align_to, num_buckets, sims)


def advantage_only_prune(
    advantages: Tensor | Sequence[float], uids: Sequence[Hashable], *, align_to: int = 1,
    question_ids: Sequence[int | None] | None = None,
) -> PruneResult:
    """Table 5's "advantage only": the seed of every advantage bucket (MDAP at tau = 1), then the refill."""
    where = "advantage_only_prune"
    _check_align(align_to, where)
    qs = _Questions.build(advantages, uids, where, question_ids)
    keep = [False] * len(qs.adv)
    num_buckets = 0
    for q in qs.order:
        for bucket in qs.buckets(q):
            keep[qs.seed(bucket)] = True
            num_buckets += 1
    return _result(keep, qs, align_to, num_buckets)


def _keep_count(n: int, prune_rate: float) -> int:
    # +1e-9: n (1 - P) can land a hair below an integer in floating point (e.g. 20 x (1 - 0.9)).
    return max(1, math.floor(n * (1.0 - prune_rate) + 1e-9))


def cppo_prune(
    advantages: Tensor | Sequence[float], uids: Sequence[Hashable], *, prune_rate: float = 0.5, align_to: int = 1,
    question_ids: Sequence[int | None] | None = None,
) -> PruneResult:
    """CPPO: per question keep the top k = max(1, floor(n (1 - P))) responses by |A|.

    Ties by |A| go to positive A, then to the earlier response of the question. The release
    applies no alignment (B x k is already a multiple of its mini-batch); ``align_to`` > 1
    refills as MDAP step 5 does. ``prune_rate`` is taken as given (``CPPOConfig.check``).
    """
    where = "cppo_prune"
    _check_align(align_to, where)
    qs = _Questions.build(advantages, uids, where, question_ids)
    keep = [False] * len(qs.adv)
    for mem in qs.members:
        ranked = sorted(range(len(mem)), key=lambda r: (-abs(qs.adv[mem[r]]), 0 if qs.adv[mem[r]] > 0 else 1, r))
        for r in ranked[: _keep_count(len(mem), prune_rate)]:
            keep[mem[r]] = True
    return _result(keep, qs, align_to)


def random_prune(
    advantages: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    *,
    prune_rate: float = 0.5,
    align_to: int = 1,
    generator: torch.Generator | None = None,
    question_ids: Sequence[int | None] | None = None,
) -> PruneResult:
    """Random pruning (Table 5): per question keep max(1, floor(n (1 - P))) responses at random.

    Questions are visited in MDAP's step-1 order (question id, else uid), each drawing ``torch.randperm(n)`` from
    ``generator``, so a seeded generator gives a reproducible, rank-independent choice.
    Advantages are used only by the refill. ``prune_rate`` is taken as given
    (``RandomPruneConfig.check``).
    """
    where = "random_prune"
    _check_align(align_to, where)
    qs = _Questions.build(advantages, uids, where, question_ids)
    keep = [False] * len(qs.adv)
    for q in qs.order:
        mem = qs.members[q]
        for j in torch.randperm(len(mem), generator=generator).tolist()[: _keep_count(len(mem), prune_rate)]:
            keep[mem[j]] = True
    return _result(keep, qs, align_to)


def keep_all_prune(advantages: Tensor | Sequence[float], uids: Sequence[Hashable]) -> PruneResult:
    """No pruning: every response."""
    qs = _Questions.build(advantages, uids, "keep_all_prune")
    return _result([True] * len(qs.adv), qs, 1)


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


# ---------------------------------------------------------------------- the trainer's pruners
@dataclass(frozen=True)
class PruneBatch:
    """What a pruner sees of the step's batch: N responses, one entry per response in each field.

    Attributes:
        advantages: [N] scalar advantages.
        uids: the question uid of each response (ragged groups, in batch order).
        question_ids: each response's question's integer dataset row (None: none); MDAP's step-1 order.
        response_ids: the response token ids of each response (under the mask, EOS included).
        rewards: [N] overall rewards.
        columns: every further per-response column the trainer's batch holds (``accuracies``,
            ``texts``, ``finish_reasons``, ``engine_logprobs``, ...; old log-probs when a pruner
            with ``prune_first = False`` runs after those passes), by the batch's own names.
    """

    advantages: Tensor
    uids: Sequence[Hashable]
    question_ids: Sequence[int | None]
    response_ids: TokenIds
    rewards: Tensor
    columns: Mapping[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.uids)

    def column(self, name: str) -> Any:
        """The column ``name``; a ``KeyError`` listing the columns the batch holds if absent."""
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"the batch has no column {name!r}; it holds: {', '.join(sorted(self.columns))}") from None


def prune_result(batch: PruneBatch, keep: Sequence[bool], align_to: int = 1) -> PruneResult:
    """A pruner's decision (``keep``: one boolean per response of ``batch``) as the trainer takes
    it: refilled to a multiple of ``align_to`` as MDAP step 5 does (:func:`refill_to_multiple`),
    with its per-question final counts. For pruners written outside this module."""
    where = "prune_result"
    _check_align(align_to, where)
    qs = _Questions.build(batch.advantages, batch.uids, where, batch.question_ids)
    if len(keep) != len(qs.adv):
        raise ValueError(f"{where}: {len(keep)} keep flags for a batch of {len(qs.adv)} responses")
    return _result([bool(k) for k in keep], qs, align_to)


# One class per registered name (fastrl.algorithms.registry.PRUNERS); a pruner with a config
# section holds its typed section (checked again here, for a pruner built by hand).


class PrunerWithoutMetrics:
    """The built-in pruners log through :class:`PruneResult` alone: nothing of their own."""

    def metrics(self) -> dict[str, float]:
        return {}


@dataclass(frozen=True)
class KeepAllPruner(PrunerWithoutMetrics):
    """Keeps every response."""

    prune_first: ClassVar[bool] = True

    def __call__(self, batch: PruneBatch, *, align_to: int = 1,
                 generator: torch.Generator | None = None) -> PruneResult:
        return keep_all_prune(batch.advantages, batch.uids)


@dataclass(frozen=True)
class MDAPPruner(PrunerWithoutMetrics):
    """MDAP (:func:`mdap_prune`), released rule or greedy variant, from ``algorithm.mdap``."""

    config: MDAPConfig = field(default_factory=MDAPConfig)
    prune_first: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.config.check()

    def __call__(self, batch: PruneBatch, *, align_to: int = 1,
                 generator: torch.Generator | None = None) -> PruneResult:
        return mdap_prune(batch.advantages, batch.uids, batch.response_ids, tau=self.config.tau, align_to=align_to,
                          rule=self.config.rule, question_ids=batch.question_ids)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CPPOPruner(PrunerWithoutMetrics):
    """CPPO top-k by |A| (:func:`cppo_prune`), from ``algorithm.cppo``. As released
    (``prune_first=False``) the old/ref log-probs are computed on the full batch and pruning comes after."""

    config: CPPOConfig = field(default_factory=CPPOConfig)

    def __post_init__(self) -> None:
        self.config.check()

    @property
    def prune_first(self) -> bool:
        return self.config.prune_first

    def __call__(self, batch: PruneBatch, *, align_to: int = 1,
                 generator: torch.Generator | None = None) -> PruneResult:
        return cppo_prune(batch.advantages, batch.uids, prune_rate=self.config.prune_rate, align_to=align_to,
                          question_ids=batch.question_ids)


@dataclass(frozen=True)
class RandomPruner(PrunerWithoutMetrics):
    """Random pruning (:func:`random_prune`), from ``algorithm.random``; draws from ``generator``."""

    config: RandomPruneConfig = field(default_factory=RandomPruneConfig)
    prune_first: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.config.check()

    def __call__(self, batch: PruneBatch, *, align_to: int = 1,
                 generator: torch.Generator | None = None) -> PruneResult:
        return random_prune(batch.advantages, batch.uids, prune_rate=self.config.prune_rate, align_to=align_to,
                            generator=generator, question_ids=batch.question_ids)


@dataclass(frozen=True)
class AdvantageOnlyPruner(PrunerWithoutMetrics):
    """The seed of every advantage bucket (:func:`advantage_only_prune`)."""

    prune_first: ClassVar[bool] = True

    def __call__(self, batch: PruneBatch, *, align_to: int = 1,
                 generator: torch.Generator | None = None) -> PruneResult:
        return advantage_only_prune(batch.advantages, batch.uids, align_to=align_to, question_ids=batch.question_ids)
