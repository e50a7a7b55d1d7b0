"""Rewrite the README's Table 1 summary from the committed mini results, never by hand.

    python dev/readme_table1.py            # rewrites the block between the README's table1 markers
    python dev/readme_table1.py --print    # prints it instead

Reads paper_figures/generated/mini/table1.csv (per-setting means and paired 95 % intervals) and
run_metadata/table1.jsonl (per-run rollout sizes, for how often ARS moved n).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
GENERATED = REPO / "paper_figures" / "generated" / "mini"
BEGIN, END = "<!-- table1-mini:begin -->", "<!-- table1-mini:end -->"
SETTINGS = [  # (csv dataset, csv model, metadata dataset, metadata model, column title)
    ("Geometry3K", "Qwen2.5-VL-3B-Instruct", "geometry3k", "vl_3b", "Geo3K · small"),
    ("GeoQA8K-R1V", "Qwen2.5-VL-3B-Instruct", "geoqa8k", "vl_3b", "GeoQA · small"),
    ("Geometry3K", "Qwen2.5-VL-7B-Instruct", "geometry3k", "vl_7b", "Geo3K · large"),
    ("GeoQA8K-R1V", "Qwen2.5-VL-7B-Instruct", "geoqa8k", "vl_7b", "GeoQA · large"),
]
METHODS = ["dapo", "gspo", "cppo", "greso", "fastrl", "fastrl_dapo", "fastrl_gspo"]


def _row(table: pd.DataFrame, dataset: str, model: str, method: str, metric: str) -> pd.Series | None:
    hit = table[(table.source == "measured") & (table.dataset == dataset) & (table.model == model)
                & (table.method == method) & (table.metric == metric)]
    return None if hit.empty else hit.iloc[0]


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def _interval(r: pd.Series, fmt: str) -> str:
    return f"[{fmt.format(r.ci95_low)}, {fmt.format(r.ci95_high)}]".replace("-", "−")


def _method_cell(table: pd.DataFrame, ds: str, model: str, method: str) -> str:
    speed = _row(table, ds, model, method, "speedup_cpu_vs_grpo_ci95")
    acc = _row(table, ds, model, method, "d_avg_acc_vs_grpo")
    if speed is None or acc is None:
        return "—"
    text = f"{speed.value:.2f}× {_interval(speed, '{:.2f}')}"
    text = f"**{text}**" if method == "fastrl" else text
    return f"{text}; {_signed(acc.value)} {_interval(acc, '{:+.1f}')}"


def _ars_moves(records: list[dict], dataset: str, model: str) -> str:
    runs = [r for r in records if (r["dataset"], r["model"], r["variant"]) == (dataset, model, "fastrl")]
    if not runs:
        return "—"
    changes = []
    for r in runs:
        ns = [s["rollout/n"] for s in r["steps"] if "rollout/n" in s]
        changes.append(sum(a != b for a, b in zip(ns, ns[1:])))
    return f"{sum(c > 0 for c in changes)} of {len(runs)} runs; {sum(changes)} changes"


def render() -> str:
    table = pd.read_csv(GENERATED / "table1.csv")
    records = [json.loads(line) for line in (GENERATED / "run_metadata" / "table1.jsonl").read_text().splitlines()]
    done = [s for s in SETTINGS if _row(table, s[0], s[1], "grpo", "avg_acc") is not None]
    head = "| {} | " + " | ".join(s[4] for s in done) + " |"
    rule = "|---|" + "---|" * len(done)
    lines = [head.format("method"), rule]
    grpo = [_row(table, s[0], s[1], "grpo", "avg_acc") for s in done]
    lines.append("| grpo (avg acc) | " + " | ".join(f"{r.value:.1f} % ({int(r.n_seeds)})" for r in grpo) + " |")
    for method in METHODS:
        name = f"**{method}**" if method == "fastrl" else method
        lines.append(f"| {name} | " + " | ".join(_method_cell(table, s[0], s[1], method) for s in done) + " |")
    lines += ["", head.format("row"), rule]
    cells = []
    for ds, model, *_ in done:
        before, after = (_row(table, ds, model, "grpo", m) for m in ("acc_before", "in_domain_acc"))
        gain = _row(table, ds, model, "grpo", "in_domain_gain")
        cells.append(f"{before.value:.1f} % → {after.value:.1f} %; {_signed(gain.value)} {_interval(gain, '{:+.1f}')}")
    lines.append("| GRPO in-domain: warm start → after; gain [95 % CI] | " + " | ".join(cells) + " |")
    lines.append("| FastRL: runs where ARS moved n; changes in all | "
                 + " | ".join(_ars_moves(records, s[2], s[3]) for s in done) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the block instead of rewriting README.md")
    args = parser.parse_args()
    block = render()
    if args.print:
        print(block)
        return 0
    readme = REPO / "README.md"
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme}: the markers {BEGIN} / {END} around the Table 1 summary are missing")
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    readme.write_text(text[:start] + "\n" + block + "\n" + text[stop:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
