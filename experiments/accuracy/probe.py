"""Paired-seed accuracy ablation at the demo setting (see arms.yaml): run the arms, then report.

    python -m experiments.accuracy.probe run [--jobs 2] [--arms grpo,fastrl] [--seeds 1,2]
    python -m experiments.accuracy.probe report      # -> <root>/report.md and report.json
    python -m experiments.accuracy.probe report --baseline grpo_lr_sqrt   # -> report_vs_grpo_lr_sqrt.md

Each (arm, seed) trains into ``<root>/<arm>/seed<k>`` (skipped when its summary exists). The
report gives, per arm, the final validation accuracy, its change from the warm start, and the
paired difference to the baseline arm (same seed) with a 95 % Student-t interval, in-domain
(avg@8 and n = 1) and out of domain (the OOD benchmarks' mean accuracy, n = 1), plus the mean
train-step time and kept fraction, so the cause of an accuracy gap can be read off one table.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import yaml

from experiments.stats import t_interval
from fastrl import metric_keys as K

ARMS_FILE = Path(__file__).with_name("arms.yaml")
DEFAULT_ROOT = Path("runs/accuracy_probe")


def paired_interval(diffs: Sequence[float]) -> tuple[float, float, float]:
    """Mean of paired differences and its 95 % t-interval, as (mean, low, high); NaN bounds when n < 2."""
    iv = t_interval(diffs)
    return iv.mean, (iv.low if iv.defined else math.nan), (iv.high if iv.defined else math.nan)


def load_arms(path: Path = ARMS_FILE) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def run_one(root: Path, arm: str, spec: dict[str, Any], common: Sequence[str], seed: int) -> str:
    run_dir = root / arm / f"seed{seed}"
    if (run_dir / "summary.json").exists():
        return f"{arm} seed {seed}: done before"
    run_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "fastrl.cli", "train", spec["config"], *common, *spec.get("overrides", []),
            f"trainer.seed={seed}", f"trainer.run_dir={run_dir}"]
    # The trainer's own resume rule: a killed run continues from its checkpoint (its identity is
    # checked), a fresh one starts. trainer.resume=false would move the log opened here aside.
    start = time.perf_counter()
    with open(run_dir / "train.log", "a") as log:
        rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        return f"{arm} seed {seed}: FAILED (rc {rc}, see {run_dir / 'train.log'})"
    return f"{arm} seed {seed}: {time.perf_counter() - start:.0f} s"


def summarize(run_dir: Path) -> dict[str, float] | None:
    """Final/initial validation accuracy, summed train-step time and kept fraction of one run."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if K.STEP_TIME in r]
    before = next((r[K.VAL_ACCURACY_BEFORE] for r in rows if K.VAL_ACCURACY_BEFORE in r), None)
    final = next((r for r in rows if r.get(K.PHASE) == K.PHASE_VAL_FINAL), {})
    after = final.get(K.VAL_ACCURACY)
    if before is None or after is None or not steps:
        return None
    ood = [v for k, v in final.items() if k.startswith("ood/") and k.endswith("/accuracy")]
    return {"acc_before": before, "acc_after": after, "acc_after_n1": final.get(K.VAL_ACCURACY_N1, after),
            "ood_after": sum(ood) / len(ood) if ood else None,  # mean over the OOD benchmarks, n = 1
            "train_s": sum(r[K.STEP_TIME] for r in steps),
            "kept_fraction": sum(r[K.PRUNE_KEPT] for r in steps) / sum(r[K.ROLLOUT_NUM_RESPONSES] for r in steps),
            "n_last": steps[-1][K.ROLLOUT_N], "optimizer_steps": sum(r.get(K.ACTOR_OPTIMIZER_STEPS, 0) for r in steps)}


