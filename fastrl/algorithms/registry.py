"""Component registries: a method is a choice of components (docs/algorithms.md, "Adding a component").

=====================  ==============================  =====================================
registry               names                           holds
=====================  ==============================  =====================================
PROMPT_SELECTORS       all, greso                      factories -> :class:`PromptSelector`
GROUP_FILTERS          none, dapo                      factories -> :class:`GroupFilter`
PRUNERS                none, mdap, cppo, random,       factories -> :class:`Pruner`
                       advantage_only
ROLLOUT_SCALERS        fixed, ars                      factories -> :class:`RolloutScaler`
POLICY_LOSSES          ppo_clip, gspo, gspo_token      :class:`PolicyLoss` functions
ADVANTAGE_ESTIMATORS   grpo, drgrpo                    :class:`AdvantageEstimator` functions
=====================  ==============================  =====================================

A factory is built from its own section of ``cfg.algorithm`` (the entry's ``section``, passed as
keyword arguments named like the section's fields) plus what the trainer adds (``context``)::

    pruner = build(PRUNERS, "mdap", cfg.algorithm)             # MDAPPruner(tau=..., rule=...)
    result = pruner(advantages, uids, token_ids, align_to=d, generator=g)  # PruneResult
    scaler = build(ROLLOUT_SCALERS, "ars", cfg.algorithm, n_init=cfg.rollout.n)

This module imports no torch (``fastrl.config`` reads the valid names from it): the built-in
entries name their factory as ``"module:attribute"``, imported on first use. Plug-ins register
the object itself::

    @register(PRUNERS, "keep_positive")              # no section: built with the context only
    class KeepPositive: ...

    @register(PRUNERS, "my_mdap", section="mdap")    # built as my_mdap(tau=..., rule=...)
    def my_mdap(tau: float, rule: str) -> Pruner: ...
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from fastrl.algorithms.pruning import PruneResult
    from fastrl.algorithms.similarity import TokenIds

F = TypeVar("F", bound=Callable[..., Any])


# ---------------------------------------------------------------------- what the trainer calls
class PromptSelector(Protocol):
    """Decides before rollout which prompts to roll out (GRESO), from the outcomes it recorded."""

    def select(self, uids: Sequence[Hashable], generator: torch.Generator | None = None) -> list[bool]: ...

    def record_groups(self, groups: Mapping[Hashable, Sequence[float] | Tensor]) -> None: ...

    def end_step(self, epoch: int) -> dict[str, float]: ...

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class GroupFilter(Protocol):
    """One step's group accumulator (DAPO): the trainer rolls out again until it is ``full``."""

    @property
    def full(self) -> bool: ...

    def add(self, accuracies: Tensor | Sequence[float], uids: Sequence[Hashable],
            payloads: Mapping[Hashable, Any] | None = None) -> dict[Hashable, bool]: ...

    def take(self) -> list[tuple[Hashable, Any]]: ...

    def metrics(self) -> dict[str, float]: ...


class Pruner(Protocol):
    """Keeps a subset of the step's responses once advantages are known."""

    @property
    def prune_first(self) -> bool:
        """True: prune before the old/ref log-prob passes; False: those passes run on the full
        batch and pruning comes after (CPPO as released)."""
        ...

    def __call__(self, advantages: Tensor, uids: Sequence[Hashable], token_ids: TokenIds, *,
                 align_to: int, generator: torch.Generator | None,
                 question_ids: Sequence[int | None] | None = None) -> PruneResult:
        """``question_ids``: per response, its question's integer dataset row (None: none); the
        release visits questions in ascending question id (fastrl.algorithms.pruning, step 1)."""
        ...


class RolloutScaler(Protocol):
    """Rollouts per prompt (ARS): told each step's final per-question counts, it decides itself
    when a period ends and what n comes next."""

    @property
    def n(self) -> int: ...

    def n_for(self, uid: Hashable) -> int: ...

    def end_step(self, final_counts: Mapping[Hashable, int], *, step: int, epoch: int, progress: float) -> None: ...

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class PolicyLoss(Protocol):
    """``(logp, old_logp, advantages, mask, **settings) -> (loss, metrics)`` (losses.ppo_clip_loss, ...)."""

    def __call__(self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                 clip_low: float, clip_high: float, dual_clip: float | None, agg: str,
                 global_token_count: float | Tensor | None = None, global_seq_count: float | Tensor | None = None,
                 norm_constant: float | None = None) -> tuple[Tensor, dict[str, Tensor]]: ...


class AdvantageEstimator(Protocol):
    """``(rewards [N], uids) -> advantages [N]`` over ragged uid groups."""

    def __call__(self, rewards: Tensor | Sequence[float], uids: Sequence[Hashable]) -> Tensor: ...


