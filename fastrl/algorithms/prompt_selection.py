"""Pre-rollout prompt selection: GRESO (selective rollout) and the keep-everything baseline.

GRESO (Zheng et al. 2025, as docs/algorithms.md "GRESO selection" states it). Each prompt keeps a history of its rollouts,
one entry per rollout: all-correct (every accuracy 1), all-wrong (every accuracy 0) or mixed.
Before rollout a prompt is kept with probability

* max(p_easy^z, floor) if its last z rollouts (the trailing run, z >= 1) were all-correct;
* else max(p_hard^z, floor) if its last z rollouts were all-wrong;
* else 1 (mixed last rollout, or no history: a prompt never seen is always kept).

p_easy and p_hard start at 0.5 and move once per step, from the second epoch on (``epoch >= 1``
with 0-based epochs), toward zero-variance targets: among the prompts rolled out in the step,
let easy_ratio be the fraction that came back all-correct and hard_ratio the fraction all-wrong.
If easy_ratio >= α/3 then p_easy -= step_size (skip easy prompts more), else p_easy +=
step_size; likewise hard_ratio against 2α/3 for p_hard; both stay in [p_min, p_max]. This is
GRESO's released rule (``>=`` lowers), with α = 0.25, step 0.01, [0.05, 0.95]. The observed
zero-variance ratio is thus pushed toward the target from either side.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Hashable, Mapping, Sequence

import torch

from torch import Tensor

from fastrl import metric_keys as K
from fastrl.algorithms.sections import GresoConfig

_MIXED, _EASY, _HARD = 0, 1, -1


def _outcome(accuracies: Sequence[float] | Tensor, where: str, uid: Hashable) -> int:
    vals = accuracies.tolist() if isinstance(accuracies, Tensor) else list(accuracies)
    if not vals:
        raise ValueError(f"{where}: prompt uid={uid!r} has no accuracies")
    for j, a in enumerate(vals):
        if isinstance(a, bool):
            a = float(a)
        if not isinstance(a, (int, float)) or not math.isfinite(a) or not 0.0 <= a <= 1.0:
            raise ValueError(f"{where}: accuracy #{j} of prompt uid={uid!r} is {a!r}; expected a number in [0, 1]")
    if all(a == 1 for a in vals):
        return _EASY
    if all(a == 0 for a in vals):
        return _HARD
    return _MIXED


class AllPromptsSelector:
    """Keeps every prompt; records outcomes only to report the same zero-variance metrics."""

    def __init__(self) -> None:
        self._step = {"prompts": 0, "easy": 0, "hard": 0}

    def select(self, uids: Sequence[Hashable], generator: torch.Generator | None = None) -> list[bool]:
        """Which prompts to roll out: all of them. N uids -> N booleans."""
        return [True] * len(uids)

    def record(self, uid: Hashable, accuracies: Sequence[float] | Tensor) -> None:
        """Record one rollout of prompt ``uid``: its per-response accuracies in [0, 1]."""
        kind = _outcome(accuracies, f"{type(self).__name__}.record", uid)
        self._step["prompts"] += 1
        self._step["easy"] += kind == _EASY
        self._step["hard"] += kind == _HARD

    def record_groups(self, groups: Mapping[Hashable, Sequence[float] | Tensor]) -> None:
        """``record`` for each ``uid -> accuracies`` item."""
        for uid, acc in groups.items():
            self.record(uid, acc)

    def _step_metrics(self) -> dict[str, float]:
        total = self._step["prompts"]
        return {
            "prompts_rolled_out": float(total),
            "easy_ratio": self._step["easy"] / total if total else math.nan,
            "hard_ratio": self._step["hard"] / total if total else math.nan,
        }

    def end_step(self, epoch: int) -> dict[str, float]:
        """Close the step; returns its statistics (zero-variance ratios)."""
        metrics = self._step_metrics()
        self._step = {"prompts": 0, "easy": 0, "hard": 0}
        return metrics

    def metrics(self) -> dict[str, float]:
        """What the trainer logs each step: nothing (every prompt is kept)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"step": dict(self._step)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "step" not in state:
            raise ValueError(f"{type(self).__name__}.load_state_dict: missing key 'step'")
        self._step = {k: int(v) for k, v in state["step"].items()}


