"""Component registries: a method is a choice of components (docs/algorithms.md, "Adding a component").

=====================  ==============================  =====================================
registry               names                           holds
=====================  ==============================  =====================================
PROMPT_SELECTORS       all, greso                      factories -> :class:`PromptSelector`
GROUP_FILTERS          none, dapo                      factories -> :class:`GroupFilter`
PRUNERS                none, mdap, cppo, random,       factories -> :class:`Pruner`
                       advantage_only
ROLLOUT_SCALERS        fixed, ars, ars_retention       factories -> :class:`RolloutScaler`
POLICY_LOSSES          ppo_clip, gspo, gspo_token      :class:`PolicyLoss` functions
ADVANTAGE_ESTIMATORS   grpo, drgrpo                    :class:`AdvantageEstimator` functions
=====================  ==============================  =====================================

A component may declare a config section: a name and a dataclass (fastrl.algorithms.sections for
the built-in ones). ``fastrl.config`` accepts every registered section as ``algorithm.<section>``,
typed by its dataclass and checked by its ``check()``; the component's factory is then called
with that one typed instance, plus what the trainer adds (``context``)::

    pruner = build(PRUNERS, "mdap", cfg.algorithm)              # MDAPPruner(MDAPConfig(tau=..., rule=...))
    result = pruner(batch, align_to=d, generator=g)             # batch: a PruneBatch; -> PruneResult
    scaler = build(ROLLOUT_SCALERS, "ars", cfg.algorithm, n_init=cfg.rollout.n)

This module imports no torch (``fastrl.config`` reads the names and sections from it): the
built-in entries name their factory as ``"module:attribute"``, imported on first use. Plug-ins
register the object itself, from a module that ``fastrl train --import MODULE`` (or the config's
``imports: [MODULE]``) imports before the config is read::

    @register(PRUNERS, "keep_positive")                               # no section: built from the context
    class KeepPositive: ...

    @register(PRUNERS, "keep_top", section="keep_top", config=KeepTopConfig)  # algorithm.keep_top.*
    class KeepTop:
        def __init__(self, config: KeepTopConfig) -> None: ...
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fastrl.algorithms import sections as S

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from fastrl.algorithms.pruning import PruneBatch, PruneResult

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
    """One step's group accumulator (DAPO): the trainer rolls out again until it is ``full``. A
    fresh one is built each step, so it holds no state to checkpoint."""

    @property
    def full(self) -> bool: ...

    def add(self, accuracies: Tensor | Sequence[float], uids: Sequence[Hashable],
            payloads: Mapping[Hashable, Any] | None = None) -> dict[Hashable, bool]: ...

    def take(self) -> list[tuple[Hashable, Any]]: ...

    def metrics(self) -> dict[str, float]: ...


class Pruner(Protocol):
    """Keeps a subset of the step's responses once advantages are known. A pruner that carries
    something from step to step also has ``state_dict()`` / ``load_state_dict(state)`` (as
    :class:`RolloutScaler`), which the trainer's checkpoint saves and a resume restores."""

    @property
    def prune_first(self) -> bool:
        """True: prune before the old/ref log-prob passes; False: those passes run on the full
        batch and pruning comes after (CPPO as released)."""
        ...

    def __call__(self, batch: PruneBatch, *, align_to: int, generator: torch.Generator | None) -> PruneResult:
        """``batch``: the step's responses (advantages, uids, question ids, response token ids,
        rewards, and every further per-response column the trainer's batch holds)."""
        ...

    def metrics(self) -> dict[str, float]:
        """What this pruner logs about its last call, under its own keys (``keep_top/threshold``),
        beside the kept counts every pruner's :class:`PruneResult` gives; ``{}`` for nothing."""
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
    """``(logp, old_logp, advantages, mask, settings) -> (loss, metrics)`` (losses.ppo_clip_loss, ...);
    ``settings`` is a :class:`fastrl.algorithms.losses.ClipSettings`."""

    def __call__(self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor,
                 settings: Any) -> tuple[Tensor, dict[str, Tensor]]: ...


