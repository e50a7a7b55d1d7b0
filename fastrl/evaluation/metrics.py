"""Evaluation metrics: accuracy, avg@k, unbiased pass@k; per benchmark and averaged; writers.

pass@k uses the unbiased estimator of Chen et al. (2021): with n samples of which c are correct,
``pass@k = 1 - C(n - c, k) / C(n, k)``, computed as a product to stay exact in floating point.
avg@k is the mean correctness over the k samples of a problem, averaged over problems (with
k = 1 and greedy decoding it is plain accuracy).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples, ``c`` correct (needs k ≤ n)."""
    if not (0 <= c <= n):
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k / i)  ==  1 - C(n-c, k) / C(n, k)
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def avg_at_k(correct: Sequence[Sequence[bool]]) -> float:
    """Mean over problems of the fraction of correct samples."""
    if not correct:
        raise ValueError("avg_at_k: no problems")
    return sum(sum(map(bool, c)) / len(c) for c in correct) / len(correct)


def accuracy(correct: Sequence[bool]) -> float:
    if not correct:
        raise ValueError("accuracy: no problems")
    return sum(map(bool, correct)) / len(correct)


def avg_at_k_standard_error(correct: Sequence[Sequence[float]]) -> float:
    """The standard error of ``avg_at_k`` as an estimate of the policy's expected accuracy on these
    problems (the sampling noise; the problem set is fixed): sqrt(sum_i s_i^2 / k_i) / N, with s_i^2
    the unbiased variance of problem i's k_i samples. With one sample per problem that variance is
    unknown and the binomial bound sqrt(p (1 - p) / N) is returned instead (>= the true value)."""
    rows = [list(map(float, r)) for r in correct if len(r)]
    if not rows:
        return float("nan")
    n = len(rows)
    if all(len(r) == 1 for r in rows):
        p = sum(r[0] for r in rows) / n
        return math.sqrt(p * (1.0 - p) / n)
    total = 0.0
    for r in rows:
        k = len(r)
        if k > 1:
            mean = sum(r) / k
            total += sum((x - mean) ** 2 for x in r) / (k - 1) / k
    return math.sqrt(total) / n


def benchmark_metrics(correct: Sequence[Sequence[bool]], k: int) -> dict[str, float]:
    """Metrics of one benchmark from per-problem correctness lists (each of length ≥ k).

    Keys: ``accuracy`` (first sample of each problem), ``avg@k``, ``pass@k``, ``pass@1``, ``n_problems``.
    """
    if not correct:
        raise ValueError("benchmark_metrics: no problems")
    for i, c in enumerate(correct):
        if len(c) < k:
            raise ValueError(f"benchmark_metrics: problem {i} has {len(c)} samples, fewer than k={k}")
    return {
        "n_problems": float(len(correct)),
        "accuracy": accuracy([c[0] for c in correct]),
        f"avg@{k}": avg_at_k(correct),
        f"pass@{k}": sum(pass_at_k(len(c), sum(map(bool, c)), k) for c in correct) / len(correct),
        "pass@1": sum(pass_at_k(len(c), sum(map(bool, c)), 1) for c in correct) / len(correct),
    }


def average_over_benchmarks(per_benchmark: Mapping[str, Mapping[str, float]], keys: Sequence[str]) -> dict[str, float]:
    """Unweighted mean over benchmarks (the papers' "Avg." column) of each metric in ``keys``."""
    if not per_benchmark:
        raise ValueError("average_over_benchmarks: no benchmarks")
    return {k: sum(m[k] for m in per_benchmark.values()) / len(per_benchmark) for k in keys}


def benchmark_dirname(name: str) -> str:
    """A benchmark's name as a directory name (``mini-geo:total`` -> ``mini-geo_total``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def write_json(results: Mapping[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def markdown_table(results: Mapping[str, Any], metrics: Sequence[str] | None = None, *, percent: bool = True) -> str:
    """A markdown table: one row per benchmark plus ``Avg.``; ``results`` as returned by evaluate()."""
    benches: Mapping[str, Mapping[str, float]] = results["benchmarks"]
    if metrics is None:
        k = results["k"]
        metrics = ["accuracy"] + ([f"avg@{k}", f"pass@{k}"] if k > 1 else [])
    scale = 100.0 if percent else 1.0
    head = "| benchmark | n | " + " | ".join(metrics) + " |"
    sep = "|---|---:|" + "---:|" * len(metrics)
    lines = [head, sep]
    for name, m in benches.items():
        lines.append(f"| {name} | {int(m['n_problems'])} | " + " | ".join(f"{scale * m[x]:.2f}" for x in metrics) + " |")
    avg = results["average"]
    lines.append("| Avg. | | " + " | ".join(f"{scale * avg[x]:.2f}" for x in metrics) + " |")
    return "\n".join(lines) + "\n"


def write_markdown(results: Mapping[str, Any], path: str | Path, metrics: Sequence[str] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown_table(results, metrics), encoding="utf-8")
    return path