def report(root: Path, arms: dict[str, Any], baseline: str | None = None) -> tuple[str, dict[str, Any]]:
    """The table and its data; every arm is paired by seed with ``baseline`` (default: the arms
    file's ``baseline``)."""
    base = baseline or arms["baseline"]
    if base not in arms["arms"]:
        raise ValueError(f"report --baseline {base!r}: not an arm of this file; choose one of {sorted(arms['arms'])}")
    runs = {a: {s: summarize(root / a / f"seed{s}") for s in arms["seeds"]} for a in arms["arms"]}
    out: dict[str, Any] = {}
    lines = [f"| arm | seeds | val avg@8 after (%) | Δ from warm start | Δ avg@8 vs {base}, paired [95 % CI] | "
             f"Δ n=1 vs {base} [95 % CI] | Δ OOD vs {base} [95 % CI] | speedup vs {base} [95 % CI] | kept | "
             "n (last) | optimizer steps |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in arms["arms"]:
        done = {s: r for s, r in runs[arm].items() if r}
        paired = [s for s in done if runs[base].get(s)]
        if not done:
            continue
        acc = [100 * r["acc_after"] for r in done.values()]
        gain = [100 * (r["acc_after"] - r["acc_before"]) for r in done.values()]
        d_acc = paired_interval([100 * (done[s]["acc_after"] - runs[base][s]["acc_after"]) for s in paired]) \
            if paired else (math.nan,) * 3
        d_n1 = paired_interval([100 * (done[s]["acc_after_n1"] - runs[base][s]["acc_after_n1"]) for s in paired]) \
            if paired else (math.nan,) * 3
        with_ood = [s for s in paired if done[s]["ood_after"] is not None and runs[base][s]["ood_after"] is not None]
        d_ood = paired_interval([100 * (done[s]["ood_after"] - runs[base][s]["ood_after"]) for s in with_ood]) \
            if with_ood else (math.nan,) * 3
        speed = paired_interval([runs[base][s]["train_s"] / done[s]["train_s"] for s in paired]) \
            if paired else (math.nan,) * 3
        row = {"seeds": sorted(done), "acc_after": sum(acc) / len(acc), "gain": sum(gain) / len(gain),
               "d_acc_vs_base": d_acc, "d_acc_n1_vs_base": d_n1, "d_ood_vs_base": d_ood, "speedup": speed, "paired_seeds": sorted(paired),
               "kept_fraction": sum(r["kept_fraction"] for r in done.values()) / len(done),
               "n_last": sum(r["n_last"] for r in done.values()) / len(done),
               "optimizer_steps": sum(r["optimizer_steps"] for r in done.values()) / len(done)}
        out[arm] = row
        fmt = lambda t, p="": f"{t[0]:+.1f}{p} [{t[1]:+.1f}, {t[2]:+.1f}]" if not math.isnan(t[1]) else f"{t[0]:+.1f}{p}"  # noqa: E731
        sp = f"{speed[0]:.2f}x [{speed[1]:.2f}, {speed[2]:.2f}]" if not math.isnan(speed[1]) else f"{speed[0]:.2f}x"
        lines.append(f"| {arm} | {len(done)} | {row['acc_after']:.1f} | {row['gain']:+.1f} | "
                     f"{fmt(d_acc) if arm != base else '—'} | {fmt(d_n1) if arm != base else '—'} | "
                     f"{fmt(d_ood) if arm != base and not math.isnan(d_ood[0]) else '—'} | "
                     f"{sp if arm != base else '1.00x'} | "
                     f"{row['kept_fraction']:.2f} | {row['n_last']:.1f} | {row['optimizer_steps']:.0f} |")
    return "\n".join(lines) + "\n", out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("run", "report"))
    p.add_argument("--root", default=str(DEFAULT_ROOT))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--arms", default=None, help="comma-separated subset (default: all)")
    p.add_argument("--seeds", default=None, help="comma-separated subset (default: arms.yaml)")
    p.add_argument("--arms-file", default=str(ARMS_FILE))
    p.add_argument("--baseline", default=None,
                   help="report: the arm every other is paired with (default: the arms file's baseline); "
                        "written to report_vs_<arm>.md/.json when it is not the default")
    args = p.parse_args(argv)
    arms = load_arms(Path(args.arms_file))
    root = Path(args.root)
    if args.command == "run":
        chosen = args.arms.split(",") if args.arms else list(arms["arms"])
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else arms["seeds"]
        jobs = [(a, s) for s in seeds for a in chosen]  # seed-major: paired results arrive together
        print(f"{len(jobs)} runs, {args.jobs} at a time, into {root}", flush=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            for i, msg in enumerate(pool.map(lambda j: run_one(root, j[0], arms["arms"][j[0]], arms["common"], j[1]),
                                             jobs), 1):
                print(f"[{i}/{len(jobs)}] {msg}", flush=True)
        return 0
    table, data = report(root, arms, args.baseline)
    stem = "report" if args.baseline in (None, arms["baseline"]) else f"report_vs_{args.baseline}"
    (root / f"{stem}.md").write_text(table)
    (root / f"{stem}.json").write_text(json.dumps(data, indent=2))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
