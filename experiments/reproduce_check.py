"""``make reproduce-check``: does this machine agree with the committed tables?

It re-trains a fixed sample of the committed runs -- by default GRPO and FastRL, seed 1, in every re-measured
Table 1 setting (8 runs) -- into their own runs root, and compares
each re-trained run with the committed run metadata
(``paper_figures/generated/<scale>/run_metadata/table1.jsonl``), cell by cell:

- ``acc_before``: the warm start's in-domain accuracy (%), per method;
- ``in_domain_acc``: the final in-domain accuracy (%), per method;
- ``speedup``: GRPO's training time / FastRL's, per seed (wall; CPU seconds beside it).

For each cell it prints the committed mean over the committed seeds with its 95 % Student-t
interval, the 95 % range one new seed should fall in (the prediction interval, mean ± t·s·√(1 +
1/n): a single re-trained run varies like one seed, not like a mean of n), the re-trained value,
the committed value of the same seed, and a verdict: ``agrees`` (inside the range) or ``outside
by X``. The exit code is 1 when any cell is outside.

The SFT warm starts the runs need are built first (``fastrl sft``, ``--jobs`` at a time, untimed), then the
runs train one at a time, so the two runs of a speedup see the same load.

    python -m experiments.reproduce_check --scale mini            # make reproduce-check
    python -m experiments.reproduce_check --dry-run               # the plan and its time estimate
    python -m experiments.reproduce_check --collect-only          # compare what is already trained
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from experiments.collect import Cell, gather, generated_dir
from experiments.export import RunRecords, load_records
from experiments.logs import RunSummary, is_finished
from experiments.runner import RunError, build_warm_starts, default_jobs, execute, print_plan, settle_superseded
from experiments.spec import RunSpec, SpecError, build_runs
from experiments.stats import Interval, t_interval, t_quantile

TARGET = "table1"
BASELINE, METHOD = "grpo", "fastrl"
DEFAULT_SEEDS = (1,)


@dataclass(frozen=True)
class Check:
    """One compared quantity of one setting."""

    setting: str
    quantity: str
    committed: Interval  # over the committed seeds
    new_range: tuple[float, float] | None  # where one new seed should fall (95 %); None: < 2 seeds
    new: float  # the re-trained value (mean over the re-trained seeds)
    same_seed: float | None  # the committed value of the re-trained seed(s), mean
    unit: str

    @property
    def outside_by(self) -> float:
        """How far ``new`` lies outside ``new_range`` (0 inside; NaN without a range)."""
        if self.new_range is None:
            return math.nan
        low, high = self.new_range
        return max(low - self.new, self.new - high, 0.0)

    @property
    def verdict(self) -> str:
        d = self.outside_by
        if d != d:
            return "no range (fewer than 2 committed seeds)"
        return "agrees" if d == 0.0 else f"outside by {d:.2f}{self.unit}"


def prediction_range(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """mean ± t_{(1+level)/2, n-1} · s · √(1 + 1/n): where one more draw falls with ``level``."""
    iv = t_interval(values, level)
    if iv.std is None:
        return None
    half = t_quantile(0.5 + level / 2.0, iv.n - 1) * iv.std * math.sqrt(1.0 + 1.0 / iv.n)
    return iv.mean - half, iv.mean + half


def _per_seed(summaries: Mapping[int, RunSummary], quantity: str) -> dict[int, float]:
    if quantity == "acc_before":
        return {k: 100.0 * s.acc_before for k, s in summaries.items() if s.acc_before is not None}
    if quantity == "in_domain_acc":
        return {k: 100.0 * s.acc_after for k, s in summaries.items()}
    raise ValueError(f"unknown quantity {quantity!r}")


def _speedups(base: Mapping[int, RunSummary], method: Mapping[int, RunSummary], cpu: bool) -> dict[int, float]:
    def t(s: RunSummary) -> float:
        return s.train_cpu_s if cpu else s.train_time_s

    return {k: t(base[k]) / t(method[k]) for k in sorted(set(base) & set(method))
            if t(base[k]) == t(base[k]) and t(method[k]) == t(method[k]) and t(method[k]) > 0}


def _check(setting: str, quantity: str, committed: dict[int, float], new: dict[int, float],
           unit: str) -> Check | None:
    if not committed or not new:
        return None
    same = [committed[k] for k in new if k in committed]
    return Check(setting, quantity, t_interval(list(committed.values())),
                 prediction_range(list(committed.values())), sum(new.values()) / len(new),
                 sum(same) / len(same) if same else None, unit)


def compare_setting(setting: str, committed: Mapping[str, Cell], new: Mapping[str, Cell]) -> list[Check]:
    """Every check of one setting: ``committed`` / ``new`` map a method to its cell."""
    out: list[Check | None] = []
    for variant in (BASELINE, METHOD):
        for quantity in ("acc_before", "in_domain_acc"):
            out.append(_check(setting, f"{quantity} ({variant})", _per_seed(committed[variant].summaries, quantity),
                              _per_seed(new[variant].summaries, quantity), " points"))
    for cpu in (False, True):
        name = f"speedup {METHOD} vs {BASELINE} ({'CPU s' if cpu else 'wall'})"
        out.append(_check(setting, name, _speedups(committed[BASELINE].summaries, committed[METHOD].summaries, cpu),
                          _speedups(new[BASELINE].summaries, new[METHOD].summaries, cpu), "x"))
    return [c for c in out if c is not None]


def compare(specs: Sequence[RunSpec], records: RunRecords, committed_specs: Sequence[RunSpec]) -> list[Check]:
    """The re-trained ``specs`` (finished ones) against the committed runs ``committed_specs``."""
    new_cells, old_cells = gather(specs), gather(committed_specs, records)
    checks: list[Check] = []
    for setting in sorted({s.setting for s in specs}):
        ds, model = setting.split("-", 1)
        new = {v: new_cells[(ds, model, v)] for v in (BASELINE, METHOD)}
        old = {v: old_cells[(ds, model, v)] for v in (BASELINE, METHOD)}
        checks += compare_setting(setting, old, new)
    return checks


def _fmt(v: float | None, unit: str) -> str:
    if v is None or v != v:
        return "—"
    return f"{v:.2f}x" if unit == "x" else f"{v:.1f}"


def report(checks: Sequence[Check]) -> str:
    """A markdown table of the checks, then one line: how many agree."""
    lines = ["| setting | quantity | committed mean [95 % CI] (seeds) | 95 % range for one seed | this machine "
             "| committed, same seed | verdict |", "|---|---|---|---|---|---|---|"]
    for c in checks:
        iv = c.committed
        ci = f"{_fmt(iv.mean, c.unit)} [{_fmt(iv.low, c.unit)}, {_fmt(iv.high, c.unit)}] ({iv.n})"
        rng = "—" if c.new_range is None else f"[{_fmt(c.new_range[0], c.unit)}, {_fmt(c.new_range[1], c.unit)}]"
        lines.append(f"| {c.setting} | {c.quantity} | {ci} | {rng} | {_fmt(c.new, c.unit)} "
                     f"| {_fmt(c.same_seed, c.unit)} | {c.verdict} |")
    agree = sum(c.verdict == "agrees" for c in checks)
    lines.append(f"\n{agree} of {len(checks)} cells agree with the committed runs.")
    return "\n".join(lines)


def sample_specs(scale: str, seeds: Sequence[int], runs_root: Path) -> list[RunSpec]:
    return [s for s in build_runs(TARGET, scale, seeds, runs_root) if s.variant in (BASELINE, METHOD)]


def checkable_settings(committed: Sequence[RunSpec], records: RunRecords, scale: str) -> list[str]:
    """The settings there is something to agree with: every committed GRPO and FastRL run of the
    setting recorded by the command the configs now ask for. A Table 1 re-measured setting by setting
    (``--keep-committed``) is checkable in its re-measured settings; the others are named and skipped.
    Refuses (before any training) when no setting is: the ``register.stale`` reason, if any."""
    from experiments.targets import discover

    by_setting: dict[str, list[RunSpec]] = {}
    for spec in committed:
        by_setting.setdefault(spec.setting, []).append(spec)
    ready = sorted(k for k, group in by_setting.items() if all(records.matching(s) is not None for s in group))
    skipped = sorted(set(by_setting) - set(ready))
    if not ready:
        stale = discover()[TARGET].stale if scale == "mini" else None  # only mini's outputs are committed
        why = f"it predates the configs ({stale})" if stale else "no setting's runs were made by today's commands"
        raise SpecError(f"the committed {TARGET} has nothing to agree with: {why}; re-measure it "
                        f"(make {TARGET} SCALE={scale})")
    if skipped:
        print(f"reproduce-check: skipping {', '.join(skipped)}: the committed {TARGET} runs there predate the "
              f"configs (not re-measured yet)")
    return ready


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.reproduce_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default="mini", choices=("smoke", "mini"))
    ap.add_argument("--seeds", default=" ".join(map(str, DEFAULT_SEEDS)), help='re-trained seeds, e.g. "1 2"')
    ap.add_argument("--runs-root", type=Path, default=Path("runs/reproduce_check"))
    ap.add_argument("--metadata", type=Path, default=None,
                    help="the scale directory holding run_metadata/ (default paper_figures/generated/<scale>)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="warm starts built at once (default: one per CPU core); the runs are always timed one at a time")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--set-aside-superseded", action="store_true",
                    help="move finished runs of another command under <runs-root>/.superseded/ and train them again")
    args = ap.parse_args(argv)
    try:
        records = load_records(args.metadata or generated_dir(args.scale), TARGET)
        seeds = [int(x) for x in args.seeds.split()]
        specs = sample_specs(args.scale, seeds, args.runs_root)
        committed_seeds = records.seeds()
        committed = sample_specs(args.scale, committed_seeds, Path("runs"))
        ready = checkable_settings(committed, records, args.scale)
        specs = [s for s in specs if s.setting in ready]
        committed = [s for s in committed if s.setting in ready]
    except SpecError as exc:
        print(f"reproduce-check: {exc}")
        return 2
    jobs = args.jobs or default_jobs("subprocess")
    print(f"   warm starts first, up to {jobs} at a time (untimed); then the runs, one at a time")
    try:
        settle_superseded(specs, args.runs_root, move=args.set_aside_superseded, dry_run=args.dry_run)
    except RunError as exc:
        print(f"reproduce-check: {exc}")
        return 2
    print_plan("reproduce-check", args.scale, specs, args.runs_root, "subprocess", 1)
    if args.dry_run:
        return 0
    if not args.collect_only:
        # the warm starts first, untimed; then one run at a time, so the two runs of a speedup see
        # the same load (on Dec 6, run as they came, seed 1's CPU speedup moved 1.49x -> 1.28x)
        sft_failures = build_warm_starts([s for s in specs if not is_finished(s.run_dir)], jobs)
        for line in sft_failures.values():
            print(f"reproduce-check: {line}")
        if sft_failures:
            return 2
        failures = execute(specs, "subprocess", jobs=1)
        if failures:
            print(f"reproduce-check: {len(failures)} run(s) failed; compared what finished")
    checks = compare(specs, records, committed)
    md = report(checks)
    out = args.runs_root / f"reproduce_check_{args.scale}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md + "\n")
    print(md)
    print(f"written: {out}")
    return 0 if checks and all(c.verdict == "agrees" for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
