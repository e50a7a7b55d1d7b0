"""A method = its registered components (docs/algorithms.md, "Adding a component"), built here
from the config: each from its own section of ``cfg.algorithm`` (fastrl.algorithms.registry).

The algorithm core (fastrl.algorithms) holds the rules and checks their hyper-parameters; this
module only says which names to build and what the trainer adds (the initial n, the batch size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fastrl.algorithms import registry
from fastrl.algorithms.registry import AdvantageEstimator, GroupFilter, PromptSelector, Pruner, RolloutScaler
from fastrl.config import ConfigError, FastRLConfig


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
        prompt_selector=_build(registry.PROMPT_SELECTORS, a.prompt_selector, a),
        new_group_buffer=registry.bind(registry.GROUP_FILTERS, a.group_filter, a),
        pruner=_build(registry.PRUNERS, a.pruner, a),
        rollout_scaler=_build(registry.ROLLOUT_SCALERS, a.rollout_scaler, a, n_init=cfg.rollout.n),
        advantage=registry.get(registry.ADVANTAGE_ESTIMATORS, a.advantage),
    )


def _build(table: registry.Registry, name: str, sections: object, **context: object) -> Any:
    """``registry.build``, with a hyper-parameter the component rejects reported as the config key
    it came from (the component checks its own values; only the config knows their names)."""
    try:
        return registry.build(table, name, sections, **context)
    except ValueError as err:
        section = table.entry(name).section
        where = f"algorithm.{section}" if section else f"algorithm.{table.kind}={name}"
        raise ConfigError(f"{where}: {err}") from err
