"""Paired comparisons over seeds: Student-t intervals and the verdict they allow.

A method and its baseline trained with the same seed share the seed's data order, warm start and
validation set, so the tables compare them *per seed* (method − baseline, or baseline time / method
time) and put a 95 % Student-t interval on the mean of those paired values (df = n − 1, n = the
seeds both finished; no interval below n = 2).

``verdict`` turns such an interval into the word ``paper_figures/README.md`` may use: *supports*
only where the interval excludes the null value (0 for a difference, 1 for a speedup ratio) on the
side the paper claims, *contradicts* where it excludes it on the other side, else *inconclusive*.

Pure Python (``math`` only): the t quantile is the inverse of the t CDF, computed from the
regularized incomplete beta function (continued fraction, Numerical Recipes §6.4) by bisection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

SUPPORTS, CONTRADICTS, INCONCLUSIVE = "supports", "contradicts", "inconclusive"
NA = "n/a"  # printed where an interval needs more paired seeds


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x = {x} outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_cdf: df = {df} must be positive")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (e.g. ``t_quantile(0.975, 4)`` = 2.776)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p = {p} outside (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):  # bisection to float precision
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    """Mean of paired per-seed values with its Student-t interval (``low``/``high`` None when n < 2)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    std: float | None  # sample std of the paired values (ddof = 1)
    level: float = 0.95

    @property
    def defined(self) -> bool:
        return self.low is not None and self.high is not None


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean ± t_{(1+level)/2, n-1} · s / sqrt(n) of ``values`` (one value per seed)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError("t_interval: no values")
    mean = math.fsum(xs) / n
    if n < 2:
        return Interval(mean, None, None, n, None, level)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * std / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, std, level)


def paired_values(method: Mapping[int, float], baseline: Mapping[int, float], *, ratio: bool = False) -> dict[int, float]:
    """Per seed present in both: ``method - baseline`` (or ``baseline / method`` with ``ratio``,
    i.e. the speedup of the method when the values are times)."""
    seeds = sorted(set(method) & set(baseline))
    if ratio:
        return {k: float(baseline[k]) / float(method[k]) for k in seeds}
    return {k: float(method[k]) - float(baseline[k]) for k in seeds}


def _sign(direction: str | int | float) -> int:
    if direction in ("+", "higher", "better", 1, 1.0):
        return 1
    if direction in ("-", "lower", "worse", -1, -1.0):
        return -1
    raise ValueError(f"direction {direction!r}: use '+' (the paper says the method is higher) or '-'")


def verdict(low: float | None, high: float | None, direction: str | int, *, null: float = 0.0) -> str:
    """What a paired interval [low, high] says about a claim of the paper.

    ``direction``: ``"+"`` when the paper says the method's value is above the baseline's
    (a positive difference, a speedup above 1), ``"-"`` when below. ``null``: the no-effect value,
    0 for differences, 1 for ratios (speedups). Returns ``"supports"`` only if the whole interval
    lies beyond ``null`` in that direction, ``"contradicts"`` if it lies beyond it in the other
    direction, else ``"inconclusive"`` (also when there is no interval: fewer than 2 seeds).
    """
    sign = _sign(direction)
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)) \
            or (isinstance(high, float) and math.isnan(high)):
        return INCONCLUSIVE
    if low > high:
        raise ValueError(f"verdict: interval [{low}, {high}] has low > high")
    if sign * (low - null) > 0 and sign * (high - null) > 0:
        return SUPPORTS
    if sign * (low - null) < 0 and sign * (high - null) < 0:
        return CONTRADICTS
    return INCONCLUSIVE


def row_verdict(row: Mapping[str, str], direction: str | int) -> str:
    """``verdict`` of one measured row of a generated CSV (a ``d_*`` difference or a
    ``speedup_*_ci95`` ratio, whose no-effect value is 1)."""
    def num(key: str) -> float | None:
        v = row.get(key, "")
        return None if v in ("", None, NA) else float(v)

    metric = row.get("metric", "")
    if not (metric.startswith("d_") or metric.endswith("_ci95")):
        raise ValueError(f"row_verdict: {metric!r} is not a paired row (d_* or *_ci95)")
    return verdict(num("ci95_low"), num("ci95_high"), direction, null=1.0 if metric.startswith("speedup") else 0.0)
