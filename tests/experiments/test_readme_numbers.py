"""The README's Table 1 summary is the committed generated table, cell for cell (every number in it).

Its columns are the settings the README's header names (a re-measure in progress shows the settings
done so far); each must be a setting of the committed table1.csv.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TABLE1 = ROOT / "paper_figures" / "generated" / "mini" / "table1.csv"
METADATA = ROOT / "paper_figures" / "generated" / "mini" / "run_metadata" / "table1.jsonl"

# README column title -> (dataset title, model title) of table1.csv, and the (dataset, model) slots
SETTINGS = {"Geo3K · small": ("Geometry3K", "Qwen2.5-VL-3B-Instruct"), "Geo3K · large": ("Geometry3K", "Qwen2.5-VL-7B-Instruct"),
            "GeoQA · small": ("GeoQA8K-R1V", "Qwen2.5-VL-3B-Instruct"), "GeoQA · large": ("GeoQA8K-R1V", "Qwen2.5-VL-7B-Instruct")}
SLOTS = {"Geo3K · small": ("geometry3k", "vl_3b"), "Geo3K · large": ("geometry3k", "vl_7b"),
         "GeoQA · small": ("geoqa8k", "vl_3b"), "GeoQA · large": ("geoqa8k", "vl_7b")}
NUM = r"([+−-]?\d+\.\d+)"
CELL = re.compile(rf"{NUM}× \[{NUM}, {NUM}\]\**; {NUM} \[{NUM}, {NUM}\]")
REFERENCE_CELL = re.compile(r"^(\d+\.\d) % \((\d+)\)$")  # the GRPO row: "24.4 % (5)" = avg acc (seeds)
GAIN_ROW = re.compile(rf"^(\d+\.\d) % → (\d+\.\d) %; {NUM} \[{NUM}, {NUM}\]$")  # warm start -> GRPO; gain [CI]
ARS_CELL = re.compile(r"^(\d+) of (\d+) runs; (\d+) changes$")


def _num(text: str) -> float:
    return float(text.replace("−", "-"))


def _close(shown: float, value: float, decimals: int) -> bool:
    return shown == round(value, decimals) or abs(shown - value) <= 0.5 * 10 ** -decimals + 1e-9


def _rows() -> list[dict[str, str]]:
    with TABLE1.open() as f:
        return [r for r in csv.DictReader(f) if r["source"] == "measured"]


def _metric(method: str, metric: str) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["dataset"], r["model"]): r for r in _rows() if r["method"] == method and r["metric"] == metric}


def _table(first_header: str) -> tuple[list[str], list[list[str]]]:
    """The README table whose header starts with ``| <first_header> |``: its column titles and rows."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return header, rows


def test_readme_table1_columns_are_settings_of_the_generated_table():
    header, _ = _table("method")
    assert header[0] == "method" and header[1:] and set(header[1:]) <= set(SETTINGS), header
    measured = {(r["dataset"], r["model"]) for r in _rows() if r["model"]}
    assert {SETTINGS[c] for c in header[1:]} == measured, (header, measured)


def test_readme_table1_cells_match_the_generated_table():
    header, rows = _table("method")
    speedups = {(r["method"], r["dataset"], r["model"]): r for r in _rows() if r["metric"] == "speedup_cpu_vs_grpo_ci95"}
    accs = {(r["method"], r["dataset"], r["model"]): r for r in _rows() if r["metric"] == "d_avg_acc_vs_grpo"}
    methods = {cells[0].strip("*"): cells[1:] for cells in rows if cells[0] != "grpo (avg acc)"}
    assert {"dapo", "gspo", "cppo", "greso", "fastrl", "fastrl_dapo", "fastrl_gspo"} <= set(methods), methods.keys()
    for method, cells in methods.items():
        for column, cell in zip(header[1:], cells):
            m = CELL.search(cell)
            assert m, (method, column, cell)
            got = [_num(x) for x in m.groups()]
            speed, acc = speedups[(method, *SETTINGS[column])], accs[(method, *SETTINGS[column])]
            want = [float(speed[k]) for k in ("value", "ci95_low", "ci95_high")] + \
                   [float(acc[k]) for k in ("value", "ci95_low", "ci95_high")]
            for shown, value, decimals in zip(got, want, (2, 2, 2, 1, 1, 1)):
                assert _close(shown, value, decimals), (method, column, got, want)


