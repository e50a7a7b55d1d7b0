"""GeoQA-style reward: numeric, unit-aware matching (mm/cm/dm/m/km, their squares, degrees).

The boxed answer and the ground truth are each read as ``value × unit``: LaTeX is lightened
(``\\sqrt``, ``\\frac``, ``\\pi``, ``^\\circ``, ``\\text{cm}``, ``°``, ``度``), the unit is split off
and converted to metres / square metres / degrees, and the value is evaluated (sympy, for
``2\\sqrt{3}``-style answers; an expression too large for sympy to evaluate at once, see
``bounded.sympy_hazard``, is not a number). A prediction without a unit takes the ground truth's unit; different
dimensions never match. Values match within ``rel_tol`` (default 1e-3, our choice: it accepts
``3.464`` for ``2√3`` and rejects ``3.46``). Answers that are not numbers fall back to mathruler.
Score: accuracy + 0.5 · format (the paper's weights).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from fastrl.rewards.bounded import sympy_hazard
from fastrl.rewards.common import extract_boxed, format_ok, grade, normalize_tags, too_large_to_grade
from fastrl.rewards.math import PAPER_FORMAT_WEIGHT

_LENGTH_M = {"mm": 1e-3, "cm": 1e-2, "dm": 1e-1, "m": 1.0, "km": 1e3}
# No two whitespace runs may meet across an optional part (``\s*\{?\s*``): a long run there is
# re-split at every position, quadratic (a boxed ``1m`` + 16 k spaces took 2 s).
_UNIT_RE = re.compile(r"(mm|cm|dm|km|m)(\s*(?:\^\s*(?:\{\s*)?([23])(?:\s*\})?|²|³))?\s*$")
_DEGREE_RE = re.compile(r"(\^\s*(?:\{\s*)?\\circ(?:\s*\})?|\\circ|°|度|\\degree|degrees?\b)")


@dataclass(frozen=True)
class Quantity:
    value: float | None  # None: not numeric
    dim: str | None  # "length", "area", "volume", "angle" or None (dimensionless / unknown)
    text: str  # the cleaned expression (unit removed)


def _delatex(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\(?:text|mathrm|rm|mbox)\s*\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\,", "").replace("\\!", "").replace("\\ ", "")
    return s.strip()


def parse_quantity(answer: str) -> Quantity:
    """Split ``answer`` into a numeric value (if any), a physical dimension and the expression."""
    if too_large_to_grade(answer):
        return Quantity(value=None, dim=None, text=answer)  # no number is written so long or so deep
    s = _delatex(answer)
    dim: str | None = None
    scale = 1.0
    if _DEGREE_RE.search(s):
        dim = "angle"
        s = _DEGREE_RE.sub("", s).strip()
    m = _UNIT_RE.search(s)
    if m and dim is None:
        head = s[: m.start()].strip()
        # "m" alone must follow a number-ish head (avoid eating the variable m in "2m").
        if head and (head[-1].isdigit() or head[-1] in "}) ." or m.group(1) != "m"):
            power = 1
            if m.group(2):
                power = 2 if ("2" in m.group(2) or "²" in m.group(2)) else 3
            dim = {1: "length", 2: "area", 3: "volume"}[power]
            scale = _LENGTH_M[m.group(1)] ** power
            s = head
    value = _numeric_value(s)
    return Quantity(value=None if value is None else value * scale, dim=dim, text=s)


def _numeric_value(expr: str) -> float | None:
    e = expr.strip().rstrip(".")
    if not e:
        return None
    try:
        return float(e.replace(",", "")) if re.fullmatch(r"-?[\d,]*\.?\d+", e) else _sympy_value(e)
    except (ValueError, OverflowError):
        return None


def _sympy_value(e: str) -> float | None:
    # Cheap LaTeX → sympy syntax; anything with letters other than sqrt/pi is not a number.
    e = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"((\1)/(\2))", e)
    e = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r"sqrt(\1)", e)
    e = re.sub(r"\\sqrt\s*(\d+)", r"sqrt(\1)", e)
    e = re.sub(r"√\s*\{([^{}]*)\}", r"sqrt(\1)", e)
    e = re.sub(r"√\s*(\d+(?:\.\d+)?)", r"sqrt(\1)", e)
    e = e.replace("√", "sqrt").replace("\\pi", "pi").replace("π", "pi")
    e = e.replace("\\times", "*").replace("\\cdot", "*").replace("×", "*").replace("{", "(").replace("}", ")")
    if re.search(r"[a-zA-Z]", re.sub(r"sqrt|pi", "", e)) or "\\" in e:
        return None
    if sympy_hazard(e) is not None:
        return None  # e.g. 9^9^9, (10!)!: no float holds it (non-finite reads as not a number)
    from sympy.parsing.sympy_parser import (
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    try:
        val = parse_expr(e.replace("^", "**"), transformations=standard_transformations + (implicit_multiplication_application,))
        if not getattr(val, "is_number", False):
            return None
        out = float(val.evalf())
    except Exception:  # sympy raises many types on malformed input: not a number
        return None
    return out if math.isfinite(out) else None


def geoqa_match(pred: str, ground_truth: str, *, rel_tol: float = 1e-3) -> bool:
    p, g = parse_quantity(pred), parse_quantity(ground_truth)
    if p.value is not None and g.value is not None:
        if p.dim is not None and g.dim is not None and p.dim != g.dim:
            return False
        pv = p.value
        if p.dim is None and g.dim in ("length", "area", "volume"):
            # No unit given: read the prediction in the ground truth's unit.
            pv = parse_quantity(f"{p.text}{_unit_suffix(ground_truth)}").value
            if pv is None:
                return False
        return math.isclose(pv, g.value, rel_tol=rel_tol, abs_tol=1e-9)
    return grade(p.text, g.text)


def _unit_suffix(answer: str) -> str:
    m = _UNIT_RE.search(_delatex(answer))
    return m.group(0) if m else ""


def geoqa_compute_score_unguarded(
    response: str, ground_truth: str, *, rel_tol: float = 1e-3, **record_fields: object
) -> dict[str, float]:
    resp = normalize_tags(response)
    fmt = 1.0 if format_ok(resp, "thinking") else 0.0
    pred = extract_boxed(resp)
    acc = 1.0 if pred is not None and geoqa_match(pred, ground_truth, rel_tol=rel_tol) else 0.0
    return {"overall": acc + PAPER_FORMAT_WEIGHT * fmt, "format": fmt, "accuracy": acc}
