"""Paired CPU-time speedup of one variant over another, from committed run metadata.

The tables pair every method with their ``paired_refs`` only; this answers the other pairs the
docs cite (FastRL over FastRL-without-ARS, MDAP over random pruning) from the same records:

    python dev/paired_speedup.py paper_figures/generated/mini/run_metadata/table2.jsonl fastrl fastrl_no_ars

Per setting: mean over shared seeds of ``other.train_cpu_s / variant.train_cpu_s`` with its 95 %
Student-t interval (``experiments.stats.t_interval``).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.stats import paired_values, t_interval


def cpu_seconds(records: list[dict], setting: str, variant: str) -> dict[int, float]:
    return {int(r["seed"]): float(r["summary"]["train_cpu_s"]) for r in records
            if f"{r['dataset']}-{r['model']}" == setting and r["variant"] == variant}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("metadata", type=Path)
    p.add_argument("variant", help="the method whose speedup is reported")
    p.add_argument("other", help="the method it is paired against, seed by seed")
    args = p.parse_args()
    records = [json.loads(line) for line in args.metadata.read_text().splitlines() if line.strip()]
    for setting in sorted({f"{r['dataset']}-{r['model']}" for r in records}):
        ratios = paired_values(cpu_seconds(records, setting, args.variant),
                               cpu_seconds(records, setting, args.other), ratio=True)
        if len(ratios) < 2:
            continue
        iv = t_interval(list(ratios.values()))
        print(f"{setting}: {args.variant} over {args.other}: {iv.mean:.2f}x [{iv.low:.2f}, {iv.high:.2f}] "
              f"CPU time, seeds {sorted(ratios)}")


if __name__ == "__main__":
    main()
