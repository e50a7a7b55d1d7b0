"""Replay the released ARS rule offline on a run's logged per-step kept counts.

Why: in the 30-step visual mini runs the released ARS (``rollout_scaler: ars``) almost never
moved n. Whether another ``algorithm.ars.period_steps`` / ``trainer.total_steps`` would make it
act can be read from the logs, without training: the rule sees only, per step, f1 = mean and
f2 = max of the per-question final counts (MDAP's kept plus the refill), and the step's progress
a = step / total_steps. This module feeds those counts, step by step, to the trainer's own
``ReleaseRolloutScaler`` (the rule is not re-implemented here) and reports the n each step would
have used.

Where the counts come from:

- a run directory's ``metrics.jsonl`` (``prune/count_mean``, ``prune/count_max``): exact;
- a committed run-metadata record (``run_metadata/<target>.jsonl``): its steps give f1 exactly
  (``prune/kept`` / ``rollout/num_prompts``: every question keeps its seeds, counted with the
  refill); records written before the export kept ``prune/count_max`` do not give f2, so the
  replay takes f2 = ceil(f1) + d for a stated offset d (``F2_MODELS``), and
  :func:`required_spread` gives the f2-free bound.

What a replay cannot say: once n moves, the real run would generate other counts; a replay is
exact up to the first move and counterfactual after it. Steps beyond the logged ones (a longer
``total_steps``) repeat the logged series from its start (stationary statistics: an assumption,
stated in the output).

    python -m experiments.ars_replay paper_figures/generated/mini/run_metadata/table1.jsonl \\
        --periods 1 2 3 5 --total-steps 30 60 --f2 d0 d1
    python -m experiments.ars_replay runs/ars/seed1   # a run directory: exact f2
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from fastrl import metric_keys as K
from fastrl.algorithms.rollout_scale import ReleaseRolloutScaler

# f2 when the log lacks prune/count_max: "d<k>" = ceil(f1) + k, capped at what the step's counts
# allow (every question keeps at least its seed). "logged" = prune/count_max.
F2_MODELS = ("logged", "d0", "d1", "d2")


@dataclass(frozen=True)
class StepCounts:
    """One training step as the released rule sees it."""

    questions: int  # questions in the batch (every one has a final count)
    kept: int  # sum of the final counts (prune/kept, after the refill)
    count_max: int | None  # f2 = max final count, None when the log does not hold it

    @property
    def f1(self) -> float:
        return self.kept / self.questions


def steps_from_rows(rows: Iterable[dict[str, Any]]) -> list[StepCounts]:
    """Per-step counts from training lines (metrics.jsonl rows or a record's ``steps``), in step order."""
    out: list[StepCounts] = []
    for r in sorted((r for r in rows if K.PRUNE_KEPT in r and K.STEP in r), key=lambda r: r[K.STEP]):
        cmax = r.get(K.PRUNE_COUNT_MAX)
        out.append(StepCounts(int(r[K.ROLLOUT_NUM_PROMPTS]), int(r[K.PRUNE_KEPT]),
                              None if cmax is None else int(cmax)))
    return out


def f2_of(step: StepCounts, model: str) -> int:
    """The step's f2 under ``model`` (``F2_MODELS``)."""
    if model == "logged":
        if step.count_max is None:
            raise ValueError("the log has no prune/count_max: choose an f2 model d0/d1/d2 (see F2_MODELS)")
        return step.count_max
    if model not in F2_MODELS:
        raise ValueError(f"f2 model {model!r}: choose one of {F2_MODELS}")
    lowest = math.ceil(step.kept / step.questions)  # a max is at least the mean
    return min(lowest + int(model[1:]), step.kept - (step.questions - 1))


def counts_for(step: StepCounts, f2: int) -> list[int]:
    """Per-question counts (each >= 1) that sum to ``step.kept`` with maximum ``f2``: what the
    scaler's ``observe`` needs to compute exactly this step's f1 and f2."""
    q = step.questions
    if not (math.ceil(step.kept / q) <= f2 <= step.kept - (q - 1)):
        raise ValueError(f"no {q} counts >= 1 sum to {step.kept} with maximum {f2}")
    counts, rest = [f2], step.kept - f2
    for i in range(q - 1):
        c = min(f2, rest - (q - 2 - i))  # leave at least 1 for each later question
        counts.append(c)
        rest -= c
    return counts


@dataclass(frozen=True)
class Replay:
    """The n each step would use (``ns[s - 1]`` for step s) and the decisions at period ends."""

    ns: list[int]
    decisions: list[dict[str, float]]

    @property
    def changes(self) -> int:
        return sum(1 for a, b in zip(self.ns, self.ns[1:]) if a != b)

    @property
    def first_move(self) -> int | None:
        """The first step that would use an n other than the initial one (None: never)."""
        return next((s for s, n in enumerate(self.ns, start=1) if n != self.ns[0]), None)


def replay(steps: Sequence[StepCounts], *, period_steps: int, total_steps: int, n_init: int = 8,
           n_floor: int = 2, f2_model: str = "logged") -> Replay:
    """Feed ``total_steps`` steps to a ``ReleaseRolloutScaler`` as the trainer does (progress =
    step / total_steps; step s beyond the log repeats logged step ((s - 1) mod len) + 1)."""
    if not steps:
        raise ValueError("replay: no logged steps")
    scaler = ReleaseRolloutScaler(n_init, n_floor=n_floor, period_steps=period_steps)
    ns: list[int] = []
    decisions: list[dict[str, float]] = []
    for s in range(1, total_steps + 1):
        ns.append(scaler.n)
        step = steps[(s - 1) % len(steps)]
        scaler.end_step(counts_for(step, f2_of(step, f2_model)), step=s, epoch=0, progress=min(s / total_steps, 1.0))
        if scaler.metrics():
            decisions.append({"step": float(s), **scaler.last_decision})
    return Replay(ns, decisions)


def required_spread(steps: Sequence[StepCounts], *, period_steps: int, total_steps: int) -> float:
    """The f2-free bound: n can move only if the first period's spread mean(f2) - mean(f1) exceeds
    this value. Since f2 >= f1, f3 >= mean(f1) of its period, so g1 - f3 <= (F1_1 + F2_1) / 2 - F1_p;
    n moves when g1 - f3 > 1/2 at a period that ends before the last step (its n is used), hence
    F2_1 - F1_1 > 1 - 2 max_p (F1_1 - F1_p). Needs ``period_steps`` >= 1."""
    f1 = [steps[(s - 1) % len(steps)].f1 for s in range(1, total_steps + 1)]
    # the periods whose decision some step uses: complete (a partial last period never closes) and
    # ending before the last step
    ends = range(period_steps, total_steps, period_steps)
    if not ends:
        return math.inf
    means = [sum(f1[e - period_steps:e]) / period_steps for e in ends]
    return 1.0 - 2.0 * max(means[0] - m for m in means)


# ------------------------------------------------------------------------------------------- input
def load_series(path: Path, variant: str | None = None) -> list[tuple[str, list[StepCounts]]]:
    """(label, steps) per run: a run directory (its metrics.jsonl) or a run-metadata .jsonl file
    (every record, or those of ``variant``), labelled ``dataset-model/variant/seed<k>`` (a run
    directory by its last three path parts); the setting is the label's first part."""
    path = Path(path)
    if path.is_dir():
        rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
        # runs/<target>/<scale>/<setting>/<variant>/seed<k>: labelled as a metadata record would be
        label = "/".join(p.name for p in (path.parent.parent, path.parent, path))
        return [(label, steps_from_rows(rows))]
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if variant is None or rec["variant"] == variant:
            label = f"{rec['dataset']}-{rec['model']}/{rec['variant']}/seed{rec['seed']}"
            out.append((label, steps_from_rows(rec["steps"])))
    return out


def setting_of(label: str) -> str:
    return label.split("/", 1)[0]


def grid_lines(series: Sequence[tuple[str, list[StepCounts]]], periods: Sequence[int], totals: Sequence[int],
               models: Sequence[str], n_init: int) -> list[str]:
    """A markdown table: per setting, (period, total steps) and f2 model, the seeds in which n
    moves, the changes per seed, and the f2-free bound's verdict."""
    lines = ["| setting | period_steps | total_steps | f2 | runs where n moves | n changes per run | "
             "first move (step) | bound allows a move (runs) |", "|---|---|---|---|---|---|---|---|"]
    settings = sorted({setting_of(label) for label, _ in series})
    for setting, period, total, model in ((a, p, t, m) for a in settings for p in periods for t in totals for m in models):
        runs = [steps for label, steps in series if setting_of(label) == setting]
        if model == "logged" and any(s.count_max is None for steps in runs for s in steps):
            continue
        reps = [replay(steps, period_steps=period, total_steps=total, n_init=n_init, f2_model=model) for steps in runs]
        # the bound is f2-free; a run passes it when its first period's spread under this model exceeds it
        allows = sum(1 for steps in runs if _first_spread(steps, period, model) > required_spread(
            steps, period_steps=period, total_steps=total))
        firsts = ",".join(str(r.first_move) if r.first_move else "-" for r in reps)
        lines.append(f"| {setting} | {period} | {total} | {model} | {sum(r.changes > 0 for r in reps)}/{len(reps)} | "
                     f"{','.join(str(r.changes) for r in reps)} | {firsts} | {allows}/{len(runs)} |")
    return lines


def _first_spread(steps: Sequence[StepCounts], period: int, model: str) -> float:
    first = [steps[i % len(steps)] for i in range(period)]
    return sum(f2_of(s, model) - s.f1 for s in first) / period


def f1_lines(series: Sequence[tuple[str, list[StepCounts]]], period: int, total: int) -> list[str]:
    """Per run: f1 of the first period, the lowest later period mean, and the spread the bound needs."""
    lines = ["| run | f1 first period | lowest f1 of a used period | first-period spread needed |", "|---|---|---|---|"]
    for label, steps in series:
        f1 = [steps[(s - 1) % len(steps)].f1 for s in range(1, total + 1)]
        ends = list(range(period, total, period))
        means = [sum(f1[e - period:e]) / period for e in ends]
        need = required_spread(steps, period_steps=period, total_steps=total)
        lines.append(f"| {label} | {means[0]:.3f} | {min(means):.3f} | > {need:.3f} |" if means else f"| {label} | - | - | - |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.ars_replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", type=Path, help="run directories or run-metadata .jsonl files")
    ap.add_argument("--variant", default="fastrl", help="records of this variant (metadata files); default fastrl")
    ap.add_argument("--periods", nargs="+", type=int, default=[3], help="algorithm.ars.period_steps values")
    ap.add_argument("--total-steps", nargs="+", type=int, default=[30], help="trainer.total_steps values")
    ap.add_argument("--f2", nargs="+", default=["logged"], choices=F2_MODELS, help="f2 source/model (F2_MODELS)")
    ap.add_argument("--n-init", type=int, default=8, help="rollout.n")
    ap.add_argument("--f1", action="store_true", help="also print each run's f1 picture at the first period/steps")
    args = ap.parse_args(argv)
    series = [item for src in args.sources for item in load_series(src, args.variant)]
    if not series:
        ap.error(f"no runs of variant {args.variant!r} in {args.sources}")
    print("\n".join(grid_lines(series, args.periods, args.total_steps, args.f2, args.n_init)))
    if any(t > min(len(s) for _, s in series) for t in args.total_steps):
        print("\nSteps beyond a run's log repeat its logged series from the start (stationary statistics assumed).")
    if args.f1:
        print()
        print("\n".join(f1_lines(series, args.periods[0], args.total_steps[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
