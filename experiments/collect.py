"""Collectors: run logs -> ``paper_figures/generated/<target>.csv`` and ``.md``.

Every output row is one (source, method, dataset, model, metric) cell in long format:

- ``source = paper``: a number from ``paper_figures/paper_numbers.csv`` (and nothing else);
- ``source = measured``: mean and sample std over the seeds that finished, with the seeds, the
  scale, the stand-ins used and the run directories.

The markdown pivots the same rows into one table per target, paper and measured rows side by
side; a cell the paper does not give is "—" and the legend says so.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from experiments.logs import RunSummary, is_finished, summarize
from experiments.spec import RunSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
PAPER_NUMBERS = REPO_ROOT / "paper_figures" / "paper_numbers.csv"
GENERATED_DIR = REPO_ROOT / "paper_figures" / "generated"
PAPER_COLUMNS = ("table", "dataset", "model", "method", "metric", "value", "unit", "note")
COLUMNS = ("target", "source", "method", "dataset", "model", "metric", "value", "std", "unit", "n_seeds",
           "seeds", "scale", "data_used", "model_used", "run_dirs", "note")
MISSING = "—"  # a cell the paper does not give (PAPER.md has no number for it)

# metric -> unit of the measured value
UNITS: dict[str, str] = {
    "in_domain_acc": "%", "ood_avg": "%", "avg_acc": "%", "acc_before": "%", "aime_avg": "%",
    "train_time_s": "s", "speedup_vs_grpo": "x", "kept_fraction": "", "mean_n": "count",
    "tokens_generated": "tokens", "tokens_trained": "tokens", "avg_acc_gain": "%",
    "avg_acc_delta_vs_fastrl": "%", "step_time_s": "s", "avg_at_16": "%", "pass_at_16": "%",
    "avg_at_16_gain_vs_grpo": "points", "peak_acc": "%", "final_acc": "%",
}


def unit_of(metric: str) -> str:
    if metric in UNITS:
        return UNITS[metric]
    if metric.startswith(("ood/", "avg@", "pass@")):
        return "%"
    return ""


@dataclass
class Row:
    target: str
    source: str  # paper | measured
    method: str
    dataset: str
    model: str
    metric: str
    value: float | str
    std: float | None = None
    unit: str = ""
    n_seeds: int | None = None
    seeds: str = ""
    scale: str = ""
    data_used: str = ""
    model_used: str = ""
    run_dirs: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = {c: getattr(self, c) for c in COLUMNS}
        for k in ("value", "std"):
            v = d[k]
            d[k] = "" if v is None or (isinstance(v, float) and math.isnan(v)) else v
        d["n_seeds"] = "" if self.n_seeds is None else self.n_seeds
        return d


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof = 1; None for a single value)."""
    arr = np.asarray([float(v) for v in values], dtype=float)
    if arr.size == 0:
        raise ValueError("mean_std: no values")
    return float(arr.mean()), (float(arr.std(ddof=1)) if arr.size > 1 else None)


# ------------------------------------------------------------------------------------------- paper
def read_paper_numbers(path: Path = PAPER_NUMBERS) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != PAPER_COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {list(PAPER_COLUMNS)}")
        rows = list(reader)
    for i, r in enumerate(rows, start=2):
        try:
            float(r["value"])
        except ValueError:
            raise ValueError(f"{path}:{i}: value {r['value']!r} is not a number") from None
    return rows


def paper_rows(target: str, paper_table: str, path: Path = PAPER_NUMBERS) -> list[Row]:
    """The paper's numbers for ``paper_table`` as output rows (source = paper)."""
    return [
        Row(target=target, source="paper", method=r["method"], dataset=r["dataset"], model=r["model"],
            metric=r["metric"], value=float(r["value"]), unit=r["unit"], note=r["note"])
        for r in read_paper_numbers(path) if r["table"] == paper_table
    ]


# ---------------------------------------------------------------------------------------- measured
@dataclass
class Cell:
    """The runs of one (setting, variant) over seeds."""

    specs: list[RunSpec]
    summaries: dict[int, RunSummary]  # seed -> summary of finished runs

    @property
    def first(self) -> RunSpec:
        return self.specs[0]

    def finished_seeds(self) -> list[int]:
        return sorted(self.summaries)


