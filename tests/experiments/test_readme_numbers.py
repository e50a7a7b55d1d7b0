"""The README's Table 1 summary is the committed generated table, cell for cell (every number in it)."""

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
REFERENCE_CELL = re.compile(r"^(\d+\.\d) % \((\d+)\)$")  # the GRPO row: "24.4 % (5)" = avg acc (seeds)


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


def _measured(method: str, metric: str) -> dict[tuple[str, str], dict[str, str]]:
    with TABLE1.open() as f:
        return {(r["dataset"], r["model"]): r for r in csv.DictReader(f)
                if r["source"] == "measured" and r["method"] == method and r["metric"] == metric}


def _table_rows() -> list[list[str]]:
    """The rows of the README table whose header is `| method | Geo3K · small | ...`."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method | Geo3K · small |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_readme_table1_reference_row_is_grpos_accuracy_and_seed_count():
    rows = _table_rows()
    grpo = next(cells for cells in rows if cells[0] == "grpo (avg acc)")
    acc = _measured("grpo", "avg_acc")
    for (dataset, model), cell in zip(COLUMNS, grpo[1:]):
        m = REFERENCE_CELL.match(cell)
        assert m, (dataset, model, cell)
        row = acc[(dataset, model)]
        assert float(m.group(1)) == round(float(row["value"]), 1), (dataset, model, cell, row["value"])
        assert int(m.group(2)) == int(float(row["n_seeds"])), (dataset, model, cell, row["n_seeds"])


def test_readme_table1_has_every_method_of_the_generated_table_and_nothing_else():
    shown = [cells[0].strip("*") for cells in _table_rows()]
    with TABLE1.open() as f:
        methods = list(dict.fromkeys(r["method"] for r in csv.DictReader(f) if r["source"] == "measured"))
    assert shown == ["grpo (avg acc)", *[m for m in methods if m != "grpo"]], shown
