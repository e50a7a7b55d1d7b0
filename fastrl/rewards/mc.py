"""Multiple-choice reward (MathVista, MathVision, WeMath, Geometry3K-as-MC).

The boxed answer may be a letter (``B``, ``(B)``, ``B.``, ``\\text{B}``) or an option's text; the
ground truth may be either too. With ``choices`` both sides are mapped to an option index and
compared; without ``choices`` (options shown only in the image) letters are compared directly and
anything else falls back to mathruler grading. Score: accuracy + 0.5 · format (paper's weights).

Multiple-choice benchmarks mix in free-form rows (113 of MathVision testmini's 304, MathVista's
``free_form`` rows): a row that neither lists nor draws options (``fastrl.data.schema.
is_multiple_choice``) is graded exactly as the ``math`` reward grades it, never as a letter.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from fastrl.data.schema import is_multiple_choice

from fastrl.rewards.common import extract_boxed, format_ok, grade, normalize_tags
from fastrl.rewards.math import PAPER_FORMAT_WEIGHT

_LETTER = re.compile(r"^\(?\s*([A-Z])\s*\)?\s*[.:)]?$")
_LETTER_PREFIX = re.compile(r"^\(?([A-Z])\)?[.:)]\s+\S")
_TEXT_WRAP = re.compile(r"^\\(?:text|mathrm|textbf)\{(.*)\}$")


def _strip(s: str) -> str:
    s = s.strip().strip("$").strip()
    m = _TEXT_WRAP.match(s)
    return m.group(1).strip() if m else s


def as_letter(answer: str, n_choices: int | None) -> str | None:
    """The option letter ``answer`` denotes (``B``, ``(B)``, ``B.``, ``B. text``), or None."""
    s = _strip(answer)
    m = _LETTER.match(s) or _LETTER_PREFIX.match(s)
    if not m:
        return None
    letter = m.group(1)
    if n_choices is not None and ord(letter) - ord("A") >= n_choices:
        return None
    return letter


def option_index(answer: str, choices: Sequence[str] | None) -> int | None:
    """Index of the option ``answer`` names, by letter or by (graded) text; None if none does."""
    n = len(choices) if choices else None
    letter = as_letter(answer, n)
    if letter is not None:
        return ord(letter) - ord("A")
    if not choices:
        return None
    text = _strip(answer)
    for i, c in enumerate(choices):
        if _strip(c) == text:
            return i
    for i, c in enumerate(choices):
        if grade(text, _strip(c)):
            return i
    return None


def mc_match(pred: str, ground_truth: str, choices: Sequence[str] | None) -> bool:
    pi = option_index(pred, choices)
    gi = option_index(ground_truth, choices)
    if pi is not None and gi is not None:
        return pi == gi
    if pi is not None and choices:  # letter predicted, gt text matched no option exactly
        return grade(_strip(choices[pi]), _strip(ground_truth))
    return grade(_strip(pred), _strip(ground_truth))


def mc_compute_score_unguarded(
    response: str, ground_truth: str, *, choices: Sequence[str] | None = None,
    meta: Mapping[str, Any] | None = None, **record_fields: object,
) -> dict[str, float]:
    resp = normalize_tags(response)
    fmt = 1.0 if format_ok(resp, "thinking") else 0.0
    pred = extract_boxed(resp)
    if is_multiple_choice(list(choices) if choices else None, dict(meta) if meta else None):
        acc = 1.0 if pred is not None and mc_match(pred, ground_truth, choices) else 0.0
    else:  # a free-form row: the math reward's rule (mathruler on the boxed answer)
        acc = 1.0 if grade(pred, ground_truth) else 0.0
    return {"overall": acc + PAPER_FORMAT_WEIGHT * fmt, "format": fmt, "accuracy": acc}
