"""Component registries: a method is a choice of five components (DESIGN §2), plus the
advantage estimator.

=====================  ==========================================================
registry               names -> what is registered
=====================  ==========================================================
PROMPT_SELECTORS       all, greso -> classes (``select/record/end_step/state_dict``)
GROUP_FILTERS          none, dapo -> classes ``(target_groups, max_tries)``
PRUNERS                none, mdap, cppo, random, advantage_only -> pruner classes
ROLLOUT_SCALERS        fixed, ars -> classes (``n/n_for/observe/end_period``)
POLICY_LOSSES          ppo_clip, gspo, gspo_token -> ``policy_loss`` with ``kind`` bound
ADVANTAGE_ESTIMATORS   grpo, drgrpo -> ``(rewards, uids) -> advantages``
=====================  ==========================================================

Every pruner is built with its hyper-parameters and then called with ONE signature::

    pruner = build_pruner("mdap", tau=0.8, rule="release")
    result = pruner(advantages, uids, token_ids, align_to=d, generator=g)  # PruneResult
    result.kept                                                          # sorted LongTensor

New components are added with ``@register(PRUNERS, "name")``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Hashable, Protocol, Sequence, TypeVar

import torch
from torch import Tensor

from fastrl.algorithms import advantages as _adv
from fastrl.algorithms._common import check_fraction
from fastrl.algorithms import group_filter as _gf
from fastrl.algorithms import losses as _losses
from fastrl.algorithms import pruning as _pruning
from fastrl.algorithms import prompt_selection as _ps
from fastrl.algorithms import rollout_scale as _rs
from fastrl.algorithms.similarity import TokenIds

F = TypeVar("F", bound=Callable[..., Any])


class Registry(dict[str, Callable[..., Any]]):
    """A name -> component mapping that knows what it holds (for error messages)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind


PROMPT_SELECTORS = Registry("prompt_selector")
GROUP_FILTERS = Registry("group_filter")
PRUNERS = Registry("pruner")
ROLLOUT_SCALERS = Registry("rollout_scaler")
POLICY_LOSSES = Registry("policy_loss")
ADVANTAGE_ESTIMATORS = Registry("advantage")


def register(registry: Registry, name: str) -> Callable[[F], F]:
    """Decorator adding a component under ``name``; a name can be registered once."""

    def deco(obj: F) -> F:
        if name in registry:
            raise ValueError(f"{registry.kind} {name!r} is already registered ({registry[name]!r})")
        registry[name] = obj
        return obj

    return deco


def get(registry: Registry, name: str) -> Callable[..., Any]:
    """The component ``name``; a ``ValueError`` listing the valid names if there is none."""
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {registry.kind} {name!r}; valid: {', '.join(sorted(registry))}") from None


class Pruner(Protocol):
    """What the trainer calls after advantages are known."""

    def __call__(self, advantages: Tensor, uids: Sequence[Hashable], token_ids: TokenIds, *,
                 align_to: int, generator: torch.Generator | None) -> _pruning.PruneResult: ...


def build_pruner(name: str, **hparams: Any) -> Pruner:
    """Construct pruner ``name`` with its hyper-parameters (unknown ones are a ValueError)."""
    cls = get(PRUNERS, name)
    accepted = [p for p in inspect.signature(cls).parameters]
    unknown = sorted(set(hparams) - set(accepted))
    if unknown:
        raise ValueError(f"pruner {name!r} takes {accepted or 'no hyper-parameters'}; unknown: {unknown}")
    return cls(**hparams)


@register(PRUNERS, "none")
class KeepAllPruner:
    """Keeps every response."""

    def __call__(self, advantages: Tensor, uids: Sequence[Hashable], token_ids: TokenIds, *,
                 align_to: int = 1, generator: torch.Generator | None = None) -> _pruning.PruneResult:
        return _pruning.keep_all_prune(advantages, uids)

    def __repr__(self) -> str:
        return "KeepAllPruner()"