class GresoSelector(AllPromptsSelector):
    """GRESO selective rollout (see the module docstring for the exact rule)."""

    def __init__(self, config: GresoConfig | None = None, **fields: float) -> None:
        """From ``config`` (None: ``GresoConfig()``'s defaults) with ``fields`` replaced, e.g.
        ``GresoSelector(p_easy=0.4)``; the values are checked by ``GresoConfig.check``."""
        super().__init__()
        config = dataclasses.replace(config if config is not None else GresoConfig(), **fields)
        try:
            config.check()
        except ValueError as exc:
            raise ValueError(f"GresoSelector: {exc}") from None
        self.config = config
        self.p_easy, self.p_hard = float(config.p_easy), float(config.p_hard)
        self.alpha, self.step_size = float(config.alpha), float(config.step_size)
        self.p_min, self.p_max, self.floor = float(config.p_min), float(config.p_max), float(config.floor)
        self.target_easy = self.alpha / 3.0
        self.target_hard = 2.0 * self.alpha / 3.0
        self._history: dict[Hashable, list[int]] = {}

    @classmethod
    def from_config(cls, config: GresoConfig) -> "GresoSelector":
        """GRESO from its section, ``algorithm.greso``."""
        return cls(config)

    def history(self, uid: Hashable) -> list[str]:
        """Outcomes recorded for ``uid``, oldest first: 'easy' | 'hard' | 'mixed'."""
        names = {_EASY: "easy", _HARD: "hard", _MIXED: "mixed"}
        return [names[k] for k in self._history.get(uid, [])]

    def keep_probability(self, uid: Hashable) -> float:
        """Probability that ``uid`` is rolled out at the next ``select``."""
        hist = self._history.get(uid)
        if not hist or hist[-1] == _MIXED:
            return 1.0
        last = hist[-1]
        z = 0
        for k in reversed(hist):
            if k != last:
                break
            z += 1
        p = self.p_easy if last == _EASY else self.p_hard
        return max(p ** z, self.floor)

    def select(self, uids: Sequence[Hashable], generator: torch.Generator | None = None) -> list[bool]:
        """Draw which prompts to roll out: N uids -> N booleans.

        One uniform draw per uid from ``generator`` (always N draws, so the random stream does
        not depend on the history); uid i is kept iff u_i < keep_probability(uid_i).
        """
        probs = torch.tensor([self.keep_probability(u) for u in uids], dtype=torch.float64)
        u = torch.rand(len(uids), generator=generator, dtype=torch.float64)
        return (u < probs).tolist()

    def record(self, uid: Hashable, accuracies: Sequence[float] | Tensor) -> None:
        """Append one rollout outcome of prompt ``uid`` (its per-response accuracies in [0, 1])."""
        kind = _outcome(accuracies, "GresoSelector.record", uid)
        self._history.setdefault(uid, []).append(kind)
        self._step["prompts"] += 1
        self._step["easy"] += kind == _EASY
        self._step["hard"] += kind == _HARD

    def end_step(self, epoch: int) -> dict[str, float]:
        """Adapt p_easy / p_hard (only when ``epoch >= 1``, 0-based) and return the step's metrics.

        A step in which no prompt was rolled out leaves both probabilities unchanged.
        """
        metrics = self._step_metrics()
        total = self._step["prompts"]
        if epoch >= 1 and total > 0:
            if metrics["easy_ratio"] >= self.target_easy:
                self.p_easy = max(self.p_easy - self.step_size, self.p_min)
            else:
                self.p_easy = min(self.p_easy + self.step_size, self.p_max)
            if metrics["hard_ratio"] >= self.target_hard:
                self.p_hard = max(self.p_hard - self.step_size, self.p_min)
            else:
                self.p_hard = min(self.p_hard + self.step_size, self.p_max)
        metrics["p_easy"], metrics["p_hard"] = self.p_easy, self.p_hard
        metrics["tracked_prompts"] = float(len(self._history))
        self._step = {"prompts": 0, "easy": 0, "hard": 0}
        return metrics

    def metrics(self) -> dict[str, float]:
        """What the trainer logs each step: the keep probabilities after the step's adaptation."""
        return {K.greso_key("p_easy"): self.p_easy, K.greso_key("p_hard"): self.p_hard}

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": dict(self._step),
            "p_easy": self.p_easy,
            "p_hard": self.p_hard,
            "history": [[u, list(h)] for u, h in self._history.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [k for k in ("step", "p_easy", "p_hard", "history") if k not in state]
        if missing:
            raise ValueError(f"GresoSelector.load_state_dict: missing keys {missing}")
        super().load_state_dict(state)
        self.p_easy, self.p_hard = float(state["p_easy"]), float(state["p_hard"])
        self._history = {u: [int(k) for k in h] for u, h in state["history"]}
