"""Rollouts-per-prompt policies: ARS (Adaptive Rollout Sampling) and the fixed-n baseline.

One class per rule, each registered under its own name (fastrl.algorithms.registry.ROLLOUT_SCALERS)
and built from its section by its ``from_config``: :class:`ReleaseRolloutScaler` (``ars``, from
``algorithm.ars``), :class:`RetentionRolloutScaler` (``ars_retention``, from
``algorithm.ars_retention``) and :class:`FixedRolloutScaler` (``fixed``, ``algorithm.ars``'s period). They share only the period bookkeeping (:class:`Period`,
:class:`_PeriodicScaler`).

**release** (``ars``; the authors' released code, docs/algorithms.md). After each pruned step the
scaler receives the per-question final counts c_q (MDAP's kept plus the alignment refill) and
buffers f1 = mean_q c_q and f2 = max_q c_q. At each period boundary (an epoch, or
``ars.period_steps`` steps), with a = steps done / total steps:
f3 = a * mean(f1) + (1 - a) * mean(f2) over the finished period; after the first period also
g1 = (mean(f1) + mean(f2)) / 2, set once. Then n = max(round(min(n0 - (g1 - f3), n0)), 2)
(round half to even) if f3 < g1, else n = n0. A period without observations changes nothing.
A step's statistics belong to the period in which it ran: the release appends the boundary
step's f1/f2 before it detects the epoch change, so its first step of epoch e is counted in
epoch e - 1; we do not copy that slip.

**retention** (``ars_retention``, this repository's earlier reading). Over a period the scaler collects the kept
count k_q of each question. At the period's end, with k̄ = mean k_q, k_max = max k_q, retention
ρ = k̄ / n: if ρ >= ρ_high (0.9) grow, n_next = min(n + Δ, n_max), Δ = 2; else
n_next = clip(⌈k̄ + β (k_max − k̄)⌉ + h, n_min, n_max), β = 0.5, headroom h = 1. n_max defaults to
the initial n, n_min to 4. Per-prompt mode (off by default) applies it to each prompt's counts.

**fixed** (every baseline): n never changes; each period reports the kept-count statistics the
retention rule reads (k̄, k_max, ρ), so a baseline's log shows what ARS would have seen.

Each decision and its inputs are kept in ``last_decision``. The trainer calls only
``end_step(final_counts, step=, epoch=, progress=)`` after every step: the scaler observes the
counts and itself ends a period every ``period_steps`` steps, or (``period_steps`` = 0) at the
first step that finds a later epoch; ``metrics()`` is that period's decision as ``ars/<key>``,
and empty after a step that ended no period.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence

from fastrl import metric_keys as K
from fastrl.algorithms._common import check_positive_int
from fastrl.algorithms.sections import ARSConfig, RetentionARSConfig

KeptCounts = Mapping[Hashable, int] | Sequence[int]


def kept_statistics(kept: Sequence[int], n: int, n_obs: Sequence[int] | None = None) -> dict[str, float]:
    """A period's kept counts summarised: k_mean, k_max, rho = mean(kept) / mean(n_obs) (k̄ / n
    when n did not vary; NaN for an empty period), with n_prev = n_next = n and grew = 0."""
    if not kept:
        k_mean = k_max = rho = math.nan
    else:
        k_mean = sum(kept) / len(kept)
        k_max = float(max(kept))
        rho = k_mean / (sum(n_obs) / len(n_obs) if n_obs else float(n))
    return {"k_mean": k_mean, "k_max": k_max, "rho": rho, "n_prev": float(n), "n_next": float(n), "grew": 0.0,
            "num_observations": float(len(kept))}


def ars_next_n(
    kept: Sequence[int],
    n: int,
    *,
    n_min: int,
    n_max: int,
    beta: float,
    headroom: int,
    rho_high: float,
    grow_step: int,
    n_obs: Sequence[int] | None = None,
) -> tuple[int, dict[str, float]]:
    """One retention-ARS decision from a period's kept counts.

    Args:
        kept: kept count of each observed question in the period (may be empty).
        n: the current rollouts per prompt.
        n_obs: the n each count was observed under (default: all ``n``); see :func:`kept_statistics`.
        n_min, n_max, beta, headroom, rho_high, grow_step: see the module docstring.

    Returns:
        ``(n_next, decision)``; decision is :func:`kept_statistics` with n_next and grew (0/1)
        (an empty period keeps n).
    """
    decision = kept_statistics(kept, n, n_obs)
    if not kept:
        return n, decision
    k_mean, k_max = decision["k_mean"], decision["k_max"]
    grew = decision["rho"] >= rho_high
    if grew:
        n_next = min(n + grow_step, n_max)
    else:
        # -1e-9: k̄ + β (k_max - k̄) that is an integer up to rounding must not ceil one higher.
        n_next = math.ceil(k_mean + beta * (k_max - k_mean) - 1e-9) + headroom
    n_next = max(n_min, min(n_max, n_next))
    decision.update({"n_next": float(n_next), "grew": float(grew)})
    return n_next, decision


def _as_count(k: Any, where: str, label: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, float)) or int(k) != k or k < 0:
        raise ValueError(f"{where}: kept count {label} = {k!r} must be a non-negative integer")
    return int(k)


@dataclass
class Period:
    """The open ARS period: it began after step ``start_step``, in epoch ``start_epoch``, and
    ends ``steps`` steps later, or (``steps`` = 0) at the first step that finds a later epoch."""

    steps: int = 0
    start_step: int = 0
    start_epoch: int = 0

    def ends_at(self, step: int, epoch: int) -> bool:
        """Whether the period ends with step ``step`` (steps done), the trainer now in ``epoch``."""
        if self.steps > 0:
            return step - self.start_step >= self.steps
        return epoch > self.start_epoch

    def restart(self, step: int, epoch: int) -> None:
        self.start_step, self.start_epoch = step, epoch

    def state_dict(self) -> dict[str, int]:
        return {"start_step": self.start_step, "start_epoch": self.start_epoch}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.restart(int(state["start_step"]), int(state["start_epoch"]))


class _PeriodicScaler:
    """What the three scalers share: the period and the step protocol. Use: ``n = scaler.n`` (or
    ``scaler.n_for(uid)``) for the rollout; after each step ``scaler.end_step({uid: final_count},
    step=, epoch=, progress=)``, which observes the counts and ends the period when it is due (or,
    by hand: ``observe`` and ``end_period(progress)`` with progress = steps done / total steps)."""

    rule = ""

    def __init__(self, period_steps: int, n_init: int) -> None:
        where = type(self).__name__
        check_positive_int(n_init, "n_init", where, minimum=2)
        check_positive_int(period_steps, "period_steps", where, minimum=0)
        self.period = Period(period_steps)
        self.last_decision: dict[str, float] = {}
        self._ended_period = False

    def n_for(self, uid: Hashable) -> int:
        return self.n  # type: ignore[attr-defined, no-any-return]

    def end_step(self, final_counts: KeptCounts, *, step: int, epoch: int, progress: float) -> None:
        """A finished step (``step`` steps done, the trainer now in ``epoch``): observe its final
        per-question counts, then close the period if it ends with this step."""
        self.observe(final_counts)  # type: ignore[attr-defined]
        self._ended_period = self.period.ends_at(step, epoch)
        if self._ended_period:
            self.end_period(progress)  # type: ignore[attr-defined]
            self.period.restart(step, epoch)

    def metrics(self) -> dict[str, float]:
        """``ars/<key>`` of the decision taken at the last ``end_step``; empty if it ended no period."""
        if not self._ended_period:
            return {}
        return {K.ars_key(k): float(v) for k, v in self.last_decision.items()}


def _counts_of(kept_counts: KeptCounts, where: str) -> list[tuple[Hashable | None, int]]:
    if isinstance(kept_counts, Mapping):
        items: list[tuple[Hashable | None, Any]] = list(kept_counts.items())
    else:
        items = [(None, k) for k in kept_counts]
    return [(uid, _as_count(k, where, f"[{uid!r}]" if uid is not None else f"#{j}"))
            for j, (uid, k) in enumerate(items)]


def release_n(f3: float | None, g1: float | None, n_init: int, n_floor: int = 2) -> int:
    """The released ARS decision: n0 - (g1 - f3), rounded half to even, in [n_floor, n0], while f3 < g1."""
    if f3 is None or g1 is None or not f3 < g1:
        return n_init
    return max(round(min(n_init - (g1 - f3), n_init)), n_floor)


class ReleaseRolloutScaler(_PeriodicScaler):
    """ARS as released (``ars``; module docstring): f1/f2 per step, f3 and g1 per period, n from f3 < g1."""

    rule = "release"

    def __init__(self, n_init: int = 8, n_floor: int = 2, period_steps: int = 0) -> None:
        where = "ReleaseRolloutScaler"
        super().__init__(period_steps, n_init)
        check_positive_int(n_floor, "n_floor", where, minimum=2)
        if n_floor > n_init:
            raise ValueError(f"{where}: n_floor = {n_floor} > n_init = {n_init}")
        self.n_init, self.n_floor = n_init, n_floor
        self._n = n_init
        self._f1: list[float] = []
        self._f2: list[float] = []
        self.f3: float | None = None
        self.g1: float | None = None
        self.periods = 0

    @classmethod
    def from_config(cls, config: ARSConfig, *, n_init: int) -> "ReleaseRolloutScaler":
        """``rollout_scaler: ars`` from ``algorithm.ars`` (period_steps, n_floor) and ``rollout.n``."""
        return cls(n_init, n_floor=config.n_floor, period_steps=config.period_steps)

    @property
    def n(self) -> int:
        return self._n

    def observe(self, kept_counts: KeptCounts) -> None:
        """One pruned step: per-question final counts -> buffers f1 = mean, f2 = max (empty: ignored)."""
        counts = [k for _, k in _counts_of(kept_counts, f"{type(self).__name__}.observe")]
        if counts:
            self._f1.append(sum(counts) / len(counts))
            self._f2.append(float(max(counts)))

    def end_period(self, progress: float | None = None) -> int:
        """Close the period: update f3 (and g1 after the first period), return n for the next steps."""
        where = f"{type(self).__name__}.end_period"
        if progress is None or isinstance(progress, bool) or not 0.0 <= float(progress) <= 1.0:
            raise ValueError(f"{where}: progress = {progress!r} must be steps done / total steps, in [0, 1]")
        decision: dict[str, float] = {"progress": float(progress), "num_observations": float(len(self._f1)),
                                      "n_prev": float(self._n)}
        if self._f1:
            f1, f2 = sum(self._f1) / len(self._f1), sum(self._f2) / len(self._f2)
            a = float(progress)
            self.f3 = a * f1 + (1.0 - a) * f2
            if self.g1 is None:
                self.g1 = (f1 + f2) / 2.0
            decision.update({"f1": f1, "f2": f2})
        self._f1, self._f2 = [], []
        self.periods += 1
        self._n = release_n(self.f3, self.g1, self.n_init, self.n_floor)
        decision.update({k: v for k, v in (("f3", self.f3), ("g1", self.g1)) if v is not None})
        decision["n_next"] = float(self._n)
        self.last_decision = decision
        return self._n

    def state_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "n": self._n, "f1": list(self._f1), "f2": list(self._f2), "f3": self.f3,
                "g1": self.g1, "periods": self.periods, "last_decision": dict(self.last_decision),
                "period_start": self.period.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [k for k in ("n", "f1", "f2", "f3", "g1", "periods", "period_start") if k not in state]
        if missing or state.get("rule", self.rule) != self.rule:
            raise ValueError(f"{type(self).__name__}.load_state_dict: not a release-ARS state "
                             f"(missing {missing}, rule {state.get('rule')!r})")
        self._n = int(state["n"])
        self._f1, self._f2 = [float(x) for x in state["f1"]], [float(x) for x in state["f2"]]
        self.f3 = None if state["f3"] is None else float(state["f3"])
        self.g1 = None if state["g1"] is None else float(state["g1"])
        self.periods = int(state["periods"])
        self.last_decision = dict(state.get("last_decision", {}))
        self.period.load_state_dict(state["period_start"])


class RetentionRolloutScaler(_PeriodicScaler):
    """ARS, retention variant (``ars_retention``; module docstring): this repository's earlier reading."""

    rule = "retention"

    def __init__(self, n_init: int = 8, config: RetentionARSConfig | None = None, **fields: Any) -> None:
        """From ``config`` (None: ``RetentionARSConfig()``'s defaults) with ``fields`` replaced,
        e.g. ``RetentionRolloutScaler(n_init=8, n_min=2)``; ``n_init`` is ``rollout.n``."""
        where = "RetentionRolloutScaler"
        config = dataclasses.replace(config if config is not None else RetentionARSConfig(), **fields)
        super().__init__(config.period_steps, n_init)
        try:
            config.check()
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        n_min, beta, headroom, rho_high, grow_step = config.n_min, config.beta, config.headroom, config.rho_high, \
            config.grow_step
        n_max = n_init if config.n_max is None else config.n_max
        if n_min > n_max:
            raise ValueError(f"{where}: n_min = {n_min} > n_max = {n_max}")
        if not n_min <= n_init <= n_max:
            raise ValueError(f"{where}: n_init = {n_init} must lie in [n_min, n_max] = [{n_min}, {n_max}]")
        self.config = config
        self.n_init, self.n_min, self.n_max = n_init, n_min, n_max
        self.beta, self.headroom, self.rho_high, self.grow_step = float(beta), headroom, float(rho_high), grow_step
        self.per_prompt = bool(config.per_prompt)
        self._n = n_init
        self._observations: list[tuple[Hashable | None, int, int]] = []  # (uid, kept, n it was observed under)
        self._prompt_n: dict[Hashable, int] = {}

    @classmethod
    def from_config(cls, config: RetentionARSConfig, *, n_init: int) -> "RetentionRolloutScaler":
        """``rollout_scaler: ars_retention`` from ``algorithm.ars_retention`` and ``rollout.n``."""
        return cls(n_init, config)

    @property
    def n(self) -> int:
        """The global rollouts per prompt (per-prompt mode: the n of prompts with no history)."""
        return self._n

    def n_for(self, uid: Hashable) -> int:
        """Rollouts for prompt ``uid``: its own n in per-prompt mode once it has history, else ``n``."""
        if self.per_prompt:
            return self._prompt_n.get(uid, self._n)
        return self._n

    def _rule(self, kept: Sequence[int], n: int, n_obs: Sequence[int] | None) -> tuple[int, dict[str, float]]:
        return ars_next_n(kept, n, n_min=self.n_min, n_max=self.n_max, beta=self.beta,
                          headroom=self.headroom, rho_high=self.rho_high, grow_step=self.grow_step,
                          n_obs=n_obs)

    def observe(self, kept_counts: KeptCounts) -> None:
        """Record one step's kept counts: ``{uid: kept}`` or a sequence of ints (global mode only).

        Each count must be a non-negative integer; a count above the prompt's n (a uid drawn
        twice in one step) is clipped to n.
        """
        self._observations.extend(_clipped_observations(kept_counts, self.n_for, self._n,
                                                        f"{type(self).__name__}.observe", mapping_only=self.per_prompt))

    def end_period(self, progress: float | None = None) -> int:
        """Close the period: apply the rule (global, and per prompt in per-prompt mode); returns ``n``.

        ``progress`` is accepted for the common interface and not used by this rule."""
        kept = [k for _, k, _ in self._observations]
        n_obs = [nq for _, _, nq in self._observations]
        self._n, self.last_decision = self._rule(kept, self._n, n_obs)
        if self.per_prompt:
            by_uid: dict[Hashable, list[tuple[int, int]]] = {}
            for uid, k, nq in self._observations:
                by_uid.setdefault(uid, []).append((k, nq))
            changed = 0
            for uid, obs in by_uid.items():
                n_prev = obs[-1][1]
                n_next, _ = self._rule([k for k, _ in obs], n_prev, [nq for _, nq in obs])
                changed += n_next != n_prev
                self._prompt_n[uid] = n_next
            self.last_decision["per_prompt_changed"] = float(changed)
            self.last_decision["per_prompt_tracked"] = float(len(self._prompt_n))
        self._observations = []
        return self._n

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: current n, the open period (its counts and its start),
        per-prompt n, last decision."""
        return {
            "n": self._n,
            "period": [list(r) for r in self._observations],
            "period_start": self.period.state_dict(),
            "prompt_n": [[u, v] for u, v in self._prompt_n.items()],
            "last_decision": dict(self.last_decision),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (hyper-parameters come from the constructor)."""
        missing = [k for k in ("n", "period", "period_start", "prompt_n", "last_decision") if k not in state]
        if missing:
            raise ValueError(f"{type(self).__name__}.load_state_dict: missing keys {missing}")
        self._n = int(state["n"])
        self._observations = [(u, int(k), int(nq)) for u, k, nq in state["period"]]
        self.period.load_state_dict(state["period_start"])
        self._prompt_n = {u: int(v) for u, v in state["prompt_n"]}
        self.last_decision = dict(state["last_decision"])


