"""paper_figures/paper_numbers.csv holds exactly numbers that docs/paper.md states, and nothing else."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from experiments.collect import PAPER_NUMBERS, paper_rows, read_paper_numbers

PAPER_MD = Path(__file__).resolve().parents[2] / "docs" / "paper.md"


def _paper_text() -> str:
    return PAPER_MD.read_text()


def _numbers_in(text: str) -> set[float]:
    """Every number written in the text (thousands separators and signs handled)."""
    out = set()
    for tok in re.findall(r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?", text.replace("−", "-")):
        try:
            out.add(float(tok.replace(",", "")))
        except ValueError:
            continue
    return out


def test_every_value_is_stated_in_paper_md():
    stated = _numbers_in(_paper_text())
    for i, r in enumerate(read_paper_numbers(), start=2):
        assert abs(float(r["value"])) in stated, f"paper_numbers.csv:{i}: {r['value']} is not in docs/paper.md"


def test_the_headline_numbers_are_all_there():
    values = {(r["table"], r["method"], r["metric"], r["dataset"]): float(r["value"]) for r in read_paper_numbers()}
    expected = {
        ("abstract", "fastrl", "speedup_vs_grpo_avg", "Geometry3K+GeoQA8K-R1V"): 2.07,
        ("table1", "fastrl", "speedup_vs_grpo_max", "Geometry3K"): 2.14,
        ("table1", "fastrl", "speedup_vs_grpo_max", "GeoQA8K-R1V"): 2.22,
        ("table2", "fastrl_no_mdap", "speedup_vs_grpo", "GeoQA8K-R1V"): 1.10,
        ("table3", "fastrl", "in_domain_acc", "MATH"): 73.04,
        ("table3", "grpo", "train_time_h", "MATH"): 21.16,
        ("table3", "greso", "aime_avg", "MATH"): 3.33,
        ("table4", "fastrl", "avg_at_16_gain_vs_grpo", "Geometry3K"): 3.15,
        ("table5", "fastrl", "avg_acc", "Geometry3K"): 52.63,
        ("table7", "tau1.0", "speedup_vs_grpo", "GeoQA8K-R1V"): 2.27,
        ("table8", "fastrl", "speedup_vs_grpo", "RefCOCO (grounding)"): 1.76,
        ("fig6_7", "fastrl_lag4", "speedup_vs_grpo", ""): 2.9,
    }
    for key, v in expected.items():
        assert values.get(key) == v, key


def test_no_number_of_a_table_the_paper_gives_no_numbers_for():
    # Table 6 (dataset statistics) and the correlation coefficients of Fig. 5 are not in docs/paper.md
    rows = read_paper_numbers()
    assert not [r for r in rows if r["table"] == "table6"]
    assert not [r for r in rows if r["metric"] in ("pearson_r", "spearman_rho")]


def test_paper_rows_carry_source_paper():
    rows = paper_rows("table3", "table3")
    assert rows and all(r.source == "paper" for r in rows)
    assert {r.method for r in rows} == {"grpo", "fastrl", "cppo", "greso"}


def test_a_non_numeric_value_is_an_error_naming_the_line(tmp_path):
    bad = tmp_path / "p.csv"
    with open(PAPER_NUMBERS) as src, open(bad, "w", newline="") as dst:
        rows = list(csv.reader(src))
        rows[3][5] = "about two"
        csv.writer(dst).writerows(rows)
    with pytest.raises(ValueError, match=r"p.csv:4: value 'about two'"):
        read_paper_numbers(bad)
