"""DAPO dynamic sampling (online group filtering) and the no-filter baseline.

DAPO keeps a question's group iff its *accuracy* (not the overall reward, which also carries
the format bonus) is neither all 0 nor all 1 — a group whose accuracies are all equal has zero
advantage and no gradient. The trainer regenerates with fresh prompts until enough groups are
kept, at most ``max_tries`` times (20 in DAPO's scripts), then fails with a clear error.

Loop the trainer runs::

    buf = DynamicSamplingBuffer(target_groups=B, max_tries=20)
    while not buf.full:
        ... roll out a batch, score it ...
        buf.add(accuracies, uids, payloads)      # raises after the last try if still not full
    groups = buf.take()                           # the first B kept groups, in arrival order
"""

from __future__ import annotations

from typing import Any, Generic, Hashable, Mapping, Sequence, TypeVar

import torch

from torch import Tensor

from fastrl import metric_keys as K
from fastrl.algorithms._common import as_1d_float, check_positive_int, group_index
from fastrl.algorithms.sections import DapoConfig

T = TypeVar("T")


def dapo_keep_groups(accuracies: Tensor | Sequence[float], uids: Sequence[Hashable]) -> dict[Hashable, bool]:
    """DAPO's keep rule per question.

    Args:
        accuracies: [N] per-response accuracy in [0, 1] (1 = correct).
        uids: length N, question id of each response (groups need not be contiguous).

    Returns:
        ``{uid: keep}`` in order of first appearance; keep iff the group's accuracies are not
        all 0 and not all 1 (a single-response group is therefore never kept).
    """
    where = "dapo_keep_groups"
    acc = as_1d_float(accuracies, "accuracies", where).to(torch.float64)
    bad = (acc < 0) | (acc > 1)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"{where}: accuracies[{i}] = {acc[i].item()} (uid={uids[i]!r}) is outside [0, 1]")
    gid, unique = group_index(uids, acc.numel(), where)
    G = len(unique)
    all_zero = torch.zeros(G, dtype=torch.float64).index_add_(0, gid, (acc != 0).double()) == 0
    all_one = torch.zeros(G, dtype=torch.float64).index_add_(0, gid, (acc != 1).double()) == 0
    keep = ~(all_zero | all_one)
    return {u: bool(k) for u, k in zip(unique, keep.tolist())}


class DynamicSamplingBuffer(Generic[T]):
    """Accumulates DAPO-kept groups across regeneration tries.

    Args:
        target_groups: the number of groups the step needs (>= 1).
        max_tries: generation tries allowed before giving up (>= 1).
    """

    name = "dapo"

    def __init__(self, target_groups: int, max_tries: int = 20) -> None:
        check_positive_int(target_groups, "target_groups", type(self).__name__)
        check_positive_int(max_tries, "max_tries", type(self).__name__)
        self.target_groups = target_groups
        self.max_tries = max_tries
        self.tries = 0
        self.seen_groups = 0
        self._kept: list[tuple[Hashable, T | list[int]]] = []

    @classmethod
    def from_config(cls, config: DapoConfig, target_groups: int) -> "DynamicSamplingBuffer[T]":
        """One step's buffer from its section, ``algorithm.dapo``."""
        return cls(target_groups, max_tries=config.max_tries)

    def keep(self, accuracies: Tensor | Sequence[float], uids: Sequence[Hashable]) -> dict[Hashable, bool]:
        """The keep rule for one batch (no state change)."""
        return dapo_keep_groups(accuracies, uids)

    @property
    def full(self) -> bool:
        return len(self._kept) >= self.target_groups

    @property
    def num_kept(self) -> int:
        return len(self._kept)

    @property
    def kept_uids(self) -> set[Hashable]:
        """The uids of the groups kept so far (a later try must not roll them out again)."""
        return {u for u, _ in self._kept}

    def add(
        self,
        accuracies: Tensor | Sequence[float],
        uids: Sequence[Hashable],
        payloads: Mapping[Hashable, T] | None = None,
    ) -> dict[Hashable, bool]:
        """Add one try's batch; keeps the groups the rule accepts.

        Args:
            accuracies: [N] per-response accuracies of this try.
            uids: length N question ids.
            payloads: optional ``uid -> anything`` to store for kept groups (e.g. the rollout
                records); by default the group's response indices within this try's batch.

        Returns:
            The keep decision per uid.

        Raises:
            ValueError: when this was the last allowed try and the buffer is still not full.
        """
        decisions = self.keep(accuracies, uids)
        self.tries += 1
        self.seen_groups += len(decisions)
        indices: dict[Hashable, list[int]] = {}
        for i, u in enumerate(uids):
            indices.setdefault(u, []).append(i)
        for u, k in decisions.items():
            if k:
                if payloads is not None and u not in payloads:
                    raise ValueError(f"{type(self).__name__}.add: no payload for kept group uid={u!r}")
                self._kept.append((u, payloads[u] if payloads is not None else indices[u]))
        if not self.full and self.tries >= self.max_tries:
            raise ValueError(
                f"DAPO dynamic sampling could not fill the batch: got {len(self._kept)} of "
                f"{self.target_groups} groups with mixed accuracy after {self.tries} tries "
                f"({self.seen_groups} groups generated); lower the number of prompts per step, "
                f"raise the rollouts per prompt or algorithm.dapo.max_tries, or use data that is "
                f"neither too easy nor too hard for the model")
        return decisions

    def take(self) -> list[tuple[Hashable, T | list[int]]]:
        """The first ``target_groups`` kept ``(uid, payload)`` pairs, in arrival order (DAPO
        drops the surplus of the last try)."""
        if not self.full:
            raise ValueError(f"{type(self).__name__}.take: only {len(self._kept)} of "
                             f"{self.target_groups} groups kept so far; keep calling add()")
        return self._kept[: self.target_groups]

    def metrics(self) -> dict[str, float]:
        """What the trainer logs for the step: the generation tries it took."""
        return {K.ROLLOUT_TRIES: float(self.tries)}


class NoGroupFilter(DynamicSamplingBuffer[T]):
    """No filtering: every group is kept and one try fills the step (same interface)."""

    name = "none"

    def keep(self, accuracies: Tensor | Sequence[float], uids: Sequence[Hashable]) -> dict[Hashable, bool]:
        acc = as_1d_float(accuracies, "accuracies", "NoGroupFilter.keep")
        _, unique = group_index(uids, acc.numel(), "NoGroupFilter.keep")
        return {u: True for u in unique}

    @property
    def full(self) -> bool:
        return self.tries >= 1

    def take(self) -> list[tuple[Hashable, Any]]:
        """All groups of the single try (nothing is dropped, even beyond ``target_groups``)."""
        if not self.full:
            raise ValueError("NoGroupFilter.take: call add() once first")
        return list(self._kept)