def _clipped_observations(kept_counts: KeptCounts, n_for: Callable[[Hashable], int], n: int, where: str, *,
                          mapping_only: bool = False) -> list[tuple[Hashable | None, int, int]]:
    """(uid, kept, n it was observed under) per question (``n_for(uid)``; ``n`` for counts given
    as a sequence); a count above its n is clipped to n."""
    if not isinstance(kept_counts, Mapping) and mapping_only:
        raise ValueError(f"{where}: per-prompt mode needs a mapping uid -> kept count, got "
                         f"{type(kept_counts).__name__}")
    rows = []
    for uid, k in _counts_of(kept_counts, where):
        n_q = n_for(uid) if uid is not None else n
        # A prompt drawn twice in one step (e.g. a DAPO refill across an epoch boundary) can
        # keep more than n responses under one uid; count it as full retention, not an error.
        rows.append((uid, min(k, n_q), n_q))
    return rows


class FixedRolloutScaler(_PeriodicScaler):
    """Fixed n (``fixed``, every baseline): same interface as ARS; each period reports the
    kept-count statistics the retention rule reads (:func:`kept_statistics`), n never changes."""

    rule = "fixed"

    def __init__(self, n: int = 8, period_steps: int = 0) -> None:
        super().__init__(period_steps, n)
        self._n = n
        self._observations: list[tuple[Hashable | None, int, int]] = []

    @classmethod
    def from_config(cls, config: ARSConfig, *, n_init: int) -> "FixedRolloutScaler":
        """``rollout_scaler: fixed``: n = ``rollout.n``, periods of ``algorithm.ars.period_steps``."""
        return cls(n_init, period_steps=config.period_steps)

    @property
    def n(self) -> int:
        return self._n

    def observe(self, kept_counts: KeptCounts) -> None:
        """Record one step's kept counts (clipped to n, as ARS counts them)."""
        self._observations.extend(_clipped_observations(kept_counts, lambda _: self._n, self._n,
                                                        f"{type(self).__name__}.observe"))

    def end_period(self, progress: float | None = None) -> int:
        """Close the period: its statistics in ``last_decision``; returns the unchanged n."""
        self.last_decision = kept_statistics([k for _, k, _ in self._observations], self._n,
                                             [nq for _, _, nq in self._observations])
        self._observations = []
        return self._n

    def state_dict(self) -> dict[str, Any]:
        """The open period (its counts and its start) and the last decision; the keys of
        :meth:`RetentionRolloutScaler.state_dict`, so checkpoints of either read the same."""
        return {"n": self._n, "period": [list(r) for r in self._observations],
                "period_start": self.period.state_dict(), "prompt_n": [], "last_decision": dict(self.last_decision)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [k for k in ("n", "period", "period_start", "last_decision") if k not in state]
        if missing:
            raise ValueError(f"{type(self).__name__}.load_state_dict: missing keys {missing}")
        self._observations = [(u, int(k), int(nq)) for u, k, nq in state["period"]]
        self.period.load_state_dict(state["period_start"])
        self.last_decision = dict(state["last_decision"])
