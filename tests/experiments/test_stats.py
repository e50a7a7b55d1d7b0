"""experiments.stats: Student-t quantiles and intervals, and the verdict an interval allows."""

from __future__ import annotations

import math

import pytest

from experiments.stats import (
    CONTRADICTS, INCONCLUSIVE, SUPPORTS, paired_values, row_verdict, t_cdf, t_interval, t_quantile, verdict,
)

# Two-sided 95 % critical values t_{0.975, df} from the printed t table
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 10: 2.228, 20: 2.086, 30: 2.042}


@pytest.mark.parametrize("df,expected", sorted(T975.items()))
def test_t_quantile_matches_the_printed_table(df, expected):
    assert abs(t_quantile(0.975, df) - expected) < 5e-4
    assert abs(t_quantile(0.025, df) + expected) < 5e-4  # symmetric


def test_t_quantile_other_levels_and_cdf():
    assert abs(t_quantile(0.95, 5) - 2.015) < 5e-4  # one-sided 95 %, df 5
    assert abs(t_quantile(0.995, 2) - 9.925) < 5e-4
    assert t_quantile(0.5, 3) == 0.0
    assert abs(t_cdf(0.0, 7) - 0.5) < 1e-12
    assert abs(t_cdf(t_quantile(0.975, 4), 4) - 0.975) < 1e-10
    assert abs(t_cdf(1.0, 1) - 0.75) < 1e-12  # Cauchy: 1/2 + atan(1)/pi
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_t_quantile_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 31):
        for p in (0.9, 0.95, 0.975, 0.995):
            assert math.isclose(t_quantile(p, df), float(stats.t.ppf(p, df)), rel_tol=1e-9)


def test_t_interval_by_hand():
    # values 1..5: mean 3, s = sqrt(2.5), se = s / sqrt(5) = 0.70711, t_{0.975,4} = 2.77645 -> half 1.96324
    iv = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert iv.n == 5 and iv.mean == 3.0 and math.isclose(iv.std, math.sqrt(2.5))
    assert abs(iv.low - 1.03676) < 1e-4 and abs(iv.high - 4.96324) < 1e-4
    # two seeds: mean 2, s = sqrt(2), se = 1, t_{0.975,1} = 12.7062
    iv = t_interval([1.0, 3.0])
    assert abs(iv.low + 10.7062) < 1e-3 and abs(iv.high - 14.7062) < 1e-3
    # one seed: a mean, no interval
    iv = t_interval([4.0])
    assert iv.mean == 4.0 and iv.low is None and iv.high is None and not iv.defined and iv.std is None
    with pytest.raises(ValueError):
        t_interval([])


def test_paired_values_use_only_seeds_both_have():
    assert paired_values({1: 5.0, 2: 7.0, 3: 1.0}, {1: 4.0, 2: 9.0}) == {1: 1.0, 2: -2.0}
    # times -> speedup of the method: baseline time / method time
    assert paired_values({1: 2.0, 2: 4.0}, {1: 6.0, 2: 4.0}, ratio=True) == {1: 3.0, 2: 1.0}


def test_verdict():
    # the paper says the method is higher ("+")
    assert verdict(0.5, 2.0, "+") == SUPPORTS
    assert verdict(-2.0, -0.5, "+") == CONTRADICTS
    assert verdict(-0.5, 2.0, "+") == INCONCLUSIVE
    assert verdict(0.0, 2.0, "+") == INCONCLUSIVE  # touching 0 does not exclude it
    # the paper says lower ("-")
    assert verdict(-2.0, -0.5, "-") == SUPPORTS
    assert verdict(0.5, 2.0, "-") == CONTRADICTS
    # speedups: no effect is 1
    assert verdict(1.2, 3.0, "+", null=1.0) == SUPPORTS
    assert verdict(0.9, 3.0, "+", null=1.0) == INCONCLUSIVE
    assert verdict(0.5, 0.9, "+", null=1.0) == CONTRADICTS
    # no interval (fewer than 2 seeds)
    assert verdict(None, None, "+") == INCONCLUSIVE
    with pytest.raises(ValueError):
        verdict(0.5, 2.0, "up")
    with pytest.raises(ValueError):
        verdict(2.0, 0.5, "+")


def test_row_verdict_reads_a_generated_csv_row():
    d = {"metric": "d_avg_acc_vs_grpo", "ci95_low": "0.4", "ci95_high": "3.1"}
    assert row_verdict(d, "+") == SUPPORTS and row_verdict(d, "-") == CONTRADICTS
    s = {"metric": "speedup_vs_grpo_ci95", "ci95_low": "0.9", "ci95_high": "3.8"}
    assert row_verdict(s, "+") == INCONCLUSIVE  # includes 1
    assert row_verdict({**s, "ci95_low": "1.2"}, "+") == SUPPORTS
    assert row_verdict({"metric": "d_avg_acc_vs_grpo", "ci95_low": "n/a", "ci95_high": "n/a"}, "+") == INCONCLUSIVE
    with pytest.raises(ValueError):
        row_verdict({"metric": "avg_acc", "ci95_low": "", "ci95_high": ""}, "+")
