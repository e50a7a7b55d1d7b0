"""experiments.correlation.real's pure parts: the bootstrap over questions and the MDAP similarity
regime of a set of sampled responses (the measurement itself needs the real model)."""

from __future__ import annotations

import math

from experiments.correlation.gradcorr import Pair
from experiments.correlation.real import bootstrap_by_question, similarity_regime


def _pair(q: str, j: float, c: float) -> Pair:
    return Pair(q, 0, 1, 0.0, 0.0, 0.0, 0.0, True, False, 3, 3, j, c)


def test_bootstrap_interval_brackets_a_perfect_correlation() -> None:
    pairs = [_pair(f"q{k}", x / 10, 2 * x / 10 + 0.1) for k in range(5) for x in range(k, k + 4)]
    out = bootstrap_by_question(pairs, reps=200, seed=0)
    assert out["replicates"] == 200
    assert all(math.isclose(v, 1.0) for v in out["pearson_ci95"] + out["spearman_ci95"])


def test_similarity_regime_counts_seed_members_and_keeps_everything_at_tau_0() -> None:
    responses = [{"uid": "a", "reward": 0.0, "response_ids": [1, 2, 3]},
                 {"uid": "a", "reward": 0.0, "response_ids": [1, 2, 9]},  # J with its seed: 2 / 4
                 {"uid": "b", "reward": 1.0, "response_ids": [4, 5]},
                 {"uid": "b", "reward": 0.0, "response_ids": [6, 7]}]
    out = similarity_regime(responses, d=1)
    assert out["responses"] == 4 and out["pairs"] == 1 and out["histogram"][5] == 1
    assert out["kept_fraction"]["0.0"]["mdap"] == 1.0
    assert out["kept_fraction"]["1.0"]["mdap"] == 0.75  # the member is dropped at tau = 1
