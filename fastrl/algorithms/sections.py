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
# The rule each ARS scaler implements (algorithm.ars.rule records it in a run's config.yaml).
ARS_RULES: dict[str, str] = {"ars": "release", "ars_retention": "retention"}


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
    """``algorithm.ars``: the one section of the three rollout scalers (``fixed``, ``ars``,
    ``ars_retention``), so that a run's config.yaml keeps the keys it had when ``ars`` chose its
    rule from ``rule``. Each scaler reads only its own fields (``from_config``):

    - all three: ``period_steps`` (fixed n reports the statistics ARS would use once per period);
    - ``ars`` (the released rule): ``n_floor``;
    - ``ars_retention`` (this repository's earlier reading): ``n_min``, ``n_max``, ``beta``,
      ``headroom``, ``rho_high``, ``grow_step``, ``per_prompt``.

    ``rule`` names the rule of the scaler chosen (release: ``ars``, retention: ``ars_retention``);
    the scaler checks that it agrees. The scalers check their values themselves, when built.
    """

    rule: str = "release"
    n_floor: int = 2  # release: n never goes below this
    n_min: int = 4
    n_max: int | None = None  # None: the initial n
    beta: float = 0.5
    headroom: int = 1
    rho_high: float = 0.9
    grow_step: int = 2
    period_steps: int = 0  # 0: one period per epoch over the training prompts
    per_prompt: bool = False

    def check(self) -> None:
        check_choice("rule", self.rule, tuple(ARS_RULES.values()))

    def check_rule(self, scaler: str) -> None:
        """The ``rule`` recorded for the chosen scaler ``scaler`` (``ars`` or ``ars_retention``)."""
        want = ARS_RULES[scaler]
        if self.rule != want:
            other = next(name for name, rule in ARS_RULES.items() if rule == self.rule)
            raise ValueError(f"rule = {self.rule!r} is the rule of rollout_scaler {other}, but rollout_scaler is "
                             f"{scaler}; set algorithm.rollout_scaler={other}, or algorithm.ars.rule={want}")


@dataclass
class GresoConfig:
    """``algorithm.greso`` (prompt selector ``greso``; GresoSelector checks the values)."""

    p_easy: float = 0.5
    p_hard: float = 0.5
    alpha: float = 0.25
    step_size: float = 0.01
    p_min: float = 0.05
    p_max: float = 0.95
    floor: float = 0.01


@dataclass
class DapoConfig:
    """``algorithm.dapo`` (group filter ``dapo``)."""

    max_tries: int = 20

    def check(self) -> None:
        if isinstance(self.max_tries, bool) or not isinstance(self.max_tries, int) or self.max_tries < 1:
            raise ValueError(f"max_tries = {self.max_tries!r} must be an integer >= 1")
