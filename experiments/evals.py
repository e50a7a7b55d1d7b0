"""Evaluations after training, through ``fastrl eval`` on a run's final policy.

- Paper scale, every grid table: the out-of-domain benchmarks (MathVision, MathVista, MathVerse,
  WeMath, AIME; prepared parquet files) at the paper's validation sampling, k = 1, written to
  ``<run>/eval/<name>/eval.json`` (the trainer evaluates only generator variants itself).
- Table 4, every scale: avg@k and pass@k (k = 16) on the in-domain validation set and the
  out-of-domain benchmarks, written to ``<run>/eval_k16/<name>/eval.json``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from experiments.spec import RunSpec


@dataclass(frozen=True)
class EvalJob:
    run_dir: Path
    name: str  # benchmark name as it appears in eval.json
    benchmark: str  # --benchmark argument: task[:variant] or name=path
    out_dir: Path
    k: int
    sampling: str  # greedy | paper
    template: str
    reward: str
    max_new_tokens: int
    engine: str  # hf | vllm

    def done(self) -> bool:
        return (self.out_dir / "eval.json").is_file()

    def argv(self) -> list[str]:
        return ["eval", "--model", str(self.run_dir), "--benchmark", self.benchmark, "--k", str(self.k),
                "--sampling", self.sampling, "--template", self.template, "--reward", self.reward,
                "--max-new-tokens", str(self.max_new_tokens), "--engine", self.engine, "--out", str(self.out_dir)]


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def run_config(run_dir: Path) -> dict[str, Any]:
    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: the trainer writes it at the start of a run; is {run_dir} a run directory?")
    return yaml.safe_load(p.read_text())


def eval_jobs(spec: RunSpec, *, k: int, subdir: str, include_in_domain: bool) -> list[EvalJob]:
    """The evaluations of one finished run (its composed config.yaml says what it trained on)."""
    cfg = run_config(spec.run_dir)
    d, r = cfg["data"], cfg["rollout"]
    sampling = "paper" if k > 1 or spec.scale == "paper" else "greedy"
    engine = "vllm" if spec.scale == "paper" else "hf"
    jobs: list[EvalJob] = []

    def add(name: str, bench: str, template: str, reward: str) -> None:
        jobs.append(EvalJob(spec.run_dir, name, bench, spec.run_dir / subdir / safe_name(name), k, sampling,
                            template, reward, int(r["max_new_tokens"]), engine))

    if d["task"] == "files":
        if include_in_domain:
            for f in d["val_files"]:
                add(Path(f).stem, f"{Path(f).stem}={f}", d["template"], d["reward"])
        for b in spec.ood:
            add(b.name, f"{b.name}={b.file}", b.template, b.reward)
    else:
        if include_in_domain:
            add(f"{d['task']}:{d['variant']}", f"{d['task']}:{d['variant']}", d["template"], d["reward"])
        for v in d["ood_variants"]:
            add(f"{d['task']}:{v}", f"{d['task']}:{v}", d["template"], d["reward"])
    return jobs


def run_job(job: EvalJob, launcher: str) -> None:
    """In this process (``inprocess``) or as ``python -m fastrl.cli eval`` (otherwise)."""
    if launcher == "inprocess":
        from fastrl.cli import main

        rc = main(job.argv())
    else:
        rc = subprocess.run([sys.executable, "-m", "fastrl.cli", *job.argv()]).returncode
    if rc != 0 or not job.done():
        raise RuntimeError(f"fastrl {' '.join(job.argv())} failed (exit {rc})")
