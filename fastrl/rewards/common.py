"""Helpers shared by the reward functions: tag normalisation, box extraction, the format check."""

from __future__ import annotations

import re

from mathruler.grader import extract_boxed_content, grade_answer

_SPACES_AROUND_TAG_CHARS = re.compile(r"\s*(<|>|/)\s*")
_BOXED = "\\boxed{"


def normalize_tags(response: str) -> str:
    """Drop whitespace around ``<``, ``>`` and ``/`` (as EasyR1 does), so ``< thinking >`` counts."""
    return _SPACES_AROUND_TAG_CHARS.sub(r"\1", response)


def format_ok(response: str, tag: str) -> bool:
    """``<tag>…</tag>`` followed by ``\\boxed{…}`` (on a tag-normalised response)."""
    pattern = re.compile(rf"<{tag}>.*</{tag}>.*\\boxed\{{.*\}}.*", re.DOTALL)
    return pattern.fullmatch(response) is not None


def extract_boxed(response: str) -> str | None:
    """Content of the last ``\\boxed{…}``, or ``None`` when there is no complete box.

    mathruler's ``extract_boxed_content`` returns the *string* ``"None"`` when there is no box,
    which ``grade_answer`` would accept against a ground truth such as "None"; a missing box must
    never be graded, so this returns a real ``None``.
    """
    if _BOXED not in response:
        return None
    content = extract_boxed_content(response)
    if content == "None" and "\\boxed{None}" not in response.replace(" ", ""):
        return None  # an unclosed box
    return content


def grade(pred: str | None, ground_truth: str) -> bool:
    """mathruler's ``grade_answer``; a missing prediction is wrong. Not time-boxed by itself."""
    if pred is None or not pred.strip():
        return False
    return bool(grade_answer(pred, ground_truth))