@register(PRUNERS, "mdap")
class MDAPPruner:
    """MDAP (:func:`fastrl.algorithms.pruning.mdap_prune`), released rule or greedy variant."""

    def __init__(self, tau: float = 0.8, rule: str = "release") -> None:
        check_fraction(tau, "tau", "MDAPPruner")
        if rule not in _pruning.MDAP_RULES:
            raise ValueError(f"MDAPPruner: rule = {rule!r} is not one of {', '.join(_pruning.MDAP_RULES)}")
        self.tau, self.rule = tau, rule

    def __call__(self, advantages: Tensor, uids: Sequence[Hashable], token_ids: TokenIds, *,
                 align_to: int = 1, generator: torch.Generator | None = None) -> _pruning.PruneResult:
        return _pruning.mdap_prune(advantages, uids, token_ids, tau=self.tau, align_to=align_to, rule=self.rule)

    def __repr__(self) -> str:
        return f"MDAPPruner(tau={self.tau}, rule={self.rule!r})"


@register(PRUNERS, "cppo")
class CPPOPruner:
    """CPPO top-k by |A| (:func:`fastrl.algorithms.pruning.cppo_prune`)."""

    def __init__(self, prune_rate: float = 0.5) -> None:
        check_fraction(prune_rate, "prune_rate", "CPPOPruner")
        self.prune_rate = prune_rate

    def __call__(self, advantages: Tensor, uids: Sequence[Hashable], token_ids: TokenIds, *,
                 align_to: int = 1, generator: torch.Generator | None = None) -> _pruning.PruneResult:
        return _pruning.cppo_prune(advantages, uids, prune_rate=self.prune_rate, dp_multiple=align_to)

    def __repr__(self) -> str:
        return f"CPPOPruner(prune_rate={self.prune_rate})"


@register(PRUNERS, "random")
class RandomPruner:
    """Random pruning (:func:`fastrl.algorithms.pruning.random_prune`); uses ``generator``."""

    def __init__(self, prune_rate: float = 0.5) -> None:
        check_fraction(prune_rate, "prune_rate", "RandomPruner")
        self.prune_rate = prune_rate

    def __call__(self, advantages: Tensor, uids: Sequence[Hashable], token_ids: TokenIds, *,
                 align_to: int = 1, generator: torch.Generator | None = None) -> _pruning.PruneResult:
        return _pruning.random_prune(advantages, uids, prune_rate=self.prune_rate, align_to=align_to,
                                     generator=generator)

    def __repr__(self) -> str:
        return f"RandomPruner(prune_rate={self.prune_rate})"


@register(PRUNERS, "advantage_only")
class AdvantageOnlyPruner:
    """The seed of every advantage bucket (:func:`fastrl.algorithms.pruning.advantage_only_prune`)."""

    def __call__(self, advantages: Tensor, uids: Sequence[Hashable], token_ids: TokenIds, *,
                 align_to: int = 1, generator: torch.Generator | None = None) -> _pruning.PruneResult:
        return _pruning.advantage_only_prune(advantages, uids, align_to=align_to)

    def __repr__(self) -> str:
        return "AdvantageOnlyPruner()"


register(PROMPT_SELECTORS, "all")(_ps.AllPromptsSelector)
register(PROMPT_SELECTORS, "greso")(_ps.GresoSelector)
register(GROUP_FILTERS, "none")(_gf.NoGroupFilter)
register(GROUP_FILTERS, "dapo")(_gf.DynamicSamplingBuffer)
register(ROLLOUT_SCALERS, "fixed")(_rs.FixedRolloutScaler)
register(ROLLOUT_SCALERS, "ars")(_rs.AdaptiveRolloutScaler)
for _kind in _losses.POLICY_LOSS_KINDS:
    register(POLICY_LOSSES, _kind)(functools.partial(_losses.policy_loss, kind=_kind))
register(ADVANTAGE_ESTIMATORS, "grpo")(_adv.grpo_advantages)
register(ADVANTAGE_ESTIMATORS, "drgrpo")(_adv.drgrpo_advantages)
