"""Same seeds, same metrics? A refactor's before/after check.

Trains a fixed set of short smoke-scale runs (every method file, text and visual, plus random
pruning and Dr.GRPO) through the CLI, and writes every logged metric except wall/CPU
times to one JSON file per code version. Two such files are then compared key by key:

    python -m experiments.fingerprint run --out /tmp/before.json     # at the old commit
    python -m experiments.fingerprint run --out /tmp/after.json      # at the new commit
    python -m experiments.fingerprint compare /tmp/before.json /tmp/after.json

Only the CLI (``python -m fastrl.cli train``) and ``metrics.jsonl`` are used, so the tool runs
unchanged on either side of a refactor of the package's internals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# (name, method config, scale, overrides)
RUNS: list[tuple[str, str, str, list[str]]] = [
    *[(f"text/{m}", f"methods/{m}.yaml", "smoke", ["trainer.total_steps=4"])
      for m in ("grpo", "dapo", "gspo", "cppo", "greso", "fastrl", "fastrl_dapo", "fastrl_gspo",
                "fastrl_no_mdap", "fastrl_no_ars", "fastrl_greedy_mdap", "fastrl_retention_ars",
                "fastrl_release_script")],
    *[(f"visual/{m}", f"methods/{m}.yaml", "smoke",
       ["trainer.total_steps=3", "data.task=mini-geo", "model.kind=qwen2_5_vl"])
      for m in ("grpo", "cppo", "fastrl")],
    ("random_prune", "methods/fastrl.yaml", "smoke", ["trainer.total_steps=3", "algorithm.pruner=random"]),
    ("drgrpo", "methods/grpo.yaml", "smoke", ["trainer.total_steps=3", "algorithm.advantage=drgrpo",
                                             "algorithm.loss_agg=seq-mean-token-sum-norm"]),
]

# Measured, not computed: they differ between any two runs.
TIME_PREFIXES = ("timing_s/", "cpu_s/")


def _metrics(run_dir: Path) -> list[dict]:
    lines = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        lines.append({k: v for k, v in row.items() if not k.startswith(TIME_PREFIXES)})
    return lines


def _train(spec: tuple[str, str, str, list[str]], root: Path) -> tuple[str, list[dict] | str]:
    name, config, scale, overrides = spec
    run_dir = root / name.replace("/", "__")
    cmd = [sys.executable, "-m", "fastrl.cli", "train", config, *overrides, "trainer.progress=false",
           f"trainer.run_dir={run_dir}", "--scale", scale]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode:
        return name, f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:] or proc.stdout[-300:]}"
    return name, _metrics(run_dir)


def run(out: Path, jobs: int, only: list[str] | None) -> None:
    specs = [s for s in RUNS if not only or any(s[0].startswith(o) for o in only)]
    with tempfile.TemporaryDirectory(prefix="fingerprint-") as tmp:
        with ThreadPoolExecutor(jobs) as pool:
            results = dict(pool.map(lambda s: _train(s, Path(tmp)), specs))
    out.write_text(json.dumps(results, indent=1, sort_keys=True))
    failed = [k for k, v in results.items() if isinstance(v, str)]
    print(f"{len(results)} runs -> {out}" + (f"; FAILED: {failed}" if failed else ""))


def _same(a: object, b: object, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= rtol * max(abs(a), abs(b))
    return a == b


def compare(before: Path, after: Path, rtol: float) -> int:
    """Prints every difference; returns the number of runs that differ."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differing = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {'after' if name in b else 'before'}")
            differing += 1
            continue
        ra, rb = a[name], b[name]
        if isinstance(ra, str) or isinstance(rb, str):
            print(f"{name}: failed ({ra if isinstance(ra, str) else rb})")
            differing += 1
            continue
        diffs = []
        if len(ra) != len(rb):
            diffs.append(f"{len(ra)} vs {len(rb)} log lines")
        for i, (la, lb) in enumerate(zip(ra, rb)):
            for key in sorted(set(la) | set(lb)):
                if not _same(la.get(key), lb.get(key), rtol):
                    diffs.append(f"line {i} {key}: {la.get(key)!r} -> {lb.get(key)!r}")
        keys = sum(len(line) for line in ra)
        if diffs:
            differing += 1
            print(f"{name}: {len(diffs)} differences, e.g. " + "; ".join(diffs[:4]))
        else:
            print(f"{name}: identical ({len(ra)} lines, {keys} values)")
    print(f"{differing} of {len(set(a) | set(b))} runs differ")
    return differing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.fingerprint", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train the fixed runs and write their metrics")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--only", nargs="*", help="run names starting with these (e.g. text/grpo visual)")
    c = sub.add_parser("compare", help="compare two fingerprint files")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for floats (default: exact)")
    args = p.parse_args(argv)
    if args.cmd == "run":
        run(args.out, args.jobs, args.only)
        return 0
    return 1 if compare(args.before, args.after, args.rtol) else 0


if __name__ == "__main__":
    sys.exit(main())
