"""Token-level Jaccard distance between responses, vectorised (MDAP's similarity proxy).

d(A, B) = 1 - |A ∩ B| / |A ∪ B| on the *sets* of response token ids (repeats count once).
Two empty sets are defined to be identical: d = 0 (nothing distinguishes them, so a greedy
pruner treats the second like a duplicate). An empty and a non-empty set have d = 1.

Scale target (the paper's step): 256 questions x 8 responses, lengths up to 2048, vocabulary
151,936 — well under 100 ms on one CPU core. How: all responses are packed into one flat id
tensor; every token occurrence becomes one int64 key (question, token, response slot); one
vectorised sort (numpy's SIMD sort) plus linear passes turn the keys into, per question and
distinct token, the set of responses containing it; a histogram of those sets per question
and one small matmul give every |T_i ∩ T_j| at once. No Python loop touches tokens or pairs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np
import torch
from torch import Tensor

# Groups up to this many responses use the bit-code histogram (2^S bins per group).
_HIST_MAX_SLOTS = 10


@dataclass(frozen=True)
class PackedTokens:
    """Ragged token-id sequences packed into one tensor.

    Attributes:
        flat: [L] int64, the concatenation of all sequences.
        lengths: [N] int64, the length of each sequence (0 allowed).
    """

    flat: Tensor
    lengths: Tensor

    def __len__(self) -> int:
        return int(self.lengths.numel())

    def offsets(self) -> Tensor:
        """[N] start offset of each sequence in ``flat``."""
        return torch.cumsum(self.lengths, 0) - self.lengths

    def row(self, i: int) -> Tensor:
        """Sequence ``i`` as a 1-D view of ``flat``."""
        start = int(self.lengths[:i].sum())
        return self.flat[start:start + int(self.lengths[i])]

    def select(self, order: Tensor) -> "PackedTokens":
        """The sequences in ``order`` ([M] indices), packed again; O(total tokens), no loop."""
        order = order.to(torch.long)
        lens = self.lengths[order]
        starts = self.offsets()[order]
        total = int(lens.sum())
        if total == 0:
            return PackedTokens(self.flat.new_zeros(0), lens)
        new_starts = torch.cumsum(lens, 0) - lens
        shift = torch.repeat_interleave(starts - new_starts, lens)
        return PackedTokens(self.flat[torch.arange(total) + shift], lens)

    @staticmethod
    def from_padded(ids: Tensor, mask: Tensor) -> "PackedTokens":
        """From a padded [N, T] id tensor and its [N, T] response mask (1 = response token).

        The masked positions of each row are taken in order (row-major), which is what a
        trainer's right-padded response tensor holds.
        """
        if ids.shape != mask.shape or ids.dim() != 2:
            raise ValueError(f"PackedTokens.from_padded: ids and mask must both be [N, T], got "
                             f"{tuple(ids.shape)} and {tuple(mask.shape)}")
        mb = mask.to(torch.bool)
        return _checked(PackedTokens(ids[mb].to(torch.long), mb.sum(dim=1).to(torch.long)),
                        "PackedTokens.from_padded")

    @staticmethod
    def from_sequences(seqs: Sequence[Sequence[int] | Tensor]) -> "PackedTokens":
        """From a sequence of per-response id sequences (lists, tuples, numpy or 1-D tensors)."""
        where = "PackedTokens.from_sequences"
        if all(isinstance(s, Tensor) for s in seqs):
            for i, s in enumerate(seqs):
                if s.dim() != 1 or s.is_floating_point() or s.is_complex():
                    raise ValueError(f"{where}: token_ids[{i}] must be a 1-D integer tensor, got "
                                     f"dtype {s.dtype} shape {tuple(s.shape)}")
            lens = torch.tensor([s.numel() for s in seqs], dtype=torch.long)
            flat = torch.cat([s.to(torch.long) for s in seqs]) if len(seqs) else \
                torch.zeros(0, dtype=torch.long)
            return _checked(PackedTokens(flat, lens), where)
        lens_list = [len(s) for s in seqs]
        total = sum(lens_list)
        # np.fromiter over one chained iterator is ~3x faster than torch.tensor(list of lists).
        try:
            arr = np.fromiter(itertools.chain.from_iterable(
                s.tolist() if isinstance(s, (Tensor, np.ndarray)) else s for s in seqs),
                dtype=np.int64, count=total)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: token ids must be integers ({exc})") from None
        return _checked(PackedTokens(torch.from_numpy(arr), torch.tensor(lens_list, dtype=torch.long)),
                        where)


TokenIds = Union[PackedTokens, Sequence[Sequence[int]], Sequence[Tensor]]


def _checked(p: PackedTokens, where: str) -> PackedTokens:
    if p.flat.numel() and int(p.flat.min()) < 0:
        i = int((p.flat < 0).nonzero()[0, 0])
        row = int(torch.searchsorted(torch.cumsum(p.lengths, 0), torch.tensor(i), right=True))
        raise ValueError(f"{where}: negative token id {int(p.flat[i])} in response {row}")
    return p


def as_packed(token_ids: TokenIds, n: int | None = None, where: str = "as_packed") -> PackedTokens:
    """Normalise ``token_ids`` (PackedTokens or a sequence of sequences) and check its length."""
    p = token_ids if isinstance(token_ids, PackedTokens) else PackedTokens.from_sequences(token_ids)
    if n is not None and len(p) != n:
        raise ValueError(f"{where}: len(token_ids) = {len(p)} does not match the batch size {n}")
    return p


def _distance_from_intersections(inter: Tensor) -> Tensor:
    """[n, n] intersection counts (diagonal = set sizes) -> [n, n] Jaccard distances."""
    sizes = inter.diagonal()
    union = sizes[:, None] + sizes[None, :] - inter
    sim = torch.where(union > 0, inter / union.clamp(min=1.0), torch.ones_like(inter))
    return 1.0 - sim


def grouped_jaccard_distances(
    token_ids: TokenIds,
    group: Tensor,
    num_groups: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> list[Tensor]:
    """Pairwise Jaccard distances inside each group.

    Args:
        token_ids: N responses' token ids (PackedTokens or a sequence of sequences).
        group: [N] int64 group id of each response, values in [0, G).
        num_groups: G (default ``group.max() + 1``).
        dtype: of the result; distances are computed in float64 (exact for the counts
            involved), so ``torch.float64`` gives bit-for-bit ``1 - |A∩B| / |A∪B|``.

    Returns:
        A list of G tensors; entry g is [n_g, n_g], rows/columns ordered by batch index
        of the group's members (i.e. ``(group == g).nonzero()`` order). Diagonals are 0.
    """
    where = "grouped_jaccard_distances"
    n = int(group.numel())
    packed = as_packed(token_ids, n, where)
    G = int(group.max()) + 1 if num_groups is None and n else (num_groups or 0)
    if n == 0:
        return [torch.zeros(0, 0, dtype=dtype) for _ in range(G)]
    if group.dim() != 1 or int(group.min()) < 0 or int(group.max()) >= G:
        raise ValueError(f"{where}: group must be a 1-D tensor of ids in [0, {G}), got values in "
                         f"[{int(group.min())}, {int(group.max())}] and shape {tuple(group.shape)}")
    inter, sizes = _group_intersections(packed, group.to(torch.long).numpy(), G)
    union = sizes[:, :, None] + sizes[:, None, :] - inter
    sim = np.divide(inter, union, out=np.ones_like(inter), where=union > 0)
    dist = torch.from_numpy(1.0 - sim).to(dtype)
    return [dist[g, :c, :c] for g, c in enumerate(sizes_per_group(group, G))]


def grouped_intersections(token_ids: TokenIds, group: Tensor, num_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact |T_i ∩ T_j| inside each group and the set sizes |T_i|, as integers.

    Args:
        token_ids: N responses' token ids (PackedTokens or a sequence of sequences).
        group: [N] int64 group id of each response, values in [0, G).
        num_groups: G.

    Returns:
        ``(inter, sizes)``: int64 [G, S, S] and [G, S] (S = the largest group); slot s of group g
        is the group's s-th member in batch order. Integer counts let callers compare a
        similarity with a threshold exactly (|∩| * den < num * |∪|) instead of in floating point.
    """
    where = "grouped_intersections"
    n = int(group.numel())
    packed = as_packed(token_ids, n, where)
    if n == 0:
        return np.zeros((num_groups, 1, 1), dtype=np.int64), np.zeros((num_groups, 1), dtype=np.int64)
    inter, sizes = _group_intersections(packed, group.to(torch.long).numpy(), num_groups)
    return np.rint(inter).astype(np.int64), np.rint(sizes).astype(np.int64)