# ---------------------------------------------------------------------- the tables
@dataclasses.dataclass(frozen=True)
class Entry:
    """A registered component: its factory (or function) and the ``cfg.algorithm`` section it is
    built from (None: built from the context alone).

    ``target`` is the object, or ``"module:attribute"`` imported on first use."""

    target: Callable[..., Any] | str
    section: str | None = None

    def load(self) -> Callable[..., Any]:
        obj: Any = self.target
        if isinstance(obj, str):
            module, _, attribute = obj.partition(":")
            obj = importlib.import_module(module)
            for part in attribute.split("."):
                obj = getattr(obj, part)
        return obj


class Registry(MutableMapping[str, Callable[..., Any]]):
    """name -> component, in registration order; ``registry[name]`` imports a lazy entry."""

    def __init__(self, kind: str, entries: Mapping[str, Entry] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = dict(entries or {})
        self._loaded: dict[str, Callable[..., Any]] = {}

    def entry(self, name: str) -> Entry:
        """The entry ``name``; a ``ValueError`` listing the valid names if there is none."""
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self))}") from None

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name not in self._loaded:
            self._loaded[name] = self._entries[name].load()
        return self._loaded[name]

    def __setitem__(self, name: str, value: Callable[..., Any] | Entry) -> None:
        self._entries[name] = value if isinstance(value, Entry) else Entry(value)
        self._loaded.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self)})"


def register(registry: Registry, name: str, *, section: str | None = None) -> Callable[[F], F]:
    """Decorator adding a component under ``name`` (once), built from ``cfg.algorithm.<section>``."""

    def deco(obj: F) -> F:
        if name in registry:
            raise ValueError(f"{registry.kind} {name!r} is already registered ({registry.entry(name).target!r})")
        registry[name] = Entry(obj, section)
        return obj

    return deco


def get(registry: Registry, name: str) -> Callable[..., Any]:
    """The component (or factory) ``name``; a ``ValueError`` listing the valid names if there is none."""
    registry.entry(name)
    return registry[name]


def bind(registry: Registry, name: str, sections: object) -> Callable[..., Any]:
    """The factory ``name`` with its own section of ``sections`` (``cfg.algorithm``) bound as
    keyword arguments: call it with the context."""
    section = registry.entry(name).section
    factory = registry[name]
    if section is None:
        return factory
    values = getattr(sections, section)
    return functools.partial(factory, **{f.name: getattr(values, f.name) for f in dataclasses.fields(values)})


def build(registry: Registry, name: str, sections: object, **context: Any) -> Any:
    """Component ``name`` built from its section of ``sections`` (``cfg.algorithm``) and ``context``."""
    return bind(registry, name, sections)(**context)


PROMPT_SELECTORS = Registry("prompt_selector", {
    "all": Entry("fastrl.algorithms.prompt_selection:AllPromptsSelector"),
    "greso": Entry("fastrl.algorithms.prompt_selection:GresoSelector", section="greso"),
})
GROUP_FILTERS = Registry("group_filter", {
    "none": Entry("fastrl.algorithms.group_filter:NoGroupFilter"),
    "dapo": Entry("fastrl.algorithms.group_filter:DynamicSamplingBuffer", section="dapo"),
})
PRUNERS = Registry("pruner", {
    "none": Entry("fastrl.algorithms.pruning:KeepAllPruner"),
    "mdap": Entry("fastrl.algorithms.pruning:MDAPPruner", section="mdap"),
    "cppo": Entry("fastrl.algorithms.pruning:CPPOPruner", section="cppo"),
    "random": Entry("fastrl.algorithms.pruning:RandomPruner", section="random"),
    "advantage_only": Entry("fastrl.algorithms.pruning:AdvantageOnlyPruner"),
})
# Both read cfg.algorithm.ars: the fixed n logs the statistics ARS would use, once per ARS period.
ROLLOUT_SCALERS = Registry("rollout_scaler", {
    "fixed": Entry("fastrl.algorithms.rollout_scale:fixed_rollout_scaler", section="ars"),
    "ars": Entry("fastrl.algorithms.rollout_scale:ars_rollout_scaler", section="ars"),
})
# One function per loss (verl's core_algos style); fastrl.algorithms.losses reads its
# POLICY_LOSS_KINDS from these names.
POLICY_LOSSES = Registry("policy_loss", {
    "ppo_clip": Entry("fastrl.algorithms.losses:ppo_clip_loss"),
    "gspo": Entry("fastrl.algorithms.losses:gspo_loss"),
    "gspo_token": Entry("fastrl.algorithms.losses:gspo_token_loss"),
})
ADVANTAGE_ESTIMATORS = Registry("advantage", {
    "grpo": Entry("fastrl.algorithms.advantages:grpo_advantages"),
    "drgrpo": Entry("fastrl.algorithms.advantages:drgrpo_advantages"),
})
