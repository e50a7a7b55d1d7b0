"""Figs. 6-7: low (4 updates/step) and high (16 updates/step) policy lag.

Per run: mean step time, training time, peak and final validation accuracy, tokens generated and
trained, policy entropy (first / last / max over steps), and against GRPO at the same lag (paired
by seed): the training-time speedup, the wall-clock speedup *to GRPO's peak accuracy* (GRPO's
time to its own peak / this method's first time at or above that accuracy; empty when it never
gets there) -- the paper's "2.9x at comparable peak accuracy" -- and the token bound
(``collect.bound_rows``: bound_s, bound_efficiency).
"""

from __future__ import annotations

import re
from pathlib import Path

from experiments import collect as C
from experiments.grid import Context, lr_header, paired_order, specs_for
from experiments.logs import cumulative_wall, read_metrics, series, val_curve
from experiments.spec import RunSpec, load_table
from fastrl import metric_keys as K

TARGET = "lag"
METRICS = ("step_time_s", "train_time_s", "peak_acc", "final_acc", "speedup_vs_grpo", "speedup_to_grpo_peak",
           "tokens_generated", "tokens_trained", "entropy_first", "entropy_last", "entropy_max", "train_time_h",
           "steps", "updates_per_step", "bound_s", "bound_efficiency", "bound_cpu_s", "bound_cpu_efficiency")


def specs(ctx: Context) -> list[RunSpec]:
    return specs_for(TARGET, ctx, resolve_paper_steps=ctx.scale == "paper")


def time_to_reach(run_dir: Path, level: float) -> float | None:
    """Training seconds until the validation accuracy first reaches ``level`` (None: never)."""
    rows = read_metrics(run_dir)
    wall = cumulative_wall(rows)
    for step, acc in val_curve(rows):
        if acc >= level - 1e-12:
            return wall.get(step, max(wall.values()))
    return None


def run_metrics(run_dir: Path) -> dict[str, float]:
    rows = read_metrics(run_dir)
    _, step_t = series(rows, K.STEP_TIME)
    _, ent = series(rows, K.ACTOR_ENTROPY)
    curve = val_curve(rows)
    accs = [a for _, a in curve]
    _, gen = series(rows, K.TOKENS_GENERATED)
    _, trained = series(rows, K.TOKENS_TRAINED)
    m = {
        "step_time_s": float(step_t.mean()),
        "train_time_s": float(step_t.sum()),
        "peak_acc": 100.0 * max(accs),
        "final_acc": 100.0 * accs[-1],
        "tokens_generated": float(gen.sum()),
        "tokens_trained": float(trained.sum()),
    }
    if ent.size:
        m.update({"entropy_first": float(ent[0]), "entropy_last": float(ent[-1]), "entropy_max": float(ent.max())})
    return m


def baseline_of(variant: str) -> str | None:
    match = re.fullmatch(r"(.+)_lag(\d+)", variant)
    return None if match is None or match.group(1) == "grpo" else f"grpo_lag{match.group(2)}"


def collect(ctx: Context) -> list[Path]:
    table = load_table(TARGET)
    runs = specs_for(TARGET, ctx, resolve_paper_steps=False)
    cells = C.gather(runs)
    per_cell = {key: {seed: run_metrics(s.run_dir) for seed, s in cell.summaries.items()} for key, cell in cells.items()}
    measured: list[C.Row] = []
    for (ds, md, variant), cell in cells.items():
        if not cell.summaries:
            continue
        per_seed = per_cell[(ds, md, variant)]
        for metric in sorted({k for m in per_seed.values() for k in m}):
            measured.append(C.measured_row(TARGET, cell, metric, {k: m[metric] for k, m in per_seed.items() if metric in m}))
        base_name = baseline_of(variant)
        base = cells.get((ds, md, base_name)) if base_name else None
        if base is None:
            continue
        common = sorted(set(base.summaries) & set(cell.summaries))
        speed = {k: base.summaries[k].train_time_s / cell.summaries[k].train_time_s for k in common}
        if speed:
            measured.append(C.measured_row(TARGET, cell, "speedup_vs_grpo", speed, note=f"{base_name} time / this time"))
            measured += C.bound_rows(TARGET, cell, base, ref=base_name)
        to_peak: dict[int, float] = {}
        for k in common:
            b_rows = read_metrics(base.summaries[k].run_dir)
            peak = max(a for _, a in val_curve(b_rows))
            t_base = time_to_reach(base.summaries[k].run_dir, peak)
            t_self = time_to_reach(cell.summaries[k].run_dir, peak)
            if t_base is not None and t_self:
                to_peak[k] = t_base / t_self
        if to_peak:
            measured.append(C.measured_row(TARGET, cell, "speedup_to_grpo_peak", to_peak,
                                        note=f"seeds where it reached {base_name}'s peak accuracy: {sorted(to_peak)}",
                                        missing="did not reach it (or did not finish)"))
        # paired by seed against GRPO at the same lag (named "grpo" so both lags share the columns)
        for row in C.paired_rows(TARGET, cell, per_seed, per_cell[(ds, md, base_name)], ref="grpo"):
            row.note = row.note.replace("(grpo)", f"({base_name})").replace("grpo time", f"{base_name} time")
            measured.append(row)
    rows = C.paper_rows(TARGET, table["paper_table"]) + measured
    md = C.markdown(table["title"], rows, [*METRICS, *paired_order(measured, METRICS)], preamble=lr_header(runs))
    return list(C.write_outputs(TARGET, rows, md, ctx.out_dir))