class AdvantageEstimator(Protocol):
    """``(rewards [N], uids) -> advantages [N]`` over ragged uid groups."""

    def __call__(self, rewards: Tensor | Sequence[float], uids: Sequence[Hashable]) -> Tensor: ...


# ---------------------------------------------------------------------- the tables
@dataclasses.dataclass(frozen=True)
class Entry:
    """A registered component: its factory (or function) and, if it has one, its config section:
    the name under ``algorithm.`` and the dataclass it is typed by (None: built from the context
    alone). A factory with a section is called ``factory(section_instance, **context)``.

    ``target`` is the object, or ``"module:attribute"`` imported on first use. ``check``, if
    given, is called with the whole run config when it is read and this entry is chosen (what the
    section alone cannot check, e.g. a model source's ``model.path``); it raises ``ValueError``
    with the whole message, dotted keys included."""

    target: Callable[..., Any] | str
    section: str | None = None
    config: type | None = None
    check: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if (self.section is None) != (self.config is None) or (self.config is not None
                                                               and not dataclasses.is_dataclass(self.config)):
            raise ValueError(f"component {self.target!r}: a config section needs both a name and a dataclass "
                             f"(section={self.section!r}, config={self.config!r})")

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
        # The config section this registry's entries put their own sections under (algorithm,
        # rollout, model, data), set by SectionGroup; None: its entries have no sections.
        self.group: SectionGroup | None = None

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


def register(registry: Registry, name: str, *, section: str | None = None, config: type | None = None,
             check: Callable[[Any], None] | None = None) -> Callable[[F], F]:
    """Decorator adding an entry under ``name`` (once), built from ``<group>.<section>``
    (``algorithm.<section>`` for a component, ``rollout.<section>`` for an engine, ...), an
    instance of the dataclass ``config``; ``check`` as :class:`Entry`'s."""

    def deco(obj: F) -> F:
        if name in registry:
            raise ValueError(f"{registry.kind} {name!r} is already registered ({registry.entry(name).target!r})")
        entry = Entry(obj, section, config, check)
        if section is not None and registry.group is not None:  # a registry outside the config: bind() alone
            registry.group.check_new(section, config)
        registry[name] = entry
        return obj

    return deco


@dataclasses.dataclass
class SectionGroup:
    """A config section whose subsections are the ones its registries' entries declare:
    ``algorithm.<section>`` (components), ``rollout.<engine>``, ``model.<source>``,
    ``data.<task>``. ``reserved`` are the group's own keys (its base dataclass's fields), which
    no section may take; ``tables`` fill in as the registries are created, in config.yaml's order."""

    key: str
    reserved: tuple[str, ...]
    tables: tuple[Registry, ...]

    def __post_init__(self) -> None:
        for table in self.tables:
            table.group = self

    def sections(self) -> dict[str, type]:
        """Every registered section, name -> dataclass, in registration order (built-ins first)."""
        out: dict[str, type] = {}
        for table in self.tables:
            for entry in table._entries.values():
                if entry.section is not None and entry.config is not None:
                    out.setdefault(entry.section, entry.config)
        return out

    def check_new(self, name: str, config: type | None) -> None:
        """One dataclass per section name; the names of the group's own keys are taken."""
        if name in self.reserved or not name.isidentifier():
            raise ValueError(f"config section {name!r} is not available: it must be a Python identifier other "
                             f"than the keys of {self.key} ({', '.join(self.reserved)})")
        known = self.sections()
        if name in known and known[name] is not config:
            raise ValueError(f"config section {name!r} is already typed by {known[name].__module__}."
                             f"{known[name].__qualname__}; give the new entry another section name")

    def used(self, choices: Sequence[tuple[Registry, str]]) -> set[str]:
        """The sections read by the chosen entries, ``(registry, name)`` each (unknown names: none)."""
        return {r.entry(n).section for r, n in choices if n in r and r.entry(n).section}  # type: ignore[misc]


