"""Reward functions and the batch scorer.

``REWARD_FUNCTIONS[name](response, ground_truth, **record_fields) -> dict[str, float]`` holds the
*unguarded* functions (no time box). Use ``score_batch`` (or ``guarded_call``) to run them: every
call is time-boxed; a time-out or an exception scores 0 on every key, is counted, and never stops
the run.

Names: ``math`` (the paper's: accuracy + 0.5·format with ``<thinking>``), ``easyr1_math``
(0.9·accuracy + 0.1·format with ``<think>``), ``geoqa`` (unit-aware numeric), ``mc`` (letter ↔
option text), ``grounding_iou`` (continuous IoU). Every function returns at least ``overall``,
``format`` (the 0/1 indicator) and ``accuracy``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping, Sequence

from fastrl import metric_keys as K
from fastrl.rewards.geoqa import geoqa_compute_score_unguarded
from fastrl.rewards.grounding import ground_truth_problem as grounding_ground_truth_problem
from fastrl.rewards.grounding import grounding_compute_score_unguarded
from fastrl.rewards.math import compute_score_unguarded, easyr1_compute_score_unguarded
from fastrl.rewards.mc import mc_compute_score_unguarded
from fastrl.rewards.timebox import DEFAULT_TIMEOUT_S, GradingTimeout, run_time_boxed

log = logging.getLogger(__name__)

RewardFn = Callable[..., dict[str, float]]

REWARD_FUNCTIONS: dict[str, RewardFn] = {
    "math": compute_score_unguarded,
    "easyr1_math": easyr1_compute_score_unguarded,
    "geoqa": geoqa_compute_score_unguarded,
    "mc": mc_compute_score_unguarded,
    "grounding_iou": grounding_compute_score_unguarded,
}

# Keys each function returns: a failed call returns these, all 0.0.
REWARD_KEYS: dict[str, tuple[str, ...]] = {
    "math": ("overall", "format", "accuracy"),
    "easyr1_math": ("overall", "format", "accuracy"),
    "geoqa": ("overall", "format", "accuracy"),
    "mc": ("overall", "format", "accuracy"),
    "grounding_iou": ("overall", "format", "accuracy", "iou"),
}

# Ground-truth checks a reward needs at load time: a ground truth it can never grade is bad data,
# not a response worth 0 (fastrl.training.setup.load_datasets applies them, naming file and row).
GROUND_TRUTH_CHECKS: dict[str, Callable[[str], str | None]] = {"grounding_iou": grounding_ground_truth_problem}


def ground_truth_problem(name: str, ground_truth: str) -> str | None:
    """Why reward ``name`` cannot grade ``ground_truth``, or None."""
    check = GROUND_TRUTH_CHECKS.get(name)
    return check(ground_truth) if check is not None else None


# Record fields a reward function may use (passed as keyword arguments by score_batch).
RECORD_FIELDS = ("choices", "meta", "source", "uid")

_counts_lock = threading.Lock()
_FAILURE_COUNTS = {K.REWARD_FAILURES: 0, K.REWARD_TIMEOUTS: 0}


def get_reward_fn(name: str) -> RewardFn:
    try:
        return REWARD_FUNCTIONS[name]
    except KeyError:
        raise ValueError(f"unknown reward function {name!r}; valid: {sorted(REWARD_FUNCTIONS)}") from None


def failure_counts() -> dict[str, int]:
    """Process-wide failures of ``guarded_call`` (and so of ``compute_score``) so far."""
    with _counts_lock:
        return dict(_FAILURE_COUNTS)


def _zero(name: str) -> dict[str, float]:
    return {k: 0.0 for k in REWARD_KEYS[name]}


def _call(name: str, response: str, ground_truth: str, fields: Mapping[str, Any], timeout_s: float,
          mode: str) -> tuple[dict[str, float], str | None, str]:
    """(scores, failure kind or None, the failure as one line or "")."""
    fn = get_reward_fn(name)
    try:
        out = run_time_boxed(fn, response, ground_truth, timeout_s=timeout_s, mode=mode, **dict(fields))
        return {k: float(v) for k, v in out.items()}, None, ""
    except GradingTimeout as e:
        log.warning("reward %s timed out (scored 0): %s", name, e)
        return _zero(name), "timeout", f"GradingTimeout: {e}"
    except Exception as e:  # one failing call never stops a run: score 0 and count it (the trainer
        # stops a run whose reward keeps failing: data.reward_max_failure_share)
        log.warning("reward %s raised (scored 0): %s: %s", name, type(e).__name__, e)
        return _zero(name), "error", f"{type(e).__name__}: {e}"


def guarded_call(
    name: str, response: str, ground_truth: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, mode: str = "auto", **record_fields: Any
) -> dict[str, float]:
    """One time-boxed reward call; failures score 0 and bump ``failure_counts()``."""
    scores, failure, _ = _call(name, response, ground_truth, record_fields, timeout_s, mode)
    if failure is not None:
        with _counts_lock:
            _FAILURE_COUNTS[K.REWARD_FAILURES] += 1
            if failure == "timeout":
                _FAILURE_COUNTS[K.REWARD_TIMEOUTS] += 1
    return scores


def compute_score(response: str, ground_truth: str) -> dict[str, float]:
    """The paper's math reward, time-boxed: ``{"overall", "format", "accuracy"}``; 0s on hang/error."""
    return guarded_call("math", response, ground_truth)


def score_batch(
    fn_name: str,
    responses: Sequence[str],
    ground_truths: Sequence[str],
    record_fields: Sequence[Mapping[str, Any]] | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    mode: str = "auto",
    errors: list[str] | None = None,
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Score ``responses[i]`` against ``ground_truths[i]`` (with ``record_fields[i]`` as kwargs).

    Returns per-response score dicts and stats: ``reward/failures`` (responses scored 0 because the
    grader raised or timed out, time-outs included), ``reward/timeouts`` (the time-outs among them)
    and ``reward/n``. ``errors``, when given, gets each failure appended as one line
    (``ExceptionType: message``), in response order.
    """
    get_reward_fn(fn_name)  # unknown names fail before any work
    if len(responses) != len(ground_truths):
        raise ValueError(f"score_batch: {len(responses)} responses but {len(ground_truths)} ground truths")
    if record_fields is not None and len(record_fields) != len(responses):
        raise ValueError(f"score_batch: {len(responses)} responses but {len(record_fields)} record_fields entries")
    scores: list[dict[str, float]] = []
    failures = timeouts = 0
    for i, (resp, gt) in enumerate(zip(responses, ground_truths)):
        fields = {k: v for k, v in (record_fields[i] if record_fields is not None else {}).items() if k in RECORD_FIELDS}
        s, failure, detail = _call(fn_name, resp, gt, fields, timeout_s, mode)
        if failure is not None and errors is not None:
            errors.append(detail.splitlines()[0] if detail.strip() else detail)
        failures += failure is not None
        timeouts += failure == "timeout"
        scores.append(s)
    return scores, {K.REWARD_FAILURES: float(failures), K.REWARD_TIMEOUTS: float(timeouts), K.REWARD_N: float(len(scores))}


__all__ = [
    "REWARD_FUNCTIONS", "REWARD_KEYS", "RECORD_FIELDS", "GROUND_TRUTH_CHECKS", "ground_truth_problem", "get_reward_fn", "guarded_call", "compute_score", "score_batch", "failure_counts",
]
