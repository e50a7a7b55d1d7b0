"""A method = its registered components (docs/algorithms.md, "Adding a component"), built here
from the config: each from its own section of ``cfg.algorithm`` (fastrl.algorithms.registry).

The algorithm core (fastrl.algorithms) holds the rules and checks their hyper-parameters; this
module only says which names to build and what the trainer adds (the initial n, the batch size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fastrl.algorithms import registry
from fastrl.algorithms.registry import AdvantageEstimator, GroupFilter, PromptSelector, Pruner, RolloutScaler
from fastrl.config import FastRLConfig


@dataclass
class Components:
    prompt_selector: PromptSelector
    # (target_groups) -> a fresh group accumulator for one step
    new_group_buffer: Callable[[int], GroupFilter]
    pruner: Pruner
    rollout_scaler: RolloutScaler
    advantage: AdvantageEstimator


def build_components(cfg: FastRLConfig) -> Components:
    a = cfg.algorithm
    return Components(
        prompt_selector=registry.build(registry.PROMPT_SELECTORS, a.prompt_selector, a),
        new_group_buffer=registry.bind(registry.GROUP_FILTERS, a.group_filter, a),
        pruner=registry.build(registry.PRUNERS, a.pruner, a),
        rollout_scaler=registry.build(registry.ROLLOUT_SCALERS, a.rollout_scaler, a, n_init=cfg.rollout.n),
        advantage=registry.get(registry.ADVANTAGE_ESTIMATORS, a.advantage),
    )
