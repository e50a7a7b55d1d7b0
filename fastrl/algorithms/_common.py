"""Shared input checks and ragged-group bookkeeping for the algorithm core.

Groups are keyed by ``uid`` (any hashable, one per response) and never assumed contiguous or of
equal size: every function here works on a flat batch plus a ``group_index`` tensor.
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

import torch
from torch import Tensor


def as_1d_float(values: Tensor | Sequence[float], name: str, where: str) -> Tensor:
    """``values`` as a 1-D floating tensor [N], checked to be non-empty and finite.

    Integer / bool inputs become float32; floating inputs keep their dtype. Raises ``ValueError``
    naming ``where`` (the calling function), ``name`` and the first bad index.
    """
    t = values if isinstance(values, Tensor) else torch.as_tensor(values)
    if t.dim() != 1:
        raise ValueError(f"{where}: {name} must be 1-D [N], got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{where}: empty batch ({name} has no elements)")
    if not t.is_floating_point():
        t = t.to(torch.float32)
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"{where}: {name}[{i}] = {t[i].item()} is not finite (NaN or inf)")
    return t


def group_index(uids: Sequence[Hashable], n: int, where: str) -> tuple[Tensor, list[Hashable]]:
    """Map uids to dense group ids in order of first appearance.

    Args:
        uids: one hashable id per response, length ``n``; groups need not be contiguous.
        n: the expected batch size (length of the companion tensors).
        where: the calling function, for error messages.

    Returns:
        ``(gid, unique)``: ``gid`` LongTensor [N] with values in [0, G); ``unique`` the G uids,
        ``unique[g]`` being the uid of group ``g``.
    """
    if len(uids) != n:
        raise ValueError(f"{where}: len(uids) = {len(uids)} does not match the batch size {n}")
    table: dict[Hashable, int] = {}
    ids = [0] * n
    for i, u in enumerate(uids):
        try:
            g = table.setdefault(u, len(table))
        except TypeError:
            raise ValueError(f"{where}: uids[{i}] = {u!r} is not hashable") from None
        ids[i] = g
    return torch.tensor(ids, dtype=torch.long), list(table)


def uid_sort_key(uid: Hashable) -> tuple[str, str]:
    """A total order on arbitrary hashable uids that does not depend on batch position.

    Used only to break ties between questions, so that the same set of responses gives the same
    result in any batch order (docs/algorithms.md, "Data-parallel invariance"). ``repr`` is stable
    across processes for the uid types used in practice (str, int, tuples of them), unlike
    ``hash`` of a str, which Python salts per process.
    """
    return (type(uid).__name__, repr(uid))


def check_positive_int(value: int, name: str, where: str, minimum: int = 1) -> None:
    """Raise ``ValueError`` unless ``value`` is an int >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: {name} = {value!r} must be an integer >= {minimum}")


def check_fraction(value: float, name: str, where: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0.0 <= value <= 1.0:
        raise ValueError(f"{where}: {name} = {value!r} must lie in [0, 1]")
