"""Group-relative advantages over ragged groups keyed by uid (docs/algorithms.md, "Advantage").

GRPO:     A_i = (r_i - mean_g r) / (std_g r + eps), unbiased std (n - 1), eps = 1e-6.
Dr.GRPO:  A_i = r_i - mean_g r.

Groups are found by uid, never by reshaping: responses of one question may be anywhere in the
batch and groups may have different sizes (ARS per-prompt mode, DAPO refills). A group whose
rewards are all equal gets A = 0 exactly (not merely ~1e-9), so pruning can group such responses
by exact equality. A group of size 1 has no baseline and is an error.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch
from torch import Tensor

from fastrl.algorithms._common import as_1d_float, group_index


def grpo_advantages(
    rewards: Tensor | Sequence[float],
    uids: Sequence[Hashable],
    *,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> Tensor:
    """GRPO (``norm_by_std=True``) or Dr.GRPO (``False``) outcome advantages.

    Args:
        rewards: [N] scalar reward per response (discrete or continuous), finite.
        uids: length N, the question id of each response (any hashable; groups need not be
            contiguous).
        eps: added to the group std before dividing.
        norm_by_std: divide by (std + eps) as GRPO does; ``False`` gives Dr.GRPO.

    Returns:
        [N] advantages, dtype of ``rewards`` if floating, else float32. Computed in float64.

    Raises:
        ValueError: empty batch, length mismatch, non-finite reward (names the index), or a
            group with a single response (names the uid).
    """
    where = "grpo_advantages"
    r = as_1d_float(rewards, "rewards", where)
    out_dtype = r.dtype
    gid, unique = group_index(uids, r.numel(), where)
    num_groups = len(unique)
    counts = torch.bincount(gid, minlength=num_groups)
    singles = (counts < 2).nonzero().flatten()
    if singles.numel() > 0:
        u = unique[int(singles[0])]
        raise ValueError(
            f"{where}: group uid={u!r} has a single response; a group-relative advantage needs "
            f"at least 2 responses per uid ({singles.numel()} such group(s) in this batch)"
        )
    r64 = r.to(torch.float64)
    cnt = counts.to(torch.float64)
    mean = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, gid, r64) / cnt
    centred = r64 - mean[gid]
    # Exact zero for constant groups: (r - mean) can be ~1e-17 in float when mean is inexact.
    gmax = torch.full((num_groups,), -torch.inf, dtype=torch.float64).scatter_reduce_(
        0, gid, r64, reduce="amax")
    gmin = torch.full((num_groups,), torch.inf, dtype=torch.float64).scatter_reduce_(
        0, gid, r64, reduce="amin")
    constant = (gmax == gmin)[gid]
    centred = torch.where(constant, torch.zeros_like(centred), centred)
    if norm_by_std:
        var = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, gid, centred * centred)
        std = (var / (cnt - 1.0)).sqrt()
        adv = centred / (std[gid] + eps)
    else:
        adv = centred
    return adv.to(out_dtype)


def drgrpo_advantages(rewards: Tensor | Sequence[float], uids: Sequence[Hashable]) -> Tensor:
    """Dr.GRPO advantages A_i = r_i - mean_g r: [N] rewards, N uids -> [N] (see grpo_advantages)."""
    return grpo_advantages(rewards, uids, norm_by_std=False)
