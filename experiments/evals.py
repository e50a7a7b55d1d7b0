"""Evaluations after training, through ``fastrl eval`` on a run's final policy.

- Paper scale, every grid table: the out-of-domain benchmarks (MathVision, MathVista, MathVerse,
  WeMath, AIME; prepared parquet files) at the paper's validation sampling, k = 1, written to
  ``<run>/eval/<name>/eval.json`` (the trainer evaluates only generator variants itself).
- Table 4, every scale: avg@k and pass@k (k = 16) on the in-domain validation set and the
  out-of-domain benchmarks, written to ``<run>/eval_k16/<name>/eval.json``.
- Sized by scale (``problem_limit``): at smoke a benchmark is its first ``data.num_val`` problems
  (16; a smoke target is a check that the path runs, in seconds), at mini and paper every problem
  (a generated task's 200, a file's rows).

A run's pending evaluations go to ONE ``fastrl eval`` process (``eval_groups`` / ``run_group``):
the model is loaded once, every benchmark is one batched ``generate`` call of all its problems x
k samples (``EVAL_BATCH_SIZE`` sequences at a time with the hf engine), and
``--out-per-benchmark`` writes each benchmark's ``eval.json`` where a process of its own would.
``run_groups`` runs those processes ``jobs`` at a time (mini: one per core, each with its own log).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from experiments.logs import is_finished
from experiments.spec import RunSpec
from fastrl.evaluation.metrics import benchmark_dirname

# Sequences per hf ``generate`` call in these evaluations (``fastrl eval --batch-size``). Measured on
# the mini runs of Table 4 (experiments/table4/README.md): larger batches amortise the per-token
# Python overhead of ``generate``; the samples depend on it (each batch is seeded), so it is fixed.
EVAL_BATCH_SIZE = 256


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
    threads: int = 0  # torch intra-op threads (the run's trainer.torch_threads; 0: torch's default)
    limit: int = 0  # the first N problems of each benchmark (0: all; see problem_limit)

    def done(self) -> bool:
        return (self.out_dir / "eval.json").is_file()

    def argv(self) -> list[str]:
        return ["eval", "--model", str(self.run_dir), "--benchmark", self.benchmark, "--k", str(self.k),
                "--sampling", self.sampling, "--template", self.template, "--reward", self.reward,
                "--max-new-tokens", str(self.max_new_tokens), "--engine", self.engine, "--threads", str(self.threads),
                "--limit", str(self.limit), "--out", str(self.out_dir)]


def safe_name(name: str) -> str:
    return benchmark_dirname(name)


def run_config(run_dir: Path) -> dict[str, Any]:
    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: the trainer writes it at the start of a run; is {run_dir} a run directory?")
    return yaml.safe_load(p.read_text())


def problem_limit(scale: str, cfg: dict[str, Any]) -> int:
    """Problems per benchmark of a run's evaluations: at smoke the run's own ``data.num_val`` (16),
    so that a smoke target's evaluations take seconds (at 200 problems x k = 16 each took 45-60 s);
    elsewhere 0, every problem."""
    return int(cfg["data"]["num_val"]) if scale == "smoke" else 0


def eval_jobs(spec: RunSpec, *, k: int, subdir: str, include_in_domain: bool) -> list[EvalJob]:
    """The evaluations of one finished run (its composed config.yaml says what it trained on)."""
    cfg = run_config(spec.run_dir)
    d, r = cfg["data"], cfg["rollout"]
    sampling = "paper" if k > 1 or spec.scale == "paper" else "greedy"
    engine = "vllm" if spec.scale == "paper" else "hf"
    # the run's own thread count (mini: 1, which beats torch's default by far on a loaded box)
    threads = int(cfg["trainer"]["torch_threads"])
    limit = problem_limit(spec.scale, cfg)
    jobs: list[EvalJob] = []

    def add(name: str, bench: str, template: str, reward: str) -> None:
        jobs.append(EvalJob(spec.run_dir, name, bench, spec.run_dir / subdir / safe_name(name), k, sampling,
                            template, reward, int(r["max_new_tokens"]), engine, threads, limit))

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


@dataclass(frozen=True)
class EvalGroup:
    """Evaluations of one run that share one ``fastrl eval`` process (model loaded once)."""

    jobs: tuple[EvalJob, ...]

    @property
    def run_dir(self) -> Path:
        return self.jobs[0].run_dir

    def done(self) -> bool:
        return all(j.done() for j in self.jobs)

    def argv(self) -> list[str]:
        first = self.jobs[0]
        argv = ["eval", "--model", str(first.run_dir)]
        for j in self.jobs:
            argv += ["--benchmark", j.benchmark]
        argv += ["--k", str(first.k), "--sampling", first.sampling, "--template", first.template,
                 "--reward", first.reward, "--max-new-tokens", str(first.max_new_tokens), "--engine", first.engine,
                 "--batch-size", str(EVAL_BATCH_SIZE), "--threads", str(first.threads), "--limit", str(first.limit),
                 "--out", str(first.out_dir.parent), "--out-per-benchmark"]
        for j in self.jobs[1:]:
            if j.template != first.template:
                argv += ["--benchmark-template", f"{j.name}={j.template}"]
            if j.reward != first.reward:
                argv += ["--benchmark-reward", f"{j.name}={j.reward}"]
        return argv


def _process_key(job: EvalJob) -> tuple[Any, ...]:
    """What one process shares; template and reward may differ per benchmark."""
    return (job.run_dir, job.k, job.sampling, job.max_new_tokens, job.engine, job.threads, job.limit,
            job.out_dir.parent)


def eval_groups(jobs: Sequence[EvalJob]) -> list[EvalGroup]:
    """The jobs not done yet, one group per run (per shared setting), in the order given.

    A job's out_dir must be ``<parent>/<benchmark_dirname(name)>`` (where ``--out-per-benchmark``
    writes it); ``eval_jobs`` builds them so."""
    groups: dict[tuple[Any, ...], list[EvalJob]] = {}
    for j in jobs:
        if j.out_dir.name != benchmark_dirname(j.name):
            raise ValueError(f"{j.out_dir}: an evaluation of {j.name!r} in one process with others is written to "
                             f"{j.out_dir.parent / benchmark_dirname(j.name)}")
        if not j.done():
            groups.setdefault(_process_key(j), []).append(j)
    return [EvalGroup(tuple(g)) for g in groups.values()]


def _run_fastrl(argv: list[str], launcher: str, log: Path | None = None) -> int:
    """``fastrl <argv>`` in this process (``inprocess``) or a child; a child's output goes to ``log``
    (appended) when given, else to this process's."""
    if launcher == "inprocess":
        from fastrl.cli import main

        return main(argv)
    cmd = [sys.executable, "-m", "fastrl.cli", *argv]
    if log is None:
        return subprocess.run(cmd).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode


