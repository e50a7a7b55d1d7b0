from __future__ import annotations

import itertools
import json
from math import comb
from pathlib import Path

import pytest

from fastrl.evaluation.metrics import avg_at_k, benchmark_metrics, markdown_table, pass_at_k, write_json, write_markdown


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (c correct) that contain a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 10])
def test_pass_at_k_matches_enumeration_and_closed_form(n: int):
    for c in range(n + 1):
        for k in range(1, n + 1):
            est = pass_at_k(n, c, k)
            assert est == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)
            assert est == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


def test_pass_at_k_edges_and_errors():
    assert pass_at_k(16, 0, 16) == 0.0 and pass_at_k(16, 1, 16) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_avg_at_k_and_benchmark_metrics():
    correct = [[True, False, False, False], [True, True, True, True], [False] * 4]
    assert avg_at_k(correct) == pytest.approx((0.25 + 1 + 0) / 3)
    m = benchmark_metrics(correct, 4)
    assert m["pass@4"] == pytest.approx(2 / 3) and m["accuracy"] == pytest.approx(2 / 3)
    assert m["pass@1"] == pytest.approx(m["avg@4"]) and m["n_problems"] == 3
    with pytest.raises(ValueError, match="fewer than k"):
        benchmark_metrics([[True]], 2)


def test_writers(tmp_path: Path):
    results = {"k": 4, "benchmarks": {"A": {"n_problems": 2, "accuracy": 0.5, "avg@4": 0.25, "pass@4": 1.0},
                                      "B": {"n_problems": 1, "accuracy": 1.0, "avg@4": 0.75, "pass@4": 1.0}},
               "average": {"accuracy": 0.75, "avg@4": 0.5, "pass@4": 1.0}}
    table = markdown_table(results)
    assert "| benchmark | n | accuracy | avg@4 | pass@4 |" in table
    assert "| A | 2 | 50.00 | 25.00 | 100.00 |" in table and "| Avg. | | 75.00 | 50.00 | 100.00 |" in table
    p = write_json(results, tmp_path / "r" / "res.json")
    assert json.loads(p.read_text())["average"]["avg@4"] == 0.5
    assert write_markdown(results, tmp_path / "r" / "res.md").read_text() == table


def test_avg_at_k_standard_error_is_the_sampling_noise_of_the_mean():
    import math

    from fastrl.evaluation.metrics import avg_at_k_standard_error

    # two problems, 4 samples each: variances 1/3 (2 of 4 right) and 0 (all right)
    assert avg_at_k_standard_error([[1, 0, 1, 0], [1, 1, 1, 1]]) == pytest.approx(math.sqrt((1 / 3) / 4) / 2)
    # one sample per problem: the binomial bound
    assert avg_at_k_standard_error([[1], [0], [1], [1]]) == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert math.isnan(avg_at_k_standard_error([]))


def test_standard_error_shrinks_with_samples_per_problem():
    import random

    from fastrl.evaluation.metrics import avg_at_k_standard_error

    rng = random.Random(0)
    p = [rng.random() for _ in range(300)]
    se = {k: avg_at_k_standard_error([[float(rng.random() < q) for _ in range(k)] for q in p]) for k in (2, 8, 32)}
    assert se[2] > se[8] > se[32]
    assert se[8] < 0.015  # avg@8 over 300 problems: within the demo's 1.5-point target
