"""The README's Table 1 summary is the committed generated table, cell for cell."""

from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TABLE1 = ROOT / "paper_figures" / "generated" / "mini" / "table1.csv"

# README column -> (dataset title, model title) of table1.csv
COLUMNS = [("Geometry3K", "Qwen2.5-VL-3B-Instruct"), ("Geometry3K", "Qwen2.5-VL-7B-Instruct"),
           ("GeoQA8K-R1V", "Qwen2.5-VL-3B-Instruct"), ("GeoQA8K-R1V", "Qwen2.5-VL-7B-Instruct")]
NUM = r"([+−-]?\d+\.\d+)"
CELL = re.compile(rf"{NUM}× \[{NUM}, {NUM}\]\**; {NUM} \[{NUM}, {NUM}\]")


def _num(text: str) -> float:
    return float(text.replace("−", "-"))


def _generated() -> dict[tuple[str, str, str, str], tuple[float, float, float]]:
    out = {}
    with TABLE1.open() as f:
        for r in csv.DictReader(f):
            if r["source"] == "measured" and r["ci95_low"]:
                out[(r["method"], r["dataset"], r["model"], r["metric"])] = (
                    float(r["value"]), float(r["ci95_low"]), float(r["ci95_high"]))
    return out


def test_readme_table1_cells_match_the_generated_table():
    generated = _generated()
    rows = [line for line in README.read_text().splitlines()
            if line.startswith("| ") and "× [" in line and line.count("|") == 6]
    methods = {}
    for line in rows:
        name, *cells = [c.strip() for c in line.strip("|").split("|")]
        methods[name.strip("*")] = cells
    assert {"dapo", "gspo", "cppo", "greso", "fastrl", "fastrl_dapo", "fastrl_gspo"} <= set(methods), methods.keys()
    for method, cells in methods.items():
        for (dataset, model), cell in zip(COLUMNS, cells):
            m = CELL.search(cell)
            assert m, (method, dataset, model, cell)
            got = [_num(x) for x in m.groups()]
            speed = generated[(method, dataset, model, "speedup_cpu_vs_grpo_ci95")]
            acc = generated[(method, dataset, model, "d_avg_acc_vs_grpo")]
            for shown, value, decimals in zip(got, (*speed, *acc), (2, 2, 2, 1, 1, 1)):
                assert shown == round(value, decimals) or abs(shown - value) <= 0.5 * 10 ** -decimals + 1e-9, (
                    method, dataset, model, got, speed, acc)
