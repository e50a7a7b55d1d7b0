"""Helpers shared by the reward functions: tag normalisation, box extraction, the format check.

Every helper runs in time linear in the response (a policy can emit anything: 64 k spaces, an
unclosed ``\\boxed{`` repeated, a boxed ``9^9^9``), so no reward call needs its time box on such
input; ``bench/rewards_adversarial.py`` times them.
"""

from __future__ import annotations

import re

from mathruler.grader import extract_boxed_content, grade_answer
from mathruler.math_normalize import normalize_answer
from pylatexenc.latex2text import LatexNodes2Text

from fastrl.rewards.bounded import MAX_DEPTH, bracket_depth, sympy_hazard

_TAG_SPLIT = re.compile(r"([<>/])")
_BOXED = "\\boxed{"
# Longer boxed answers are compared as stripped text only: mathruler's normalisation (pylatexenc,
# comma stripping) is not linear, and no benchmark answer comes near this length.
MAX_GRADED_CHARS = 1_000


def normalize_tags(response: str) -> str:
    """Drop whitespace around ``<``, ``>`` and ``/`` (as EasyR1 does), so ``< thinking >`` counts.

    Split at the tag characters and strip the pieces' touching sides: linear, and in C (the regex
    ``\\s*[<>/]\\s*`` re-scans a whitespace run from each of its positions: 16 s on 16 k spaces;
    a Python callback per whitespace run made every normal response 2 ms slower)."""
    pieces = _TAG_SPLIT.split(response)  # text, tag char, text, tag char, ..., text
    last = len(pieces) - 1
    for i in range(0, last + 1, 2):
        text = pieces[i]
        if i > 0:
            text = text.lstrip()
        if i < last:
            text = text.rstrip()
        pieces[i] = text
    return "".join(pieces)


def format_ok(response: str, tag: str) -> bool:
    """``<tag>…</tag>`` followed by ``\\boxed{…}`` (on a tag-normalised response): the response
    starts with ``<tag>``, and a ``</tag>``, then ``\\boxed{``, then ``}`` follow in that order.

    The same test as ``re.fullmatch(r"<tag>.*</tag>.*\\\\boxed\\{.*\\}.*", DOTALL)``, by finding
    the earliest of each, without that pattern's quadratic backtracking."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    if not response.startswith(opening):
        return False
    end_tag = response.find(closing, len(opening))
    box = response.find(_BOXED, end_tag + len(closing)) if end_tag >= 0 else -1
    return box >= 0 and response.find("}", box + len(_BOXED)) >= 0


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


def too_large_to_grade(answer: str) -> bool:
    """Longer than ``MAX_GRADED_CHARS`` or nested deeper than ``bounded.MAX_DEPTH``: compared as
    text only (mathruler's LaTeX-to-text pass is quadratic in nesting: 150 nested ``\\frac``, 0.1 s)."""
    return len(answer) > MAX_GRADED_CHARS or bracket_depth(answer) > MAX_DEPTH


def sympy_text(answer: str) -> str:
    """The answer's structure as mathruler hands it to sympy: LaTeX read as text by pylatexenc (as
    mathruler does), braces dropped (``2^{2^{30}}`` becomes the tower ``2^2^30``), no spaces."""
    text = LatexNodes2Text().latex_to_text(answer) if "\\" in answer else answer
    for a, b in (("√", "sqrt"), ("π", "pi"), ("×", "*"), ("·", "*"), ("{", ""), ("}", ""), (" ", "")):
        text = text.replace(a, b)
    return text


def grade(pred: str | None, ground_truth: str) -> bool:
    """mathruler's ``grade_answer``; a missing prediction is wrong. Not time-boxed by itself, but
    an answer sympy could not evaluate quickly (``bounded.sympy_hazard``: ``(10!)!``, ``9**9**9``,
    deep nesting) is compared by mathruler's MATH normalisation only, so every call is fast."""
    if pred is None or not pred.strip():
        return False
    if too_large_to_grade(pred):
        return pred.strip() == ground_truth.strip()
    if normalize_answer(pred) == normalize_answer(ground_truth):
        return True  # grade_answer's first test
    if any(sympy_hazard(sympy_text(s)) for s in (pred, ground_truth)):
        return False
    return bool(grade_answer(pred, ground_truth))