def test_readme_table1_reference_row_is_grpos_accuracy_and_seed_count():
    header, rows = _table("method")
    grpo = next(cells for cells in rows if cells[0] == "grpo (avg acc)")
    acc = _metric("grpo", "avg_acc")
    for column, cell in zip(header[1:], grpo[1:]):
        m = REFERENCE_CELL.match(cell)
        assert m, (column, cell)
        row = acc[SETTINGS[column]]
        assert float(m.group(1)) == round(float(row["value"]), 1), (column, cell, row["value"])
        assert int(m.group(2)) == int(float(row["n_seeds"])), (column, cell, row["n_seeds"])


def test_readme_table1_has_every_method_of_the_generated_table_and_nothing_else():
    shown = [cells[0].strip("*") for cells in _table("method")[1]]
    with TABLE1.open() as f:
        methods = list(dict.fromkeys(r["method"] for r in csv.DictReader(f) if r["source"] == "measured"))
    assert shown == ["grpo (avg acc)", *[m for m in methods if m != "grpo"]], shown


def _n_moved(dataset: str, model: str) -> tuple[int, int, int]:
    """FastRL's runs of a setting in the committed metadata: how many moved n, of how many; total changes."""
    records = [json.loads(x) for x in METADATA.read_text().splitlines() if x.strip()]
    changes = []
    for r in records:
        if (r["dataset"], r["model"], r["variant"]) == (dataset, model, "fastrl"):
            ns = [step["rollout/n"] for step in r["steps"]]
            changes.append(sum(a != b for a, b in zip(ns, ns[1:])))
    return sum(c > 0 for c in changes), len(changes), sum(changes)


def test_readme_room_to_learn_and_ars_rows_match_the_generated_table_and_metadata():
    """The README's second Table 1 block: per setting, the warm start -> GRPO in-domain with GRPO's gain
    [95 % CI], and in how many FastRL runs the released ARS moved n."""
    header, rows = _table("row")
    assert set(header[1:]) <= set(SETTINGS) and header[1:] == _table("method")[0][1:], header
    by_name = {cells[0]: cells[1:] for cells in rows}
    before, after, gain = _metric("grpo", "acc_before"), _metric("grpo", "in_domain_acc"), _metric("grpo", "in_domain_gain")
    for column, cell in zip(header[1:], by_name["GRPO in-domain: warm start → after; gain [95 % CI]"]):
        m = GAIN_ROW.match(cell)
        assert m, (column, cell)
        key = SETTINGS[column]
        got = [_num(x) for x in m.groups()]
        want = [float(before[key]["value"]), float(after[key]["value"]),
                *(float(gain[key][k]) for k in ("value", "ci95_low", "ci95_high"))]
        for shown, value in zip(got, want):
            assert _close(shown, value, 1), (column, got, want)
    for column, cell in zip(header[1:], by_name["FastRL: runs where ARS moved n; changes in all"]):
        m = ARS_CELL.match(cell)
        assert m, (column, cell)
        assert tuple(int(x) for x in m.groups()) == _n_moved(*SLOTS[column]), (column, cell)


def test_readme_block_is_what_dev_readme_table1_renders() -> None:
    """The block between the README's table1 markers is rewritten by dev/readme_table1.py, never by hand."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_table1", ROOT / "dev" / "readme_table1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = README.read_text()
    block = text[text.index(module.BEGIN) + len(module.BEGIN):text.index(module.END)]
    assert block.strip() == module.render().strip(), "run: python dev/readme_table1.py"
