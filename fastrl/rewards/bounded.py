"""What may reach sympy: expressions whose exact value stays small enough to compute at once.

sympy evaluates integers exactly, so ``9^9^9`` (369 million digits), ``(10!)!`` or ``2^{2^{30}}``
run for minutes, and its implicit-multiplication parser is quadratic in bracket depth (500 nested
braces: 0.2 s). A policy that learns to box such an answer would stall every step on the 5 s
reward time box. ``sympy_hazard`` says, in bounded time, why an expression must not be handed to
sympy; callers then compare it without sympy (``common.grade``) or read it as not a number
(``geoqa``). Nothing sympy can finish quickly is refused: the bound is on the exact value's size.

The check: a length and a bracket-depth limit (the parser's cost), then the expression is parsed
*unevaluated* (``sympy.evaluate(False)``: ``9**9**9`` stays a tree) and its exact value's size is
bounded bottom-up: digits of a power <= |exponent| x digits of the base, of ``n!`` <= log10(n!)
(``n`` <= 1000), of a sum or product <= the sum of its parts'.
"""

from __future__ import annotations

import math
import re

MAX_CHARS = 200  # parse cost: a 400-character sum takes 30 ms to parse, a 6,000-character one 0.1-0.3 s
MAX_DEPTH = 20  # parse cost is quadratic in bracket depth (sympy's parser and pylatexenc); answers nest < 10
MAX_DIGITS = 5_000  # exact integers of this size cost microseconds
MAX_FACTORIAL_ARG = 1_000
_MAX_EXPONENT_DIGITS = 6  # an exponent's own size, checked before its value is computed

_OPEN, _CLOSE = "([{", ")]}"
_GROWS = re.compile(r"\^|\*\*|!")
_FACTORIALS = ("factorial", "factorial2", "subfactorial", "RisingFactorial", "FallingFactorial", "binomial")


class _Hazard(Exception):
    pass


def bracket_depth(expr: str) -> int:
    depth = deepest = 0
    for ch in expr:
        if ch in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
    return deepest


def sympy_hazard(expr: str) -> str | None:
    """Why ``expr`` (sympy syntax; ``^`` is read as a power) must not go to sympy, or None.

    >>> sympy_hazard("2*sqrt(3)") is None, sympy_hazard("9^9^9")
    (True, 'a power with more than 5000 digits')
    """
    if len(expr) > MAX_CHARS:
        return f"longer than {MAX_CHARS} characters"
    if bracket_depth(expr) > MAX_DEPTH:
        return f"brackets nested deeper than {MAX_DEPTH}"
    if not _GROWS.search(expr):
        return None  # without powers or factorials the exact value stays as long as the text
    tree = _parse_unevaluated(expr)
    if tree is None:
        return None  # sympy cannot parse it either: it fails fast, not slowly
    try:
        for part in tree if isinstance(tree, tuple) else (tree,):  # "1, 2" parses as a tuple
            _digits(part)
    except _Hazard as why:
        return str(why)
    return None


def _parse_unevaluated(expr: str):
    from sympy import evaluate
    from sympy.parsing.sympy_parser import (
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    try:
        with evaluate(False):  # also keeps factorial(...) calls unevaluated, which evaluate=False does not
            return parse_expr(re.sub(r"\^", "**", expr), evaluate=False,
                              transformations=standard_transformations + (implicit_multiplication_application,))
    except Exception:  # sympy raises many types on malformed input
        return None


def _digits(node) -> float:
    """An upper bound on the decimal digits of ``node``'s exact value (numerator and denominator)."""
    from sympy import Pow

    if node.is_Integer:
        d = float(len(str(abs(int(node)))))
    elif node.is_Rational:
        d = float(len(str(abs(node.p))) + len(str(node.q)))
    elif node.is_Float:
        d = 20.0
    elif node.is_Atom:
        d = 1.0  # a constant such as pi, a symbol
    elif isinstance(node, Pow):
        base, exponent = node.args
        d = _exponent_size(exponent) * _digits(base)
        if d > MAX_DIGITS:
            raise _Hazard(f"a power with more than {MAX_DIGITS} digits")
    elif type(node).__name__ in _FACTORIALS:
        d = sum(_digits(a) for a in node.args)  # the arguments are bounded first
        n = max((_magnitude(a) for a in node.args), default=0.0)
        if n > MAX_FACTORIAL_ARG:
            raise _Hazard(f"a factorial of more than {MAX_FACTORIAL_ARG}")
        d += math.lgamma(n + 1) / math.log(10)
    else:
        d = sum(_digits(a) for a in node.args) + 1
    if d > MAX_DIGITS:
        raise _Hazard(f"a value with more than {MAX_DIGITS} digits")
    return d


def _exponent_size(exponent) -> float:
    """|exponent| for a numeric exponent (1 for a symbolic one), computed only once it is small."""
    if _digits(exponent) > _MAX_EXPONENT_DIGITS:
        raise _Hazard(f"an exponent with more than {_MAX_EXPONENT_DIGITS} digits")
    return max(1.0, _magnitude(exponent))


def _magnitude(node) -> float:
    """|value| of a numeric node whose exact size is already bounded; 1 when not a number."""
    if not node.free_symbols:
        try:
            return abs(complex(node.doit().evalf()))
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return 1.0
    return 1.0
