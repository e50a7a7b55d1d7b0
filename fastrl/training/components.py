"""A method = five registered components (DESIGN.md §2), built here from the config.

The algorithm core (fastrl.algorithms) holds the pure rules; this module binds their
hyper-parameters from the config and adapts the DAPO rule to rollout batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from fastrl.algorithms import registry
from fastrl.algorithms.group_filter import dapo_keep_groups
from fastrl.config import FastRLConfig
from fastrl.training.batch import RolloutBatch


class BatchGroupFilter:
    """No filtering: the first rollout batch is the step's batch."""

    def reset(self, target_groups: int) -> None:
        self._batch: RolloutBatch | None = None

    def add(self, batch: RolloutBatch, tries: int) -> bool:
        self._batch = batch
        return True

    def result(self) -> RolloutBatch:
        assert self._batch is not None, "add() was never called"
        return self._batch


class DapoBatchFilter(BatchGroupFilter):
    """DAPO dynamic sampling: keep groups whose accuracy is mixed, regenerate until the batch has
    ``target_groups`` of them, at most ``max_tries`` rollouts, then fail with a clear error."""

    def __init__(self, max_tries: int) -> None:
        self.max_tries = max_tries

    def reset(self, target_groups: int) -> None:
        self.target = target_groups
        self.parts: list[RolloutBatch] = []
        self.num_groups = 0
        self.seen_groups = 0

    def add(self, batch: RolloutBatch, tries: int) -> bool:
        keep = dapo_keep_groups(batch.accuracies, batch.uids)
        self.seen_groups += len(keep)
        idx = [i for i, uid in enumerate(batch.uids) if keep[uid]]
        self.parts.append(batch.select(idx))
        self.num_groups += sum(1 for v in keep.values() if v)
        if self.num_groups >= self.target:
            return True
        if tries >= self.max_tries:
            raise RuntimeError(
                f"DAPO dynamic sampling could not fill the batch: {self.num_groups} of {self.target} "
                f"groups with mixed accuracy after {tries} tries ({self.seen_groups} groups generated). "
                "Raise algorithm.dapo.max_tries, lower trainer.prompts_per_step, or raise rollout.n / "
                "rollout.temperature so groups are less often all-correct or all-wrong."
            )
        return False

    def result(self) -> RolloutBatch:
        merged = RolloutBatch.concat(self.parts)
        order: list[str] = []
        for uid in merged.uids:
            if uid not in order:
                order.append(uid)
        chosen = set(order[: self.target])
        return merged.select([i for i, uid in enumerate(merged.uids) if uid in chosen])


@dataclass
class Components:
    prompt_selector: Any
    group_filter: BatchGroupFilter
    pruner: Callable[..., torch.Tensor]
    rollout_scaler: Any
    advantage: Callable[..., torch.Tensor]


def build_components(cfg: FastRLConfig) -> Components:
    a = cfg.algorithm
    pruner_kwargs: dict[str, dict[str, Any]] = {
        "none": {},
        "mdap": {"tau": a.mdap.tau, "adv_eps": a.mdap.adv_eps},
        "cppo": {"prune_rate": a.cppo.prune_rate},
        "random": {"prune_rate": a.random.prune_rate},
        "advantage_only": {"adv_eps": a.mdap.adv_eps},
    }
    scaler_kwargs: dict[str, dict[str, Any]] = {
        "fixed": {"n": cfg.rollout.n},
        "ars": {
            "n_init": cfg.rollout.n, "n_min": a.ars.n_min, "n_max": a.ars.n_max, "beta": a.ars.beta,
            "headroom": a.ars.headroom, "rho_high": a.ars.rho_high, "grow_step": a.ars.grow_step,
            "per_prompt": a.ars.per_prompt,
        },
    }
    selector_kwargs: dict[str, dict[str, Any]] = {
        "all": {},
        "greso": {
            "p_easy": a.greso.p_easy, "p_hard": a.greso.p_hard, "alpha": a.greso.alpha,
            "step_size": a.greso.step_size, "p_min": a.greso.p_min, "p_max": a.greso.p_max,
            "floor": a.greso.floor,
        },
    }
    group_filter = DapoBatchFilter(a.dapo.max_tries) if a.group_filter == "dapo" else BatchGroupFilter()
    return Components(
        prompt_selector=registry.get(registry.PROMPT_SELECTORS, a.prompt_selector)(**selector_kwargs[a.prompt_selector]),
        group_filter=group_filter,
        pruner=registry.get(registry.PRUNERS, a.pruner)(**pruner_kwargs[a.pruner]),
        rollout_scaler=registry.get(registry.ROLLOUT_SCALERS, a.rollout_scaler)(**scaler_kwargs[a.rollout_scaler]),
        advantage=registry.get(registry.ADVANTAGE_ESTIMATORS, a.advantage),
    )
