"""``python -m experiments.run TARGET --scale S``: the one driver behind every ``make`` target.

For a target it (1) builds the run list from configs/tables/<target>.yaml, (2) prints how many
runs are already finished (reused, never recomputed), how many will run, and how long that should
take, (3) trains the missing runs, (4) runs the target's post-training step (evaluations, the
correlation measurement, notebooks), (5) collects paper_figures/generated/<scale>/<target>.csv / .md
and writes paper_figures/generated/<scale>/run_metadata/<target>.jsonl. Everything a target writes
is under its scale's directory, so a smoke run never touches the committed mini files.

    python -m experiments.run table1 --scale mini --seeds "1 2 3 4 5"
    python -m experiments.run table1 --dry-run           # plan and estimate only
    python -m experiments.run table1 --collect-only      # tables from the logs already there
    python -m experiments.run table1 --from-metadata     # tables from the committed run metadata (no runs/)
    python -m experiments.run table1 --keep-committed    # train only the settings the committed metadata lacks
    python -m experiments.run calibrate --scale mini     # time 2 steps per setting, for estimates
    python -m experiments.run list
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from experiments import collect
from experiments.export import KeptRuns, committed_settings, export_runs, load_records, metadata_path
from experiments.grid import Context
from experiments.runner import (
    CALIBRATION_DIR, DEFAULT_LAUNCHER, LAUNCHERS, REPO_ROOT, Interrupted, RunError, default_jobs, execute, fmt_duration,
    launch,
    print_plan, settle_superseded, unique,
)
import experiments.spec as spec_config
from experiments.spec import SCALES, RunSpec, SpecError, build_runs, load_table, parse_seeds
from experiments.targets import Target, aliases, discover, make_names

def registered() -> dict[str, Target]:
    """The targets, in `make reproduce` order: every configs/tables/*.yaml with a ``register:``
    block (experiments.targets); `reproduce` runs them in that order (data statistics first,
    Table 4 after Table 1 whose policies it evaluates, the figures last)."""
    return discover(spec_config.TABLES_DIR)


def resolve_target(name: str, targets: dict[str, Target] | None = None) -> Target:
    """The target ``name`` (or its alias)."""
    targets = registered() if targets is None else targets
    name = aliases(targets).get(name, name)
    if name not in targets:
        raise SpecError(f"unknown target {name!r}; valid: {sorted([*make_names(targets), 'reproduce'])}")
    return targets[name]


def target_module(name: str) -> Any:
    """What runs target ``name`` (or its alias): its hook module, or a ``TableTarget`` for a data-only
    table; both have ``specs(ctx)`` and ``collect(ctx)``, maybe ``post`` and ``describe``."""
    return resolve_target(name).hooks()


def collect_from_metadata(name: str, ctx: Context) -> list[str]:
    """Rebuild ``name``'s table from its committed run metadata (no training, no runs/ needed)."""
    target = resolve_target(name)
    name = target.name
    if not target.from_metadata:
        raise SpecError(f"{name}: --from-metadata rebuilds only {', '.join(from_metadata_names())} (the others read "
                        f"more of a run directory than the metadata holds); collect {name} from runs/")
    if target.stale:
        raise SpecError(f"{name}: its committed outputs predate the configs ({target.stale}); retrain it: "
                        f"make {name} SCALE={ctx.scale}")
    mod = target.hooks()
    ctx.records = load_records(ctx.out_dir, name)
    try:
        print(f"\n##### {name}: from {ctx.records.source} ({len(ctx.records)} runs; nothing is trained)", flush=True)
        for path in mod.collect(ctx):
            print(f"   wrote {path}")
    finally:
        ctx.records = None
    return []


@dataclass
class Sitting:
    """What one ``run_target`` call trains and writes: ``selected`` (the runs of ``--settings``, else
    all) minus ``kept`` (``--keep-committed``: whole settings the committed metadata already holds,
    made by today's commands, with their records); ``preserved``: the committed records of the
    settings this sitting leaves alone, written back as they were."""

    selected: list[RunSpec]
    kept: dict[RunSpec, dict[str, Any]]
    preserved: list[dict[str, Any]]

    @property
    def todo(self) -> list[RunSpec]:
        return [s for s in self.selected if s not in self.kept]


def plan_sitting(name: str, runs: Sequence[RunSpec], ctx: Context) -> Sitting:
    """Split ``runs`` by ``ctx.settings`` and ``ctx.keep_committed``; say what is kept and left alone."""
    known = sorted({s.setting for s in runs})
    unknown = sorted(set(ctx.settings or ()) - set(known))
    if unknown:
        raise SpecError(f"--settings {','.join(unknown)}: not a setting of {name}; valid: {', '.join(known)}")
    path = metadata_path(ctx.out_dir, name)
    records = load_records(ctx.out_dir, name) if (ctx.keep_committed or ctx.settings) and path.is_file() else None
    kept = committed_settings(records, runs) if ctx.keep_committed and records is not None else {}
    selected = [s for s in runs if not ctx.settings or s.setting in ctx.settings or s in kept]
    touched = {s.setting for s in selected}
    preserved = records.outside(touched) if ctx.settings and records is not None else []
    if kept:
        print(f"   kept from {path}: {len(kept)} runs of {', '.join(sorted({s.setting for s in kept}))} "
              f"(not retrained)", flush=True)
    elif ctx.keep_committed:
        print(f"   kept from {path}: no complete setting", flush=True)
    if preserved:
        left = sorted({f"{r['dataset']}-{r['model']}" for r in preserved})
        print(f"   left alone: {len(preserved)} committed runs of {', '.join(left)} (written back as they are)", flush=True)
    return Sitting(selected, kept, preserved)


def run_target(name: str, ctx: Context, *, dry_run: bool = False, collect_only: bool = False) -> list[str]:
    """Plan, train what is missing, post-process, collect. Returns failure messages."""
    target = resolve_target(name)
    name = target.name
    mod = target.hooks()
    ctx.resolve_paper_steps = not dry_run
    runs = unique(mod.specs(ctx))
    print(f"\n##### {name}: {target.description}", flush=True)
    sitting = plan_sitting(name, runs, ctx)
    settle_superseded(sitting.todo, ctx.runs_root, move=ctx.set_aside_superseded, dry_run=dry_run)
    print_plan(name, ctx.scale, sitting.todo, ctx.runs_root, ctx.launcher, ctx.jobs)
    describe = getattr(mod, "describe", None)
    if describe is not None:
        describe(ctx)
    if dry_run:
        return []
    failures: list[str] = []
    if not collect_only:
        failures += train_sitting(name, mod, sitting.todo, ctx)
    # a sitting of some settings, or with kept ones, collects those only (kept ones from their records)
    ctx.records = KeptRuns(sitting.kept, sitting.selected) if sitting.kept or ctx.settings else None
    try:
        for path in mod.collect(ctx):
            print(f"   wrote {path}")
    finally:
        ctx.records = None
    exported = export_runs(name, sitting.selected, ctx.out_dir, REPO_ROOT, kept=sitting.kept, preserved=sitting.preserved)
    if exported is not None:
        print(f"   wrote {exported} (run metadata)")
    return failures


def train_sitting(name: str, mod: Any, todo: list[RunSpec], ctx: Context) -> list[str]:
    """Train ``todo`` and run the target's post-training step on it; returns failure messages."""
    started = time.perf_counter()
    failures = [f"{s.run_dir}: {msg}" for s, msg in execute(todo, ctx.launcher, fail_fast=ctx.fail_fast, jobs=ctx.jobs)]
    print(f"   training took {fmt_duration(time.perf_counter() - started)} ({ctx.jobs} at a time)", flush=True)
    post = getattr(mod, "post", None)
    if post is not None:
        try:
            post(ctx, todo)
        except Exception as exc:  # noqa: BLE001 -- reported with the target named, collection still runs
            if ctx.fail_fast:
                raise
            failures.append(f"{name} post-processing: {exc!r}")
    return failures


def reproduction_total(names: Sequence[str], ctx: Context) -> float | None:
    """The whole reproduction's plan: every target's runs, each run shared by several targets
    (Table 4 trains Table 1's large-model runs, ...) counted once; returns the known seconds."""
    ctx.resolve_paper_steps = False
    runs = unique([s for name in names for s in resolve_target(name).hooks().specs(ctx)])
    print("\n##### reproduce: the whole reproduction, each shared run counted once", flush=True)
    total = print_plan("reproduce", ctx.scale, runs, ctx.runs_root, ctx.launcher, ctx.jobs)
    print("   (training runs only: evaluations and measurements after training, e.g. Table 4's, are in "
          "each target's own lines above)", flush=True)
    return total


def calibrate(ctx: Context, targets: Sequence[str]) -> Path:
    """Time a 2-step GRPO run of every setting the targets use; write experiments/calibration/<scale>.json.

    The per-run estimate is then ``fixed_s + total_steps * step_s`` (fixed_s: start-up, SFT warm
    start when not cached yet, validation; step_s: mean training step).
    """
    from experiments.logs import summarize

    settings: dict[str, dict[str, float]] = {}
    seen: set[tuple[str, str]] = set()
    for t in targets:
        table = load_table(resolve_target(t).name)
        for s in table["settings"]:
            key = (s["dataset"], s["model"])
            if key in seen or "variants" not in table:
                continue
            seen.add(key)
            spec = next(r for r in build_runs(resolve_target(t).name, ctx.scale, [ctx.seeds[0]], ctx.runs_root / "_calibration")
                        if (r.dataset, r.model) == key)
            spec = type(spec)(**{**spec.__dict__, "config": "methods/grpo.yaml", "variant": "grpo",
                                 "overrides": (*spec.overrides, "trainer.total_steps=2", "trainer.resume=false")})
            if spec.requires_task:
                continue
            print(f"-- calibrating {spec.setting}", flush=True)
            wall = launch(spec, ctx.launcher)
            summ = summarize(spec.run_dir)
            settings[spec.setting] = {"step_s": summ.train_time_s / summ.steps,
                                      "fixed_s": max(0.0, wall - summ.train_time_s), "run_wall_s": wall}
    CALIBRATION_DIR.mkdir(parents=True, exist_ok=True)
    path = CALIBRATION_DIR / f"{ctx.scale}.json"
    path.write_text(json.dumps({
        "scale": ctx.scale, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
        "machine": platform.platform(), "launcher": ctx.launcher,
        "note": "fixed_s includes building the SFT warm start when it was not cached yet", "settings": settings,
    }, indent=2))
    print(f"wrote {path}")
    return path


def from_metadata_names() -> list[str]:
    return [t.name for t in registered().values() if t.from_metadata]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help=f"one of {', '.join(make_names(registered()))}, reproduce, calibrate, list")
    p.add_argument("--scale", default="mini", choices=SCALES)
    p.add_argument("--seeds", default="", help='e.g. "1 2 3" (default: configs/tables/slots.yaml seeds.<scale>)')
    p.add_argument("--runs-root", type=Path, default=Path("runs"))
    p.add_argument("--out", type=Path, default=None,
                   help="root of the generated files (default paper_figures/generated); each scale writes "
                        "<out>/<scale>/<target>.csv/.md, PNGs and run_metadata/<target>.jsonl")
    p.add_argument("--launcher", choices=LAUNCHERS, default=None, help="default: inprocess (smoke), subprocess (mini), deepspeed (paper)")
    p.add_argument("--override", action="append", default=[], help="extra dotted.key=value for every run (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the estimate only")
    p.add_argument("--collect-only", action="store_true", help="no training: tables from existing logs")
    p.add_argument("--from-metadata", action="store_true",
                   help=f"no training, no runs/: tables from <out>/<scale>/run_metadata/<target>.jsonl "
                        f"({', '.join(from_metadata_names())}; `reproduce` skips the others)")
    p.add_argument("--settings", default="",
                   help="only these settings (<dataset>-<model>, comma-separated, e.g. geometry3k-vl_3b); the committed "
                        "metadata of the others is written back as it is")
    p.add_argument("--keep-committed", action="store_true",
                   help="train only the settings that <out>/<scale>/run_metadata/<target>.jsonl lacks: a setting whose "
                        "every run is recorded there, by the command the configs now ask for, is collected from it and "
                        "written back (a re-measure longer than one sitting, built setting by setting)")
    p.add_argument("--set-aside-superseded", action="store_true",
                   help="a finished run made by another command than the configs now ask for (its run_spec.json) is "
                        "moved under <runs-root>/.superseded/<time>/ and trained again (without it: refused)")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed run")
    p.add_argument("--jobs", type=int, default=None,
                   help="runs at once (default: one per CPU core with the subprocess launcher, else 1)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        targets = registered()
        if args.target == "list":
            for name, target in targets.items():
                print(f"{name:12s} {target.description}" + (f" [stale: {target.stale}]" if target.stale else ""))
            for a, t in aliases(targets).items():
                print(f"{a:12s} = {t}")
            return 0
        overrides = []
        for ov in args.override:
            overrides += ov.split()  # OVERRIDES="a=1 b=2" from make arrives as one string
        launcher = args.launcher or DEFAULT_LAUNCHER[args.scale]
        ctx = Context(scale=args.scale, seeds=parse_seeds(args.seeds, args.scale), runs_root=args.runs_root,
                      out_dir=collect.generated_dir(args.scale, args.out), launcher=launcher, extra_overrides=tuple(overrides),
                      fail_fast=args.fail_fast, jobs=args.jobs or default_jobs(launcher),
                      keep_committed=args.keep_committed, set_aside_superseded=args.set_aside_superseded,
                      settings=tuple(x for x in args.settings.replace(",", " ").split() if x))
        if args.target == "calibrate":
            calibrate(ctx, [t for t in targets if t not in ("table6", "figures", "correlation")])
            return 0
        names = list(targets) if args.target == "reproduce" else [args.target]
        failures: list[str] = []
        for name in names:
            if args.from_metadata:
                if args.target == "reproduce" and not targets[name].from_metadata:
                    print(f"\n##### {name}: skipped (--from-metadata rebuilds only {', '.join(from_metadata_names())})")
                    continue
                if args.target == "reproduce" and targets[name].stale:
                    print(f"\n##### {name}: skipped (stale: {targets[name].stale}; `make {name}` retrains it)")
                    continue
                failures += collect_from_metadata(name, ctx)
            else:
                failures += run_target(name, ctx, dry_run=args.dry_run, collect_only=args.collect_only)
        if args.target == "reproduce" and args.dry_run and not args.from_metadata:
            reproduction_total(names, ctx)
    except (SpecError, RunError) as exc:
        print(f"experiments.run: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:  # the children were stopped and their run_spec.json marked interrupted
        print(f"experiments.run: {exc}; started again, the runs resume from their checkpoints", file=sys.stderr)
        return 128 + exc.signum
    if failures:
        print(f"\n{len(failures)} failure(s):", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