def gather(specs: Iterable[RunSpec]) -> dict[tuple[str, str, str], Cell]:
    """Group specs by (dataset, model, variant) and summarise the finished runs."""
    cells: dict[tuple[str, str, str], Cell] = {}
    for s in specs:
        cell = cells.setdefault((s.dataset, s.model, s.variant), Cell([], {}))
        cell.specs.append(s)
        if is_finished(s.run_dir):
            cell.summaries[s.seed] = summarize(s.run_dir)
    return cells


def run_metrics(s: RunSummary) -> dict[str, float]:
    """Per-run metrics of the grid tables (accuracies in %)."""
    m = {
        "in_domain_acc": 100.0 * s.acc_after,
        "avg_acc": 100.0 * s.avg_acc,
        "train_time_s": s.train_time_s,
        "kept_fraction": s.kept_fraction,
        "mean_n": s.mean_n,
        "tokens_generated": s.tokens_generated,
        "tokens_trained": s.tokens_trained,
    }
    if s.acc_before is not None:
        m["acc_before"] = 100.0 * s.acc_before
    if s.ood:
        m["ood_avg"] = 100.0 * float(s.ood_avg)  # type: ignore[arg-type]
        m.update({f"ood/{k}": 100.0 * v for k, v in s.ood.items()})
    return m


def _measured(target: str, cell: Cell, metric: str, values: dict[int, float], note: str = "",
              missing: str = "not finished") -> Row:
    """A measured row: mean ± std of ``values`` over seeds; seeds of the cell without a value are
    named in the note with ``missing`` as the reason."""
    seeds = sorted(values)
    mean, std = mean_std([values[k] for k in seeds])
    f = cell.first
    unit = unit_of(metric)
    absent = sorted(set(s.seed for s in cell.specs) - set(seeds))
    if absent:
        note = (note + "; " if note else "") + f"seeds {absent} {missing}"
    return Row(
        target=target, source="measured", method=f.variant, dataset=f.labels["dataset_title"],
        model=f.labels["model_title"], metric=metric, value=mean, std=std, unit=unit, n_seeds=len(seeds),
        seeds=" ".join(map(str, seeds)), scale=f.scale, data_used=f.labels["data_used"],
        model_used=f.labels["model_used"],
        run_dirs=" ".join(str(cell.summaries[k].run_dir) for k in seeds if k in cell.summaries), note=note,
    )


def grid_rows(
    target: str,
    specs: Sequence[RunSpec],
    *,
    baseline: str | None,
    rename: dict[str, str] | None = None,
    extra: Callable[[Cell], dict[int, dict[str, float]]] | None = None,
) -> list[Row]:
    """Measured rows of a grid table: per (setting, variant), each metric's mean ± std over seeds.

    ``speedup_vs_<baseline>``: per seed, baseline training time / this variant's training time
    (both the sum of timing_s/step), over the seeds both finished. ``extra(cell)`` adds
    per-seed metrics (e.g. eval results).
    """
    rename = rename or {}
    cells = gather(specs)
    rows: list[Row] = []
    for (ds, md, variant), cell in cells.items():
        if not cell.summaries:
            continue
        per_seed = {seed: run_metrics(s) for seed, s in cell.summaries.items()}
        if extra is not None:
            for seed, m in extra(cell).items():
                per_seed.setdefault(seed, {}).update(m)
        metrics = sorted({k for m in per_seed.values() for k in m})
        for metric in metrics:
            vals = {seed: m[metric] for seed, m in per_seed.items() if metric in m}
            rows.append(_measured(target, cell, rename.get(metric, metric), vals))
        if baseline is not None and (ds, md, baseline) in cells:
            base = cells[(ds, md, baseline)].summaries
            common = sorted(set(base) & set(cell.summaries))
            if common:
                ratios = {k: base[k].train_time_s / cell.summaries[k].train_time_s for k in common}
                rows.append(_measured(target, cell, f"speedup_vs_{baseline}", ratios,
                                      note=f"{baseline} time / this time, paired by seed"))
    return rows


