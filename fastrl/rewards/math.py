"""The paper's math reward and EasyR1's variant.

Paper (FastRL): ``overall = accuracy + 0.5 · format`` with accuracy 1/0 from mathruler's
boxed-answer grading and ``format`` the 0/1 *indicator* of ``<thinking>…</thinking>`` followed by
``\\boxed{…}`` (whitespace around ``<``, ``>``, ``/`` ignored). So overall ∈ {0, 0.5, 1, 1.5}.
The returned ``"format"`` key holds the indicator (0 or 1), not the 0.5 it contributes.

EasyR1: ``<think>`` tags, ``overall = 0.9 · accuracy + 0.1 · format``.

``fastrl.rewards.compute_score`` is the paper's reward time-boxed (a hang or an exception scores
all zeros and is counted in ``fastrl.rewards.failure_counts()``); the ``*_unguarded`` functions
here are what the registry holds and what ``score_batch`` time-boxes itself.
"""

from __future__ import annotations

from fastrl.rewards.common import extract_boxed, format_ok, grade, normalize_tags

PAPER_FORMAT_WEIGHT = 0.5
EASYR1_FORMAT_WEIGHT = 0.1


def format_indicator(response: str, tag: str = "thinking") -> float:
    """1.0 if ``<tag>…</tag>`` then ``\\boxed{…}``, else 0.0 (whitespace around tag chars ignored)."""
    return 1.0 if format_ok(normalize_tags(response), tag) else 0.0


def accuracy(response: str, ground_truth: str) -> float:
    """1.0 if the last ``\\boxed{}`` grades equal to ``ground_truth`` under mathruler, else 0.0."""
    return 1.0 if grade(extract_boxed(normalize_tags(response)), ground_truth) else 0.0


def compute_score_unguarded(response: str, ground_truth: str, **record_fields: object) -> dict[str, float]:
    """The paper's reward without a time box. Extra record fields are accepted and ignored."""
    fmt = format_indicator(response, "thinking")
    acc = accuracy(response, ground_truth)
    return {"overall": acc + PAPER_FORMAT_WEIGHT * fmt, "format": fmt, "accuracy": acc}


def easyr1_compute_score_unguarded(
    response: str, ground_truth: str, *, format_weight: float = EASYR1_FORMAT_WEIGHT, **record_fields: object
) -> dict[str, float]:
    """EasyR1's math reward: ``(1 - w) · accuracy + w · format`` with ``<think>`` tags, w = 0.1."""
    fmt = format_indicator(response, "think")
    acc = accuracy(response, ground_truth)
    return {"overall": (1.0 - format_weight) * acc + format_weight * fmt, "format": fmt, "accuracy": acc}
