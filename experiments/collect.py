"""Collectors: run logs -> ``paper_figures/generated/<scale>/<target>.csv`` and ``.md``.

Every generated file is keyed by scale (``generated_dir``): a run at one scale never overwrites
another scale's tables, figures or run metadata. Only ``generated/mini/`` is committed (the scale
the README cites); ``generated/smoke/`` and ``generated/paper/`` are git-ignored.

Every output row is one (source, method, dataset, model, metric) cell in long format:

- ``source = paper``: a number from ``paper_figures/paper_numbers.csv`` (and nothing else);
- ``source = measured``: mean and sample std over the seeds that finished, with the seeds, the
  scale, the stand-ins used and the run directories;
- paired rows (``source = measured``; ``paired_rows``): per seed, the method against the baseline
  trained with the same seed -- ``d_<metric>_vs_<ref>`` (method − ref, in points) and
  ``speedup_vs_<ref>_ci95`` (ref time / method time) -- with a 95 % Student-t interval in
  ``ci95_low`` / ``ci95_high`` ("n/a" with fewer than 2 paired seeds; see experiments.stats);
- the token bound (``bound_rows``): ``bound_s``, what the method would take if every stage of the
  baseline's same-seed run scaled with the tokens it processes, and ``bound_efficiency`` =
  bound_s / measured time with its paired interval (1 = as fast as its token counts allow).

The markdown pivots the same rows into one table per target, paper and measured rows side by
side; a cell the paper does not give is "—" and the legend says so.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from experiments.logs import RunSummary, is_finished, summarize
from experiments.spec import SCALES, RunSpec
from experiments.stats import NA, paired_values, t_interval
from fastrl.training.token_bound import GENERATED_STAGES, TRAINED_STAGES, token_bound

if TYPE_CHECKING:
    from experiments.export import RunSummaries

REPO_ROOT = Path(__file__).resolve().parent.parent
PAPER_NUMBERS = REPO_ROOT / "paper_figures" / "paper_numbers.csv"
# Root of everything `make <target>` writes; the files themselves go to GENERATED_ROOT/<scale>/.
GENERATED_ROOT = REPO_ROOT / "paper_figures" / "generated"
COMMITTED_SCALE = "mini"  # the scale whose generated files are committed and cited by the READMEs
PAPER_COLUMNS = ("table", "dataset", "model", "method", "metric", "value", "unit", "note")
COLUMNS = ("target", "source", "method", "dataset", "model", "metric", "value", "std", "ci95_low", "ci95_high",
           "unit", "n_seeds", "seeds", "scale", "data_used", "model_used", "run_dirs", "note")
MISSING = "—"  # a cell the paper does not give (docs/paper.md has no number for it)
# Accuracy-like metrics (in %) compared per seed against a reference method: d_<metric>_vs_<ref>.
PAIRED_METRICS: tuple[str, ...] = ("in_domain_acc", "ood_avg", "avg_acc", "avg_at_16", "pass_at_16", "peak_acc",
                                   "final_acc")


def generated_dir(scale: str, root: Path | None = None) -> Path:
    """Where a target run at ``scale`` writes its tables, figures and run metadata:
    ``<root>/<scale>/`` (root: ``paper_figures/generated``)."""
    if scale not in SCALES:
        raise ValueError(f"scale {scale!r}: choose one of {SCALES}")
    return (GENERATED_ROOT if root is None else Path(root)) / scale

# metric -> unit of the measured value
UNITS: dict[str, str] = {
    "in_domain_acc": "%", "ood_avg": "%", "avg_acc": "%", "acc_before": "%", "aime_avg": "%",
    "train_time_s": "s", "train_cpu_s": "s", "speedup_vs_grpo": "x", "kept_fraction": "", "mean_n": "count",
    "n_changes": "count", "in_domain_gain": "points",
    "tokens_generated": "tokens", "tokens_trained": "tokens", "avg_acc_gain": "%",
    "avg_acc_delta_vs_fastrl": "%", "step_time_s": "s", "avg_at_16": "%", "pass_at_16": "%",
    "avg_at_16_gain_vs_grpo": "points", "peak_acc": "%", "final_acc": "%",
    "bound_s": "s", "bound_cpu_s": "s", "bound_efficiency": "ratio", "bound_cpu_efficiency": "ratio",
}


def unit_of(metric: str) -> str:
    if metric in UNITS:
        return UNITS[metric]
    if metric.startswith("d_"):
        return "points"
    if metric.startswith("speedup_") and metric.endswith("_ci95"):
        return "x"
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
    # paired rows: the 95 % t-interval of the mean (NA with fewer than 2 paired seeds); else None
    ci95_low: float | str | None = None
    ci95_high: float | str | None = None
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
        for k in ("value", "std", "ci95_low", "ci95_high"):
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


def gather(specs: Iterable[RunSpec], records: "RunSummaries | None" = None) -> dict[tuple[str, str, str], Cell]:
    """Group specs by (dataset, model, variant) and summarise the finished runs.

    ``records``: summaries from committed run metadata (``experiments.export.load_records``)
    instead of the run directories -- for ``--from-metadata``, where ``runs/`` is not there.
    """
    cells: dict[tuple[str, str, str], Cell] = {}
    for s in specs:
        cell = cells.setdefault((s.dataset, s.model, s.variant), Cell([], {}))
        cell.specs.append(s)
        if records is not None:
            summary = records.summary(s)
            if summary is not None:
                cell.summaries[s.seed] = summary
        elif is_finished(s.run_dir):
            cell.summaries[s.seed] = summarize(s.run_dir)
    return cells


def run_metrics(s: RunSummary) -> dict[str, float]:
    """Per-run metrics of the grid tables (accuracies in %)."""
    m = {
        "in_domain_acc": 100.0 * s.acc_after,
        "avg_acc": 100.0 * s.avg_acc,
        "train_time_s": s.train_time_s,
        **({"train_cpu_s": s.train_cpu_s} if s.train_cpu_s == s.train_cpu_s else {}),
        "kept_fraction": s.kept_fraction,
        "mean_n": s.mean_n,
        **({"n_changes": s.n_changes} if s.n_changes == s.n_changes else {}),
        "tokens_generated": s.tokens_generated,
        "tokens_trained": s.tokens_trained,
    }
    if s.acc_before is not None:
        m["acc_before"] = 100.0 * s.acc_before
    if s.ood:
        m["ood_avg"] = 100.0 * float(s.ood_avg)  # type: ignore[arg-type]
        m.update({f"ood/{k}": 100.0 * v for k, v in s.ood.items()})
    return m


def bound_rows(target: str, cell: Cell, ref_cell: Cell, *, ref: str) -> list[Row]:
    """``bound_s`` (mean ± std) and ``bound_efficiency`` = bound_s / training time (mean [95 %
    t-interval]) of ``cell`` against the same-seed runs of ``ref_cell`` (``token_bound`` of the
    reference's stage times, fastrl.training.token_bound); the ``_cpu`` pair from CPU seconds
    where both runs logged them per stage (``cpu_s/<stage>``)."""
    rows: list[Row] = []
    common = sorted(set(cell.summaries) & set(ref_cell.summaries))
    measures = (("timing", "train_time_s", "bound_s", "bound_efficiency", "wall-clock seconds"),
                ("cpu", "train_cpu_s", "bound_cpu_s", "bound_cpu_efficiency", "CPU seconds"))
    for stages_attr, total_attr, bound_name, eff_name, what in measures:
        bounds: dict[int, float] = {}
        eff: dict[int, float] = {}
        for k in common:
            mine, theirs = cell.summaries[k], ref_cell.summaries[k]
            stages = getattr(theirs, stages_attr)
            if "step" not in stages or not getattr(mine, stages_attr):
                continue
            bounds[k] = token_bound(stages, (theirs.tokens_generated, theirs.tokens_trained),
                                    (mine.tokens_generated, mine.tokens_trained))
            eff[k] = bounds[k] / float(getattr(mine, total_attr))
        if not bounds:
            continue
        note = (f"{ref}'s {what} per stage, scaled by this run's tokens generated ({', '.join(GENERATED_STAGES)}) "
                f"and trained ({', '.join(TRAINED_STAGES)}), paired by seed")
        rows.append(measured_row(target, cell, bound_name, bounds, note=note,
                                 missing="not paired (this run or the reference's did not finish)"))
        rows.append(_interval_row(target, cell, eff_name, eff,
                                  note=f"{bound_name} / this run's {what} per seed, seeds {sorted(eff)}; "
                                       f"mean [95 % t-interval, df = {len(eff) - 1}]; 1 = at the token bound"))
    return rows


def measured_row(target: str, cell: Cell, metric: str, values: dict[int, float], note: str = "",
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
    paired_refs: Sequence[str] | None = None,
    records: "RunSummaries | None" = None,
) -> list[Row]:
    """Measured rows of a grid table: per (setting, variant), each metric's mean ± std over seeds.

    ``speedup_vs_<baseline>``: per seed, baseline training time / this variant's training time
    (both the sum of timing_s/step), over the seeds both finished. ``extra(cell)`` adds
    per-seed metrics (e.g. eval results). Paired rows (``paired_rows``) against each of
    ``paired_refs`` (default: the baseline); the speedup interval only against the baseline.
    """
    rename = rename or {}
    refs = list(paired_refs) if paired_refs is not None else ([baseline] if baseline else [])
    cells = gather(specs, records)
    per_cell: dict[tuple[str, str, str], dict[int, dict[str, float]]] = {}
    for key, cell in cells.items():
        per_seed = {seed: run_metrics(s) for seed, s in cell.summaries.items()}
        if extra is not None and cell.summaries:
            for seed, m in extra(cell).items():
                per_seed.setdefault(seed, {}).update(m)
        per_cell[key] = per_seed
    rows: list[Row] = []
    for (ds, md, variant), cell in cells.items():
        if not cell.summaries:
            continue
        per_seed = per_cell[(ds, md, variant)]
        metrics = sorted({k for m in per_seed.values() for k in m})
        for metric in metrics:
            vals = {seed: m[metric] for seed, m in per_seed.items() if metric in m}
            rows.append(measured_row(target, cell, rename.get(metric, metric), vals))
        rows += gain_rows(target, cell, per_seed)
        if baseline is not None and (ds, md, baseline) in cells:
            base = cells[(ds, md, baseline)].summaries
            common = sorted(set(base) & set(cell.summaries))
            if common:
                ratios = {k: base[k].train_time_s / cell.summaries[k].train_time_s for k in common}
                rows.append(measured_row(target, cell, f"speedup_vs_{baseline}", ratios,
                                      note=f"{baseline} time / this time, paired by seed"))
                if variant != baseline:
                    rows += bound_rows(target, cell, cells[(ds, md, baseline)], ref=baseline)
        for ref in refs:
            if ref == variant or (ds, md, ref) not in cells or not cells[(ds, md, ref)].summaries:
                continue
            rows += paired_rows(target, cell, per_seed, per_cell[(ds, md, ref)], ref=ref, rename=rename,
                                speedup=ref == baseline)
    return rows


def gain_rows(target: str, cell: Cell, per_seed: dict[int, dict[str, float]]) -> list[Row]:
    """``in_domain_gain``: what RL moved in-domain, in_domain_acc - acc_before per seed (the warm
    start's accuracy at the run's own sampling), mean [95 % t-interval]: whether a slot has room to
    learn (DESIGN §8) is whether GRPO's interval excludes 0. No row where a run lacks acc_before."""
    gains = {k: m["in_domain_acc"] - m["acc_before"] for k, m in per_seed.items()
             if "in_domain_acc" in m and "acc_before" in m}
    if not gains:
        return []
    return [_interval_row(target, cell, "in_domain_gain", gains,
                          note=f"in_domain_acc - acc_before per seed, seeds {sorted(gains)}; "
                               f"mean [95 % t-interval, df = {len(gains) - 1}]")]


def _interval_row(target: str, cell: Cell, metric: str, values: dict[int, float], note: str) -> Row:
    """A paired row: mean of the per-seed values with its 95 % t-interval (NA when n < 2)."""
    iv = t_interval([values[k] for k in sorted(values)])
    row = measured_row(target, cell, metric, values, note=note, missing="not paired (this run or the reference's did not finish)")
    row.value, row.std = iv.mean, iv.std
    row.ci95_low, row.ci95_high = (iv.low, iv.high) if iv.defined else (NA, NA)
    return row


def paired_rows(
    target: str,
    cell: Cell,
    per_seed: dict[int, dict[str, float]],
    ref_per_seed: dict[int, dict[str, float]],
    *,
    ref: str,
    rename: dict[str, str] | None = None,
    speedup: bool = True,
    metrics: Sequence[str] = PAIRED_METRICS,
    time_metric: str = "train_time_s",
) -> list[Row]:
    """This cell against the reference method ``ref`` of the same setting, seed by seed.

    - ``d_<metric>_vs_<ref>`` for each accuracy metric both have: mean over the seeds both
      finished of (this − ref), in points, with its 95 % Student-t interval (df = n − 1);
    - ``speedup_vs_<ref>_ci95`` (``speedup``): mean of the per-seed ratios ref time / this time,
      the same value as ``speedup_vs_<ref>``, with its 95 % t-interval.
    An interval needs n >= 2 paired seeds; below that ci95_low/high are "n/a".
    """
    rename = rename or {}
    rows: list[Row] = []
    for metric in metrics:
        mine = {k: m[metric] for k, m in per_seed.items() if metric in m}
        theirs = {k: m[metric] for k, m in ref_per_seed.items() if metric in m}
        diffs = paired_values(mine, theirs)
        if diffs:
            name = rename.get(metric, metric)
            rows.append(_interval_row(target, cell, f"d_{name}_vs_{ref}", diffs,
                                      note=f"{name}(this) - {name}({ref}) per seed, seeds {sorted(diffs)}; "
                                           f"mean [95 % t-interval, df = {len(diffs) - 1}]"))
    if speedup:
        for metric, name, what in ((time_metric, f"speedup_vs_{ref}_ci95", "time"),
                                   ("train_cpu_s", f"speedup_cpu_vs_{ref}_ci95", "CPU seconds")):
            mine = {k: m[metric] for k, m in per_seed.items() if metric in m}
            theirs = {k: m[metric] for k, m in ref_per_seed.items() if metric in m}
            ratios = paired_values(mine, theirs, ratio=True)
            if ratios:
                rows.append(_interval_row(target, cell, name, ratios,
                                          note=f"{ref} {what} / this {what} per seed, seeds {sorted(ratios)}; "
                                               f"mean [95 % t-interval, df = {len(ratios) - 1}]; no effect = 1"))
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


def _signed(v: float, digits: int, sign: bool) -> str:
    v = round(v, digits) + 0.0  # no "-0.0" for a value that rounds to zero
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def fmt_interval(value: Any, low: Any, high: Any, unit: str = "") -> str:
    """A paired cell: ``-1.2 [-3.4, +1.0]`` (differences, in points) or ``2.95 [2.66, 3.24]x``
    (speedups); ``[n/a]`` when there is no interval (fewer than 2 paired seeds)."""
    if value is None or value == "":
        return MISSING
    ratio = unit in ("x", "ratio")
    digits, sign = (2, False) if ratio else (1, True)
    s = _signed(float(value), digits, sign)
    if low in (None, "", NA) or high in (None, "", NA):
        s += f" [{NA}]"
    else:
        s += f" [{_signed(float(low), digits, sign)}, {_signed(float(high), digits, sign)}]"
    return s + ("x" if unit == "x" else "")


def cell_text(r: Row) -> str:
    """How one row shows in the markdown pivot."""
    if r.ci95_low is not None:
        return fmt_interval(r.value, r.ci95_low, r.ci95_high, r.unit)
    return fmt(r.value, r.std, r.unit)


PAIRED_LEGEND = (
    "`d_<metric>_vs_<ref>`: mean over seeds of (method − ref) with both trained on the same seed, in points, "
    "[95 % Student-t interval, df = paired seeds − 1]; `speedup_vs_<ref>_ci95`: mean of the per-seed ratios "
    "ref training time / method training time [95 % t-interval]; n/a: fewer than 2 paired seeds. "
    "A claim is *supported* only where the interval excludes 0 (1 for a speedup) in the paper's direction "
    "(`experiments.stats.verdict`).")
BOUND_LEGEND = (
    "`bound_s`: the method's training time if every stage of the baseline's same-seed run scaled with the tokens "
    "it processes (generation, reward, advantages and pruning with the tokens generated; log-prob passes, update "
    "and weight sync with the tokens trained; the untimed rest as it is), mean ± std over seeds; "
    "`bound_efficiency` = bound_s / measured training time per seed, mean [95 % t-interval]: 1 = as fast as the "
    "token counts allow (`bound_cpu_*`: the same in CPU seconds, where the runs logged them per stage).")


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
    head = ["dataset", "model", "method", "source", *[f"{m} ({units[m]})" if units[m] not in ("", "x", "ratio") else m
                                                     for m in shown]]
    lines = [f"# {title}", ""]
    if preamble:
        lines += [preamble, ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in keys:
        c = cells[k]
        vals = [cell_text(c[m]) if m in c else MISSING for m in shown]
        lines.append("| " + " | ".join([k[0] or MISSING, k[1] or MISSING, k[2] or MISSING, k[3], *vals]) + " |")
    measured = [r for r in rows if r.source == "measured"]
    lines += ["", f"{MISSING}: no number (the paper's rows: docs/paper.md does not give it; measured rows: not measured "
              "or not finished). Measured cells are mean ± sample std over seeds.", ""]
    if any(r.ci95_low is not None for r in rows if r.metric in shown):
        lines += [PAIRED_LEGEND, ""]
    if any(m.startswith("bound_") for m in shown):
        lines += [BOUND_LEGEND, ""]
    if measured:
        scales = sorted({r.scale for r in measured})
        # rows carry their seeds as "1 2 3"; list the union, not each row's string
        seeds = sorted({int(k) for r in measured for k in str(r.seeds).split() if k.lstrip("-").isdigit()})
        lines.append(f"Measured at scale {', '.join(scales)}; seeds {', '.join(map(str, seeds))}. Stand-ins:")
        # per-setting rows only: a per-dataset summary row (no model) would list some run's model
        for dm in sorted({(r.dataset, r.data_used, r.model, r.model_used) for r in measured if r.model}):
            lines.append(f"- {dm[0]} → {dm[1]}; {dm[2]} → {dm[3]}")
    else:
        lines.append("No measured rows yet: run the target (see experiments/README.md).")
    notes = sorted({f"{r.method} {r.metric}: {r.note}" for r in rows if r.source == "paper" and r.note})
    if notes:
        lines += ["", "Paper notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def write_outputs(target: str, rows: Sequence[Row], md: str, out_dir: Path) -> tuple[Path, Path]:
    """``<out_dir>/<target>.csv`` and ``.md``; ``out_dir`` is a scale's directory (``generated_dir``)."""
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