def delta_rows(rows: Sequence[Row], *, metric: str, reference: str, name: str, methods: Sequence[str] | None = None) -> list[Row]:
    """``name`` = metric(method) - metric(reference) per (dataset, model), from measured rows.

    The std is sqrt(std_a^2 + std_b^2) (independent seeds); a difference of means, not paired.
    """
    out: list[Row] = []
    by_key = {(r.dataset, r.model, r.method): r for r in rows if r.source == "measured" and r.metric == metric}
    for (ds, md, method), r in by_key.items():
        ref = by_key.get((ds, md, reference))
        if ref is None or method == reference or (methods is not None and method not in methods):
            continue
        std = None
        if r.std is not None and ref.std is not None:
            std = math.sqrt(r.std ** 2 + ref.std ** 2)
        out.append(Row(target=r.target, source="measured", method=method, dataset=ds, model=md, metric=name,
                       value=float(r.value) - float(ref.value), std=std, unit=r.unit, n_seeds=r.n_seeds,
                       seeds=r.seeds, scale=r.scale, data_used=r.data_used, model_used=r.model_used,
                       run_dirs=r.run_dirs, note=f"{metric}({method}) - {metric}({reference})"))
    return out


# ------------------------------------------------------------------------------------------ output
def fmt(value: Any, std: Any = None, unit: str = "") -> str:
    if value is None or value == "":
        return MISSING
    v = float(value)
    has_std = std is not None and std != "" and not (isinstance(std, float) and math.isnan(std))
    if v.is_integer() and not has_std and abs(v) >= 1:
        return f"{v:.0f}" + ("x" if unit == "x" else "")
    digits = 3 if abs(v) < 10 else 2 if abs(v) < 1000 else 0
    s = f"{v:.{digits}f}"
    if has_std:
        s += f" ± {float(std):.{digits}f}"
    return s + ("x" if unit == "x" else "")


def markdown(title: str, rows: Sequence[Row], metrics: Sequence[str], *, preamble: str = "") -> str:
    """One pivot table: a line per (dataset, model, method, source), a column per metric."""
    keys: list[tuple[str, str, str, str]] = []
    cells: dict[tuple[str, str, str, str], dict[str, Row]] = {}
    for r in rows:
        k = (r.dataset, r.model, r.method, r.source)
        if k not in cells:
            keys.append(k)
            cells[k] = {}
        cells[k][r.metric] = r
    shown = [m for m in metrics if any(m in c for c in cells.values())]
    order = {"paper": 0, "measured": 1}
    keys.sort(key=lambda k: (k[0], k[1], k[2], order[k[3]]))
    units = {m: next((c[m].unit for c in cells.values() if m in c), "") for m in shown}
    head = ["dataset", "model", "method", "source", *[f"{m} ({units[m]})" if units[m] not in ("", "x") else m
                                                     for m in shown]]
    lines = [f"# {title}", ""]
    if preamble:
        lines += [preamble, ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in keys:
        c = cells[k]
        vals = [fmt(c[m].value, c[m].std, c[m].unit) if m in c else MISSING for m in shown]
        lines.append("| " + " | ".join([k[0] or MISSING, k[1] or MISSING, k[2] or MISSING, k[3], *vals]) + " |")
    measured = [r for r in rows if r.source == "measured"]
    lines += ["", f"{MISSING}: no number (the paper's rows: PAPER.md does not give it; measured rows: not measured "
              "or not finished). Measured cells are mean ± sample std over seeds.", ""]
    if measured:
        scales = sorted({r.scale for r in measured})
        # rows carry their seeds as "1 2 3"; list the union, not each row's string
        seeds = sorted({int(k) for r in measured for k in str(r.seeds).split() if k.lstrip("-").isdigit()})
        lines.append(f"Measured at scale {', '.join(scales)}; seeds {', '.join(map(str, seeds))}. Stand-ins:")
        for dm in sorted({(r.dataset, r.data_used, r.model, r.model_used) for r in measured}):
            lines.append(f"- {dm[0]} → {dm[1]}; {dm[2]} → {dm[3]}")
    else:
        lines.append("No measured rows yet: run the target (see experiments/README.md).")
    notes = sorted({f"{r.method} {r.metric}: {r.note}" for r in rows if r.source == "paper" and r.note})
    if notes:
        lines += ["", "Paper notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def write_outputs(target: str, rows: Sequence[Row], md: str, out_dir: Path = GENERATED_DIR) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{target}.csv", out_dir / f"{target}.md"
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r.as_dict())
    md_path.write_text(md)
    return csv_path, md_path


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))