def run_group(group: EvalGroup, launcher: str, log: Path | None = None) -> None:
    """Every evaluation of ``group`` in one ``fastrl eval`` (in this process with ``inprocess``);
    with ``log``, the child's output is appended there and its last lines are in the error."""
    rc = _run_fastrl(group.argv(), launcher, log)
    if rc != 0 or not group.done():
        tail = "" if log is None or not log.is_file() else \
            f"; last lines of {log}:\n" + "".join(log.read_text().splitlines(keepends=True)[-20:])
        raise RuntimeError(f"fastrl {' '.join(group.argv())} failed (exit {rc}){tail}")


def evaluate_finished(specs: Sequence[RunSpec], *, k: int, subdir: str, include_in_domain: bool, launcher: str,
                      jobs: int = 1) -> None:
    """Every finished run's pending evaluations, one ``fastrl eval`` process per run, ``jobs`` at a
    time; raises after all have run if any failed. A ``deepspeed`` target evaluates one run at a
    time in a plain subprocess (a GPU evaluation takes every GPU)."""
    if launcher == "deepspeed":
        launcher, jobs = "subprocess", 1
    groups = [g for s in specs if is_finished(s.run_dir)
              for g in eval_groups(eval_jobs(s, k=k, subdir=subdir, include_in_domain=include_in_domain))]
    if not groups:
        return
    started = time.perf_counter()
    failures = run_groups(groups, launcher, jobs)
    print(f"   evaluation took {time.perf_counter() - started:.1f} s ({len(groups)} processes, "
          f"{jobs if launcher == 'subprocess' else 1} at a time; {len(failures)} failed)", flush=True)
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(groups)} evaluations failed:\n" + "\n".join(failures))


def group_log(group: EvalGroup) -> Path:
    """Where a group's ``fastrl eval`` output goes when groups run side by side (``run_groups``)."""
    return group.jobs[0].out_dir.parent / "eval.log"


def run_groups(groups: Sequence[EvalGroup], launcher: str, jobs: int = 1) -> list[str]:
    """Run ``groups``, ``jobs`` processes at a time (``subprocess`` only: ``inprocess`` runs one at a
    time); returns the failures, one message each. With ``jobs > 1`` each process writes its output
    to ``group_log(group)`` and one line is printed as it starts and ends. The mini scale pins every
    evaluation to 1 thread (the run's ``trainer.torch_threads``), so a 2-core box runs two at once."""
    parallel = jobs > 1 and launcher == "subprocess" and len(groups) > 1
    labels = {id(g): f"[{i}/{len(groups)}]" for i, g in enumerate(groups, start=1)}
    t0, finished, lock = time.perf_counter(), [0], threading.Lock()

    def eta() -> str:
        """Time left at the pace so far (finished processes per wall second)."""
        with lock:
            finished[0] += 1
            done = finished[0]
        return f"{done}/{len(groups)} finished, ETA {(len(groups) - done) * (time.perf_counter() - t0) / done:.0f} s"

    def one(group: EvalGroup) -> str | None:
        names = ", ".join(j.name for j in group.jobs)
        log = group_log(group) if parallel else None
        print(f"-- {labels[id(group)]} eval@{group.jobs[0].k} {names} on {group.run_dir}"
              + (f" (log: {log})" if log else ""), flush=True)
        started = time.perf_counter()
        try:
            run_group(group, launcher, log)
        except RuntimeError as exc:
            return str(exc)
        if parallel:
            print(f"   {labels[id(group)]} done in {time.perf_counter() - started:.0f} s: {group.run_dir} ({eta()})",
                  flush=True)
        return None

    if not parallel:
        results = [one(g) for g in groups]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(one, groups))
    return [r for r in results if r is not None]