def sections() -> dict[str, type]:
    """Every registered component section (``algorithm.<section>``), name -> dataclass: the built-in
    ones in the order a run's config.yaml lists them (pruners, rollout scalers, prompt selectors,
    group filters), plug-ins after."""
    return ALGORITHM.sections()


def get(registry: Registry, name: str) -> Callable[..., Any]:
    """The component (or factory) ``name``; a ``ValueError`` listing the valid names if there is none."""
    registry.entry(name)
    return registry[name]


def bind(registry: Registry, name: str, algorithm: object) -> Callable[..., Any]:
    """The factory ``name`` with its own typed section of ``algorithm`` (``cfg.algorithm``)
    bound as the first argument: call it with the context."""
    entry = registry.entry(name)
    factory = registry[name]
    if entry.section is None:
        return factory
    section = getattr(algorithm, entry.section)
    if not isinstance(section, entry.config):  # type: ignore[arg-type]
        raise TypeError(f"algorithm.{entry.section} is a {type(section).__name__}, not the "
                        f"{entry.config.__name__} that {registry.kind} {name!r} is built from")  # type: ignore[union-attr]
    return functools.partial(factory, section)


def build(registry: Registry, name: str, algorithm: object, **context: Any) -> Any:
    """Component ``name`` built from its section of ``algorithm`` (``cfg.algorithm``) and ``context``."""
    return bind(registry, name, algorithm)(**context)


# The keys of cfg.algorithm that are not component sections (fastrl.config.AlgorithmConfig's fields).
ALGORITHM_KEYS: tuple[str, ...] = (
    "advantage", "prompt_selector", "group_filter", "pruner", "rollout_scaler", "policy_loss", "clip_low",
    "clip_high", "dual_clip", "loss_agg", "loss_norm_constant", "kl_coef", "kl_kind",
)

PROMPT_SELECTORS = Registry("prompt_selector", {
    "all": Entry("fastrl.algorithms.prompt_selection:AllPromptsSelector"),
    "greso": Entry("fastrl.algorithms.prompt_selection:GresoSelector.from_config", "greso", S.GresoConfig),
})
GROUP_FILTERS = Registry("group_filter", {
    "none": Entry("fastrl.algorithms.group_filter:NoGroupFilter"),
    "dapo": Entry("fastrl.algorithms.group_filter:DynamicSamplingBuffer.from_config", "dapo", S.DapoConfig),
})
PRUNERS = Registry("pruner", {
    "none": Entry("fastrl.algorithms.pruning:KeepAllPruner"),
    "mdap": Entry("fastrl.algorithms.pruning:MDAPPruner", "mdap", S.MDAPConfig),
    "cppo": Entry("fastrl.algorithms.pruning:CPPOPruner", "cppo", S.CPPOConfig),
    "random": Entry("fastrl.algorithms.pruning:RandomPruner", "random", S.RandomPruneConfig),
    "advantage_only": Entry("fastrl.algorithms.pruning:AdvantageOnlyPruner"),
})
# The fixed n reads algorithm.ars for its period only: it logs the statistics ARS would use, once
# per ARS period.
ROLLOUT_SCALERS = Registry("rollout_scaler", {
    "fixed": Entry("fastrl.algorithms.rollout_scale:FixedRolloutScaler.from_config", "ars", S.ARSConfig),
    "ars": Entry("fastrl.algorithms.rollout_scale:ReleaseRolloutScaler.from_config", "ars", S.ARSConfig),
    "ars_retention": Entry("fastrl.algorithms.rollout_scale:RetentionRolloutScaler.from_config", "ars_retention",
                           S.RetentionARSConfig),
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
# The registries whose components may have a config section, in config.yaml's order of sections.
COMPONENT_REGISTRIES: tuple[Registry, ...] = (PRUNERS, ROLLOUT_SCALERS, PROMPT_SELECTORS, GROUP_FILTERS)
# algorithm.<section>: the sections of those registries' components.
ALGORITHM = SectionGroup("algorithm", ALGORITHM_KEYS, COMPONENT_REGISTRIES)
