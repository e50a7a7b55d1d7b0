"""The built-in components' config sections: ``algorithm.<section>`` of the run config.

A component registered with a section (fastrl.algorithms.registry) declares the section's
dataclass, and is built from one typed instance of it. ``fastrl.config`` puts every registered
section under ``algorithm.<section>`` and calls each section's ``check()`` once the config is
read, before anything is built: ``check()`` raises ``ValueError`` with a message that starts with
the field's name (``"tau = 2 must lie in [0, 1]"``), which the config reports as the dotted key
(``algorithm.mdap.tau = 2 must lie in [0, 1]``). Checks that need what only the trainer knows
(ARS's n_floor against the initial n) stay with the component and run when it is built.

This module imports no torch: ``fastrl.config`` reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

MDAPRule = Literal["release", "greedy"]
MDAP_RULES: tuple[MDAPRule, ...] = ("release", "greedy")


def check_fraction(name: str, value: float) -> None:
    """``ValueError`` unless ``value`` is a finite number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} = {value!r} must lie in [0, 1]")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} = {value!r} is not one of {', '.join(choices)}")


@dataclass
class MDAPConfig:
    """``algorithm.mdap`` (pruner ``mdap``)."""

    tau: float = 0.8
    # release: keep a bucket member iff its Jaccard similarity to the bucket's seed is < 1 - tau
    # (the authors' released code); greedy: prune iff within tau of any kept member (our earlier reading).
    # Buckets are advantages rounded to 4 decimals for discrete and continuous rewards alike.
    rule: str = "release"

    def check(self) -> None:
        check_fraction("tau", self.tau)
        check_choice("rule", self.rule, MDAP_RULES)


@dataclass
class CPPOConfig:
    """``algorithm.cppo`` (pruner ``cppo``)."""

    prune_rate: float = 0.5
    # As released, CPPO computes old/ref log-probs on the full batch and prunes after; true prunes first.
    prune_first: bool = False

    def check(self) -> None:
        check_fraction("prune_rate", self.prune_rate)


@dataclass
class RandomPruneConfig:
    """``algorithm.random`` (pruner ``random``)."""

    prune_rate: float = 0.5

    def check(self) -> None:
        check_fraction("prune_rate", self.prune_rate)


@dataclass
class ARSConfig:
    """``algorithm.ars``: the released ARS rule (``rollout_scaler: ars``) and the ARS period.

    ``period_steps`` is also the period at which ``rollout_scaler: fixed`` reports the kept-count
    statistics ARS would use, so a table's budget sets one period for all its methods. The scalers
    check their values themselves, when built.
    """

    n_floor: int = 2  # n never goes below this
    period_steps: int = 0  # 0: one period per epoch over the training prompts


def check_int(name: str, value: int, minimum: int) -> None:
    """``ValueError`` unless ``value`` is an int >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} = {value!r} must be an integer >= {minimum}")


def check_in(name: str, value: float, low: float, high: float) -> None:
    """``ValueError`` unless ``value`` is a finite number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{name} = {value!r} must lie in [{low}, {high}]")


@dataclass
class RetentionARSConfig:
    """``algorithm.ars_retention``: this repository's earlier ARS reading (``rollout_scaler:
    ars_retention``). The defaults live here only; RetentionRolloutScaler adds the checks that
    need the initial n (``rollout.n``)."""

    n_min: int = 4
    n_max: int | None = None  # None: the initial n
    beta: float = 0.5
    headroom: int = 1
    rho_high: float = 0.9
    grow_step: int = 2
    period_steps: int = 0  # 0: one period per epoch over the training prompts
    per_prompt: bool = False

    def check(self) -> None:
        check_int("n_min", self.n_min, 2)
        if self.n_max is not None:
            check_int("n_max", self.n_max, 2)
            if self.n_min > self.n_max:
                raise ValueError(f"n_min = {self.n_min} > n_max = {self.n_max}")
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) or not math.isfinite(self.beta) \
                or self.beta < 0:
            raise ValueError(f"beta = {self.beta!r} must be a finite number >= 0")
        check_int("headroom", self.headroom, 0)
        if isinstance(self.rho_high, bool) or not isinstance(self.rho_high, (int, float)) or not 0 < self.rho_high <= 1:
            raise ValueError(f"rho_high = {self.rho_high!r} must lie in (0, 1]")
        check_int("grow_step", self.grow_step, 0)
        check_int("period_steps", self.period_steps, 0)


@dataclass
class GresoConfig:
    """``algorithm.greso`` (prompt selector ``greso``). The defaults live here only."""

    p_easy: float = 0.5
    p_hard: float = 0.5
    alpha: float = 0.25
    step_size: float = 0.01
    p_min: float = 0.05
    p_max: float = 0.95
    floor: float = 0.01

    def check(self) -> None:
        for name in ("p_min", "p_max", "alpha", "floor", "step_size"):
            check_in(name, getattr(self, name), 0.0, 1.0)
        if self.p_min > self.p_max:
            raise ValueError(f"p_min = {self.p_min} > p_max = {self.p_max}")
        check_in("p_easy", self.p_easy, self.p_min, self.p_max)
        check_in("p_hard", self.p_hard, self.p_min, self.p_max)


@dataclass
class DapoConfig:
    """``algorithm.dapo`` (group filter ``dapo``)."""

    max_tries: int = 20

    def check(self) -> None:
        if isinstance(self.max_tries, bool) or not isinstance(self.max_tries, int) or self.max_tries < 1:
            raise ValueError(f"max_tries = {self.max_tries!r} must be an integer >= 1")
