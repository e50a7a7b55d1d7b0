"""Table 1's main result in one picture: per method, the speedup over GRPO against the accuracy
difference from GRPO, both paired by seed with their 95 % Student-t intervals as error bars on both
axes, one panel per setting (dataset x model). Drawn from a collected ``table1.csv`` (its
``speedup_cpu_vs_grpo_ci95`` and ``d_avg_acc_vs_grpo`` rows), so no run logs are needed:

    python -m experiments.figures.speedup_accuracy paper_figures/generated/mini/table1.csv

``make figures`` (and ``python -m experiments.run figures --collect-only``) writes it as
``<scale dir>/table1_speedup_vs_accuracy.png`` whenever that scale's ``table1.csv`` exists.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

FIGURE_NAME = "table1_speedup_vs_accuracy.png"
SPEEDUP_METRIC = "speedup_cpu_vs_grpo_ci95"  # CPU time: on a shared machine wall-clock moves with a neighbour's load
ACCURACY_METRIC = "d_avg_acc_vs_grpo"  # average of in-domain and OOD accuracy, method minus GRPO, points
REFERENCE = "grpo"


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class MethodPoint:
    method: str
    speedup: Interval
    d_accuracy: Interval


Setting = tuple[str, str]  # (dataset, model) as table1.csv titles them


def _interval(row: Mapping[str, str]) -> Interval:
    return Interval(float(row["value"]), float(row["ci95_low"]), float(row["ci95_high"]))


def paired_points(rows: Iterable[Mapping[str, str]], speedup_metric: str = SPEEDUP_METRIC,
                  accuracy_metric: str = ACCURACY_METRIC) -> dict[Setting, list[MethodPoint]]:
    """Per setting (in first-seen order), one point per method that has both paired intervals."""
    found: dict[Setting, dict[str, dict[str, Interval]]] = {}
    for r in rows:
        # an interval needs 2 paired seeds: one seed's row says "n/a" (experiments.collect)
        if r["source"] != "measured" or r["metric"] not in (speedup_metric, accuracy_metric) \
                or r["ci95_low"] in ("", "n/a"):
            continue
        found.setdefault((r["dataset"], r["model"]), {}).setdefault(r["method"], {})[r["metric"]] = _interval(r)
    return {setting: [MethodPoint(m, got[speedup_metric], got[accuracy_metric]) for m, got in methods.items()
                      if speedup_metric in got and accuracy_metric in got]
            for setting, methods in found.items()}


def read_rows(table_csv: Path) -> list[dict[str, str]]:
    with Path(table_csv).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def read_points(table_csv: Path) -> dict[Setting, list[MethodPoint]]:
    return paired_points(read_rows(table_csv))


def draw(points: Mapping[Setting, Sequence[MethodPoint]], out_png: Path, *, title: str) -> Path:
    """One panel per setting; every method keeps its colour and marker across panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(points)
    if not settings or not any(points.values()):
        raise ValueError(f"{out_png.name}: no method has both paired intervals ({SPEEDUP_METRIC}, {ACCURACY_METRIC})")
    methods = list(dict.fromkeys(p.method for s in settings for p in points[s]))
    colours = plt.get_cmap("tab10")
    markers = "osD^vP*Xh"
    cols = 2 if len(settings) > 1 else 1
    rows = (len(settings) + cols - 1) // cols
    # one panel (a table re-measured setting by setting) keeps two panels' width: the title and the
    # legend of every method are as wide as for four
    fig, axes = plt.subplots(rows, cols, figsize=(12.4 if cols == 1 else 6.2 * cols, 4.6 * rows), squeeze=False)
    for ax, setting in zip(axes.flat, settings):
        ax.axvline(1.0, color="0.6", lw=0.8, ls="--")
        ax.axhline(0.0, color="0.6", lw=0.8, ls="--")
        for p in points[setting]:
            i = methods.index(p.method)
            ax.errorbar(p.speedup.value, p.d_accuracy.value,
                        xerr=[[p.speedup.value - p.speedup.low], [p.speedup.high - p.speedup.value]],
                        yerr=[[p.d_accuracy.value - p.d_accuracy.low], [p.d_accuracy.high - p.d_accuracy.value]],
                        fmt=markers[i % len(markers)], color=colours(i % 10), ms=7, capsize=3, lw=1.1,
                        label=p.method)
        ax.set_title(" · ".join(setting), fontsize=10)
        ax.set_xlabel("speedup vs GRPO (CPU time, ×)")
        ax.set_ylabel("accuracy − GRPO's (points)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(methods), 8), fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=11, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def write_figure(table_csv: Path, out_png: Path) -> Path:
    """``table_csv`` (a collected Table 1) -> ``out_png``."""
    rows = read_rows(table_csv)
    scales = sorted({r.get("scale") or "" for r in rows if r["source"] == "measured"} - {""})
    at = f" at scale {', '.join(scales)}" if scales else ""
    stand_ins = " (tiny stand-ins of the named models)" if set(scales) & {"mini", "smoke"} else ""
    return draw(paired_points(rows), Path(out_png),
                title=f"Table 1{at}{stand_ins}: each method minus GRPO, paired by seed, "
                      "95 % intervals on both axes; dashed lines: GRPO")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table_csv", type=Path)
    ap.add_argument("--out", type=Path, default=None, help=f"default: {FIGURE_NAME} beside the CSV")
    args = ap.parse_args(argv)
    print("wrote", write_figure(args.table_csv, args.out or args.table_csv.parent / FIGURE_NAME))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
