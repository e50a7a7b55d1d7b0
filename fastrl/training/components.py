"""A method = its registered components (docs/algorithms.md, "Adding a component"), built here
from the config: each from its own section of ``cfg.algorithm`` (fastrl.algorithms.registry).

The algorithm core (fastrl.algorithms) holds the rules and checks their hyper-parameters; this
module only says which names to build and what the trainer adds (the initial n, the batch size).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable

from fastrl.algorithms import registry
from fastrl.algorithms.pruning import PruneBatch
from fastrl.algorithms.registry import AdvantageEstimator, GroupFilter, PromptSelector, Pruner, RolloutScaler
from fastrl.config import ConfigError, FastRLConfig

if TYPE_CHECKING:
    from fastrl.training.batch import RolloutBatch


@dataclass
class Components:
    prompt_selector: PromptSelector
    # (target_groups) -> a fresh group accumulator for one step
    new_group_buffer: Callable[[int], GroupFilter]
    pruner: Pruner
    rollout_scaler: RolloutScaler
    advantage: AdvantageEstimator


    def state_dict(self) -> dict[str, Any]:
        """What the components carry from step to step, for the checkpoint: ARS's and GRESO's
        state, and a pruner's where it holds any (``state_dict``; the built-in pruners hold none,
        so their checkpoints have no ``pruner`` key)."""
        state = {"rollout_scaler": self.rollout_scaler.state_dict(),
                 "prompt_selector": self.prompt_selector.state_dict()}
        if hasattr(self.pruner, "state_dict"):
            state["pruner"] = self.pruner.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rollout_scaler.load_state_dict(state["rollout_scaler"])
        self.prompt_selector.load_state_dict(state["prompt_selector"])
        if hasattr(self.pruner, "load_state_dict") and "pruner" in state:
            self.pruner.load_state_dict(state["pruner"])


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


# The batch fields PruneBatch names itself; every other field travels in its ``columns``.
_NAMED = {"advantages", "uids", "response_ids", "rewards"}


def prune_view(batch: RolloutBatch) -> PruneBatch:
    """What the pruner sees of the trainer's batch: the named fields, each record's dataset row
    as its question id (the release's question order), every other field the batch holds as a
    column (a column not computed yet, e.g. old log-probs before those passes, is absent)."""
    return PruneBatch(
        advantages=batch.advantages, uids=batch.uids, question_ids=batch.question_ids,
        response_ids=batch.response_ids, rewards=batch.rewards,
        columns={f.name: getattr(batch, f.name) for f in fields(batch)
                 if f.name not in _NAMED and getattr(batch, f.name) is not None},
    )