def sizes_per_group(group: Tensor, num_groups: int) -> list[int]:
    """Number of members of each group: [N] group ids -> G counts."""
    return torch.bincount(group.to(torch.long), minlength=num_groups).tolist()


def _group_intersections(packed: PackedTokens, gid: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Intersection counts |T_i ∩ T_j| for all pairs inside each group.

    One sort does the work: every token occurrence becomes the key (group, token, slot), slot
    being the response's rank inside its group. After sorting and dropping repeated keys
    (repeated tokens in one response), each run of equal (group, token) lists the slots of the
    responses containing that token. For slots < 2^10 the run becomes a bit code and a
    histogram of codes per group gives all intersections with one small matmul; larger groups
    fall back to a dense incidence matrix per group.

    Returns:
        ``(inter, sizes)``: float64 [G, S, S] intersections and [G, S] set sizes, S = the
        largest group size; entries past a group's size are 0.
    """
    slot, S = _slots_in_groups(gid, G)
    gt, s, vocab, kt = _distinct_group_token_slots(packed, gid, slot, G, S)
    new_run = np.empty(gt.size, dtype=bool)
    if gt.size:
        new_run[0] = True
        np.not_equal(gt[1:], gt[:-1], out=new_run[1:])
    if S <= _HIST_MAX_SLOTS:
        inter = _histogram_intersections(gt, s, np.flatnonzero(new_run), vocab, kt, G, S)
    else:
        inter = _dense_intersections(gt, s, new_run, vocab, G, S)
    sizes = np.diagonal(inter, axis1=1, axis2=2).copy()
    return inter, sizes


def _slots_in_groups(gid: np.ndarray, G: int) -> tuple[np.ndarray, int]:
    """Each response's rank inside its group (batch order), and S, the largest group size."""
    counts = np.bincount(gid, minlength=G)
    S = max(int(counts.max()), 1)
    order = np.argsort(gid, kind="stable")
    starts = np.cumsum(counts) - counts
    slot = np.empty(gid.shape[0], dtype=np.int64)
    slot[order] = np.arange(gid.shape[0]) - starts[gid[order]]
    return slot, S


def _distinct_group_token_slots(
    packed: PackedTokens, gid: np.ndarray, slot: np.ndarray, G: int, S: int
) -> tuple[np.ndarray, np.ndarray, int, type]:
    """Sorted distinct (group, token, slot) keys, split into ``group * vocab + token`` and slot.

    Returns ``(gt, s, vocab, kt)``; ``kt`` is the integer type of the keys.
    """
    lens = packed.lengths.numpy()
    flat = packed.flat.numpy()
    vocab = int(flat.max()) + 1 if flat.size else 1
    slot_bits = max(1, (S - 1).bit_length())  # slots packed in the low bits: shifts, not divisions
    if G * vocab >= 1 << (62 - slot_bits):  # keep the packed key inside int64: compact the vocabulary
        _, flat = np.unique(flat, return_inverse=True)
        vocab = int(flat.max()) + 1
    # key = ((group * vocab + token) << slot_bits) | slot, built in place to avoid temporaries;
    # int32 when it fits (a paper step: 256 x 151,936 x 8 < 2^31), which halves the sort's work
    kt = np.int32 if G * vocab < 1 << (31 - slot_bits) else np.int64
    key = np.repeat(gid.astype(kt), lens)
    key *= kt(vocab)
    key += flat.astype(kt, copy=False)
    key <<= kt(slot_bits)
    key |= np.repeat(slot.astype(kt), lens)
    key.sort()
    if key.size:
        fresh = np.empty(key.size, dtype=bool)
        fresh[0] = True
        np.not_equal(key[1:], key[:-1], out=fresh[1:])
        key = key[fresh]  # distinct (group, token, slot): repeats inside a response collapse
    return key >> kt(slot_bits), key & kt((1 << slot_bits) - 1), vocab, kt


def _histogram_intersections(
    gt: np.ndarray, s: np.ndarray, run_first: np.ndarray, vocab: int, kt: type, G: int, S: int
) -> np.ndarray:
    """Small groups: each run's slots as a bit code, a histogram of codes per group, one matmul."""
    if not gt.size:
        return np.zeros((G, S, S), dtype=np.float64)
    # bit code of each run = sum of its (distinct) slot bits, via a cumulative sum
    csum = np.cumsum(np.left_shift(kt(1), s), dtype=np.int64)
    ends = np.empty_like(run_first)
    ends[:-1] = run_first[1:] - 1
    ends[-1] = gt.size - 1
    code = csum[ends]
    code[1:] -= csum[ends[:-1]]
    run_group = (gt[run_first] // kt(vocab)).astype(np.int64)
    hist = np.bincount(run_group * (1 << S) + code, minlength=G << S).reshape(G, 1 << S)
    bits = ((np.arange(1 << S)[:, None] >> np.arange(S)[None, :]) & 1).astype(np.float64)
    pair = (bits[:, :, None] * bits[:, None, :]).reshape(1 << S, S * S)
    # torch, not numpy, for the matmul: it follows the caller's torch thread setting
    # instead of spinning up every BLAS thread for a tiny product
    return (torch.from_numpy(hist.astype(np.float64)) @ torch.from_numpy(pair)).numpy().reshape(G, S, S)


def _dense_intersections(
    gt: np.ndarray, s: np.ndarray, new_run: np.ndarray, vocab: int, G: int, S: int
) -> np.ndarray:
    """Large groups: a dense (token x slot) incidence matrix per group, X^T X."""
    inter = np.zeros((G, S, S), dtype=np.float64)
    run_id = np.cumsum(new_run) - 1
    entry_group = gt // vocab
    bounds = np.searchsorted(entry_group, np.arange(G + 1))
    for g in range(G):
        a, b = bounds[g], bounds[g + 1]
        if a == b:
            continue
        local = run_id[a:b] - run_id[a]
        x = torch.zeros(int(local[-1]) + 1, S, dtype=torch.float64)
        x[torch.from_numpy(local.astype(np.int64)), torch.from_numpy(s[a:b].astype(np.int64))] = 1.0
        inter[g] = (x.T @ x).numpy()
    return inter


def jaccard_distance_matrix(token_ids: TokenIds) -> Tensor:
    """All-pairs Jaccard distances among N responses: token ids of N responses -> [N, N] float32."""
    packed = as_packed(token_ids, where="jaccard_distance_matrix")
    return grouped_jaccard_distances(packed, torch.zeros(len(packed), dtype=torch.long), 1)[0]
