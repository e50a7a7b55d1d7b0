"""A pruner written outside the package (docs/algorithms.md, "Adding a component"): per question,
keep the ``fraction`` of its responses with the highest reward.

    PYTHONPATH=docs/examples fastrl train methods/grpo.yaml --scale smoke --import keep_top_pruner \
        algorithm.pruner=keep_top algorithm.keep_top.fraction=0.25
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fastrl.algorithms.pruning import PruneBatch, PruneResult, prune_result
from fastrl.algorithms.registry import PRUNERS, register


@dataclass
class KeepTopConfig:
    """``algorithm.keep_top``: typed and checked when the config is read."""

    fraction: float = 0.5

    def check(self) -> None:  # the message starts with the field: "algorithm.keep_top.fraction = 2 ..."
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction = {self.fraction} must lie in (0, 1]")


@register(PRUNERS, "keep_top", section="keep_top", config=KeepTopConfig)
class KeepTop:
    prune_first = True  # prune before the old/ref log-prob passes

    def __init__(self, config: KeepTopConfig) -> None:
        config.check()
        self.config = config
        self.lowest_kept_reward = 0.0

    def metrics(self) -> dict[str, float]:  # logged with the step, under this pruner's own key
        return {"keep_top/lowest_kept_reward": self.lowest_kept_reward}

    def __call__(self, batch: PruneBatch, *, align_to: int, generator: Any = None) -> PruneResult:
        by_question: dict[Any, list[int]] = {}
        for i, uid in enumerate(batch.uids):
            by_question.setdefault(uid, []).append(i)
        keep = [False] * len(batch)
        for members in by_question.values():
            ranked = sorted(members, key=lambda i: -float(batch.rewards[i]))  # stable: batch order breaks ties
            for i in ranked[: math.ceil(self.config.fraction * len(members))]:
                keep[i] = True
        self.lowest_kept_reward = min((float(batch.rewards[i]) for i, k in enumerate(keep) if k), default=0.0)
        return prune_result(batch, keep, align_to)  # refilled to a multiple of align_to, as MDAP's step 5
