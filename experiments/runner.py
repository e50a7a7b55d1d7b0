"""Executing runs: reuse finished ones, launch the rest, estimate how long it will take.

Launchers:
- ``inprocess`` (smoke default): ``fastrl.train`` in this Python process, one run after
  another (no interpreter start-up per run). Not for timing comparisons: the first run of the
  process pays one-off warm-up costs inside its step times (measured at smoke: GRPO's 2 steps took
  2.6 s as the first run, CPPO's 0.4 s right after), which would inflate speedups vs GRPO.
- ``subprocess`` (mini default): ``python -m fastrl.cli train ...`` per run, output in
  ``<run_dir>/train.log``; every run pays the same start-up, so times compare fairly.
- ``deepspeed`` (paper default): ``deepspeed --num_gpus G --module fastrl.cli train ...``
  (``DS_HOSTFILE`` adds ``--hostfile`` for multi-node).

Every launched run gets ``<run_dir>/run_spec.json`` (config, overrides, scale, command, wall time).
A run directory made by a different command is an error, never silently mixed: this is what lets
tables share runs (``shared_with``) safely.

Signals. SIGINT and SIGTERM (Ctrl-C, ``kill``, a scheduler's preemption) are forwarded to every
training child's process group (each child, and a ``deepspeed`` launcher's ``launch.py`` and
ranks, runs in a session of its own), the runner waits for them, marks their ``run_spec.json``
``"interrupted"``, launches nothing more and exits 128 + the signal; the runs resume when started
again. A run directory whose lock another live process holds (a second runner of the same target)
is waited for, not launched, and not counted as a failure when that process finishes it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from experiments.export import code_commit, environment, made_by
from experiments.logs import SPEC_FILE, is_finished, read_spec, summarize
from experiments.spec import RunSpec, train_argv

REPO_ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_DIR = REPO_ROOT / "experiments" / "calibration"
LAUNCHERS = ("inprocess", "subprocess", "deepspeed")
DEFAULT_LAUNCHER = {"smoke": "inprocess", "mini": "subprocess", "paper": "deepspeed"}

# What the paper reports about wall-clock at its scale (docs/paper.md) -- printed as context at paper
# scale, where no per-run estimate can be measured here.
PAPER_TIME_CONTEXT = ("the paper reports 21.16 h (GRPO) and 9.22 h (FastRL) for Llama-3.1-8B on MATH (Table 3), "
                      "and 200 FastRL steps in 8.8 h at low policy lag (Fig. 6)")


class RunError(RuntimeError):
    """A run failed or its directory belongs to another command."""


class Interrupted(Exception):
    """The runner got SIGINT/SIGTERM; its children were stopped and marked interrupted."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted ({signal.Signals(signum).name})")


_children: set[subprocess.Popen] = set()  # live training children, each leading its process group
_stop: list[int] = []  # the signal that stopped this runner, once one has
_guard = threading.RLock()  # re-entrant: the handler runs in the main thread, which may hold it


def _forward(signum: int, frame: Any) -> None:
    """Signal handler: remember the signal and pass it to every child's whole process group."""
    with _guard:
        if not _stop:
            _stop.append(signum)
        for child in list(_children):
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass


def _raise_in_process(signum: int, frame: Any) -> None:
    """In-process runs: the signal unwinds the trainer where it is, as Ctrl-C does."""
    _forward(signum, frame)
    raise KeyboardInterrupt


def forward_signals(launcher: str) -> Any:
    """Install the SIGINT/SIGTERM handlers (main thread only); returns a restorer."""
    _stop.clear()
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    handler = _raise_in_process if launcher == "inprocess" else _forward
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return restore


def stopped() -> int | None:
    """The signal this runner was stopped with, or None."""
    return _stop[0] if _stop else None


def held_by(run_dir: Path) -> str | None:
    """The pid holding ``run_dir``'s run lock (``fastrl.training.run_dir.RunLock``), or None if free."""
    import fcntl

    path = Path(run_dir) / ".lock"
    if not path.is_file():
        return None
    with open(path) as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return fh.read().strip() or "unknown"
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return None


class RunnerLock:
    """``<run_dir>/.runner.lock``: an flock held by the runner that launches the run, so a second
    ``experiments.run`` of the same run waits here (``__enter__`` returns the pid it waited for,
    or None) before it starts a trainer, which would fail on the trainer's own lock."""

    def __init__(self, run_dir: Path, poll_s: float = 0.5) -> None:
        self.path, self.poll_s = Path(run_dir) / ".runner.lock", poll_s
        self._fh: Any = None

    def __enter__(self) -> str | None:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+")
        waited_for = None
        while True:
            try:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if waited_for is None:
                    self._fh.seek(0)
                    waited_for = self._fh.read().strip() or "unknown"
                    _say(f"   {self.path.parent} is held by pid {waited_for} (another runner): waiting for it to end")
                if stopped() is not None:
                    self._fh.close()
                    raise Interrupted(stopped()) from None
                time.sleep(self.poll_s)
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"{os.getpid()}\n")
        self._fh.flush()
        return waited_for

    def __exit__(self, *exc: Any) -> None:
        import fcntl

        fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()


def wait_while_held(run_dir: Path, poll_s: float = 1.0) -> str | None:
    """Wait while another process holds ``run_dir``'s lock; returns the holder's pid (None: free)."""
    holder = held_by(run_dir)
    if holder is None:
        return None
    _say(f"   {run_dir} is held by pid {holder} (another runner or trainer): waiting for it to end")
    while held_by(run_dir) is not None and stopped() is None:
        time.sleep(poll_s)
    return holder


def unique(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """Drop repeated run directories (tables sharing a run); conflicting commands are an error."""
    seen: dict[Path, RunSpec] = {}
    out: list[RunSpec] = []
    for s in specs:
        prev = seen.get(s.run_dir)
        if prev is None:
            seen[s.run_dir] = s
            out.append(s)
        elif prev.identity() != s.identity():
            raise RunError(f"{s.run_dir}: asked for by {prev.target} and {s.target} with different commands:\n"
                           f"  {prev.identity()}\n  {s.identity()}")
    return out


def check_owner(spec: RunSpec) -> None:
    """A run directory holds the run of one command only."""
    found = read_spec(spec.run_dir)
    if found and found.get("identity") != spec.identity():
        raise RunError(
            f"{spec.run_dir} holds a run of a different command ({SPEC_FILE}):\n  found    {found.get('identity')}\n"
            f"  expected {spec.identity()}\nDelete the directory or use another RUNS root."
        )


SUPERSEDED_DIR = ".superseded"  # <runs root>/.superseded/<stamp>/<the run's path under the root>


def superseded(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """The specs whose directory holds a *finished* run of another command: the configs changed
    since it was trained (a warm-start recipe, a learning rate). Counted as done, it would be
    reused and collected beside runs of today's command in one table."""
    return [s for s in specs
            if is_finished(s.run_dir) and (found := read_spec(s.run_dir)) and not made_by(found, s)]


# A run's times are measurements only where it had the CPUs it asked for. On Dec 6 Table 4 retrained
# ten GeoQA-large runs beside the test suite; Tables 2 and 7 then reused them as their GRPO and FastRL
# references, 35-40 % slower in CPU time than the same runs trained quietly (accuracies identical).
# Over this margin of runnable threads above the CPU count, a run counts as timed on a busy machine.
OVERSUBSCRIBED_MARGIN = 0.5
LOAD_SAMPLE_S = 5.0


class LoadSampler:
    """Samples the machine's 1-minute load average while a run trains (every ``LOAD_SAMPLE_S`` and
    at its end); ``record()`` is what ``run_spec.json`` keeps as ``machine_load``."""

    def __init__(self, every_s: float = LOAD_SAMPLE_S) -> None:
        self.every_s = every_s
        self.samples: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        try:
            self.samples.append(os.getloadavg()[0])
        except OSError:  # no load average on this platform: nothing recorded, nothing refused
            pass

    def _loop(self) -> None:
        while not self._done.wait(self.every_s):
            self._sample()

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()
        self._sample()

    def record(self) -> dict[str, Any]:
        n = len(self.samples)
        return {"cpus": os.cpu_count() or 1, "samples": n,
                "load_1min_mean": round(sum(self.samples) / n, 2) if n else None,
                "load_1min_max": round(max(self.samples), 2) if n else None}


def oversubscribed(written: dict[str, Any]) -> str | None:
    """Why a finished run's times are not measurements (more runnable threads than CPUs, on average,
    while it trained), or None; None too for runs trained before the load was recorded."""
    load = written.get("machine_load") or {}
    mean, cpus = load.get("load_1min_mean"), load.get("cpus")
    if mean is None or not cpus or mean <= cpus + OVERSUBSCRIBED_MARGIN:
        return None
    return f"load {mean:.1f} on {cpus} CPUs while it trained"


def timed_busy(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """The specs whose directory holds a finished run of today's command whose times were taken on
    an oversubscribed machine (``oversubscribed``): reused, it would put them into a table."""
    return [s for s in specs
            if is_finished(s.run_dir) and (found := read_spec(s.run_dir)) and made_by(found, s) and oversubscribed(found)]


def set_aside(specs: Sequence[RunSpec], runs_root: Path) -> Path:
    """Move the run directories of ``specs`` under ``<runs_root>/.superseded/<stamp>/`` (their
    paths under the root kept), out of every ``runs/<target>/...`` glob; returns that folder."""
    dest_root = Path(runs_root) / SUPERSEDED_DIR / time.strftime("%Y%m%d-%H%M%S")
    for s in specs:
        try:
            rel = Path(s.run_dir).relative_to(runs_root)
        except ValueError:  # a run directory outside the root: keep its last four parts
            rel = Path(*Path(s.run_dir).parts[-4:])
        (dest_root / rel).parent.mkdir(parents=True, exist_ok=True)
        Path(s.run_dir).rename(dest_root / rel)
    return dest_root


def settle_superseded(specs: Sequence[RunSpec], runs_root: Path, *, move: bool, dry_run: bool = False) -> None:
    """Finished runs of another command, and runs timed on a busy machine (``timed_busy``), are never
    reused silently: refused with the fix, or with ``move`` set aside (``set_aside``) so that today's
    command trains them again."""
    old, busy = superseded(specs), timed_busy(specs)
    if not old and not busy:
        return
    why = [f"{len(old)} finished runs were made by another command than the configs now ask for (their run_spec.json)"] if old else []
    why += [f"{len(busy)} finished runs were timed on a busy machine ({oversubscribed(read_spec(busy[0].run_dir))}, "
            f"run_spec.json machine_load), so their times are not measurements"] if busy else []
    both = old + busy
    listed = "\n".join(f"  {s.run_dir}" for s in both[:10]) + (f"\n  ... and {len(both) - 10} more" if len(both) > 10 else "")
    fix = (f"EXP_FLAGS=--set-aside-superseded (python -m experiments.run ... --set-aside-superseded) moves them to "
           f"{Path(runs_root) / SUPERSEDED_DIR}/<time>/ and trains them again; or delete them")
    if dry_run:
        print(f"   refused: {'; '.join(why)}:\n{listed}\n   {fix}", flush=True)
    elif not move:
        raise RunError(f"{'; '.join(why)}:\n{listed}\n{fix}")
    else:
        print(f"   set aside {len(both)} finished runs ({'; '.join(why)}): {set_aside(both, runs_root)}", flush=True)


def train_command(spec: RunSpec, launcher: str, python: str = sys.executable) -> list[str]:
    if launcher == "deepspeed":
        cmd = ["deepspeed", "--num_gpus", str(spec.gpus)]
        if os.environ.get("DS_HOSTFILE"):
            cmd += ["--hostfile", os.environ["DS_HOSTFILE"]]
        return [*cmd, "--module", "fastrl.cli", *train_argv(spec)]
    return [python, "-m", "fastrl.cli", *train_argv(spec)]


def _write_spec(spec: RunSpec, launcher: str, extra: dict[str, Any]) -> None:
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    record = {"identity": spec.identity(), "target": spec.target, "group": spec.group, "dataset": spec.dataset,
              "model": spec.model, "variant": spec.variant, "seed": spec.seed, "labels": spec.labels,
              "launcher": launcher, "command": shlex.join(train_command(spec, launcher)), **extra}
    tmp = spec.run_dir / (SPEC_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(spec.run_dir / SPEC_FILE)


def launch(spec: RunSpec, launcher: str) -> float:
    """Train one run; returns its wall-clock seconds. Raises RunError on failure."""
    if launcher not in LAUNCHERS:
        raise RunError(f"launcher {launcher!r}: choose one of {LAUNCHERS}")
    check_owner(spec)
    commit = code_commit(REPO_ROOT)  # recorded so a table can name the code each run was trained with
    env = environment()  # and the library versions and CPU, which move its floats too

    def record(**fields: Any) -> None:
        _write_spec(spec, launcher, {"code_commit": commit, "environment": env, **fields})

    with RunnerLock(spec.run_dir) as other_runner:
        return _launch_held(spec, launcher, record, other_runner)


def _launch_held(spec: RunSpec, launcher: str, record: Any, other_runner: str | None) -> float:
    """:func:`launch` with this runner holding the run's runner lock."""
    holder = wait_while_held(spec.run_dir) or other_runner
    if holder is not None and is_finished(spec.run_dir):
        if (read_spec(spec.run_dir) or {}).get("status") != "finished":
            record(status="finished", trained_by_pid=holder)
        _say(f"   {spec.run_dir}: finished by pid {holder}")
        return 0.0
    if stopped() is not None:
        raise Interrupted(stopped())
    record(status="running")
    with LoadSampler() as load:
        wall = _train(spec, launcher, record)
    if not is_finished(spec.run_dir):
        raise RunError(f"{spec.run_dir}: training returned but metrics.jsonl has no final 'val_final' line")
    # Only a subprocess run's times are CPU measurements judged by the load: in-process runs are never
    # timed (the module docstring), and a deepspeed run at paper scale is timed on its GPUs, where a
    # busy host (dataloader workers) must not send hours of training back to be retrained.
    machine_load = {"machine_load": load.record()} if launcher == "subprocess" else {}
    record(status="finished", run_wall_s=wall, **machine_load)
    if (busy := oversubscribed(machine_load)) is not None:
        _say(f"   {spec.run_dir}: timed on a busy machine ({busy}): its times are not measurements; "
             f"train it again with nothing else running (EXP_FLAGS=--set-aside-superseded)")
    return wall


def _train(spec: RunSpec, launcher: str, record: Any) -> float:
    """Train ``spec`` in this process or a child; its wall-clock seconds. Records failures."""
    start = time.perf_counter()
    if launcher == "inprocess":
        from fastrl.api import train

        try:
            train(spec.config, list(spec.overrides), spec.scale)
        except KeyboardInterrupt:
            signum = stopped() or signal.SIGINT
            record(status="interrupted", signal=signal.Signals(signum).name)
            raise Interrupted(signum) from None
        except Exception as exc:  # noqa: BLE001 -- recorded, then re-raised with the run named
            record(status="failed", error=traceback.format_exc())
            raise RunError(f"{spec.run_dir}: training failed: {exc!r}") from exc
    else:
        log = spec.run_dir / "train.log"
        returncode = _run_child(train_command(spec, launcher), log)
        if stopped() is not None:
            record(status="interrupted", signal=signal.Signals(stopped()).name, returncode=returncode)
            raise Interrupted(stopped())
        proc = subprocess.CompletedProcess(train_command(spec, launcher), returncode)
        if proc.returncode != 0:
            tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
            record(status="failed", returncode=proc.returncode)
            raise RunError(f"{spec.run_dir}: `{shlex.join(train_command(spec, launcher))}` exited "
                           f"{proc.returncode}; last lines of {log}:\n{tail}")
    return time.perf_counter() - start


def _run_child(cmd: list[str], log: Path) -> int:
    """Run ``cmd`` in a session of its own (so a signal reaches its whole process group, e.g. a
    ``deepspeed`` launcher's ``launch.py`` and ranks), output appended to ``log``; its exit code."""
    with open(log, "a") as fh, _guard:
        if _stop:
            return -_stop[0]
        child = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        _children.add(child)
    try:
        return child.wait()
    finally:
        with _guard:
            _children.discard(child)


# ---------------------------------------------------------------------------------------- estimate
@dataclass
class Estimate:
    seconds: float | None  # None: unknown
    source: str  # how it was obtained


def planned_steps(spec: RunSpec) -> int:
    from fastrl.config import load_config

    return load_config(spec.config, list(spec.overrides), scale=spec.scale).trainer.total_steps


def _measured_costs(runs_root: Path, scale: str, setting: str) -> tuple[float, float] | None:
    """(seconds per training step, fixed seconds per run) from finished runs of this setting."""
    step_s, fixed_s = [], []
    for spec_file in Path(runs_root).glob(f"*/{scale}/{setting}/*/seed*/{SPEC_FILE}"):
        info = json.loads(spec_file.read_text())
        if info.get("status") != "finished" or "run_wall_s" not in info:
            continue
        s = summarize(spec_file.parent)
        if s.steps:
            step_s.append(s.train_time_s / s.steps)
            fixed_s.append(max(0.0, float(info["run_wall_s"]) - s.train_time_s))
    if not step_s:
        return None
    return sum(step_s) / len(step_s), sum(fixed_s) / len(fixed_s)


def load_calibration(scale: str) -> dict[str, dict[str, float]]:
    p = CALIBRATION_DIR / f"{scale}.json"
    return json.loads(p.read_text())["settings"] if p.is_file() else {}


def estimate(spec: RunSpec, runs_root: Path, calibration: dict[str, dict[str, float]]) -> Estimate:
    steps = planned_steps(spec)
    costs = _measured_costs(runs_root, spec.scale, spec.setting)
    if costs is not None:
        return Estimate(costs[1] + steps * costs[0], "finished runs of this setting")
    if spec.setting in calibration:
        c = calibration[spec.setting]
        return Estimate(c["fixed_s"] + steps * c["step_s"], "calibration file")
    return Estimate(None, "unknown")


def fmt_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def print_plan(target: str, scale: str, specs: Sequence[RunSpec], runs_root: Path, launcher: str,
               jobs: int = 1) -> float | None:
    """Print what will run and how long it should take; returns the known part in seconds."""
    pending = [s for s in specs if not is_finished(s.run_dir)]
    skipped = [s for s in pending if s.requires_task and not task_available(s.requires_task)]
    pending = [s for s in pending if s not in skipped]
    print(f"== {target} at scale {scale}: {len(specs)} runs, {len(specs) - len(pending) - len(skipped)} finished "
          f"(reused), {len(pending)} to run, launcher {launcher}, {jobs} at a time")
    for s in skipped:
        print(f"   SKIP {s.run_dir}: needs the generated task {s.requires_task!r}, which fastrl.mini.tasks "
              f"does not provide")
    if not pending:
        return 0.0
    calibration = load_calibration(scale)
    estimates = [estimate(s, runs_root, calibration) for s in pending]
    total = sum(e.seconds for e in estimates if e.seconds is not None)
    unknown = [s for s, e in zip(pending, estimates) if e.seconds is None]
    if scale == "paper":
        gpus = sorted({s.gpus for s in pending})
        print(f"   estimate: not measurable here; {len(pending)} runs on {gpus} GPUs each; {PAPER_TIME_CONTEXT}")
        return None
    print(estimate_line(scale, [e.source for e in estimates], total,
                        sorted({s.setting for s in unknown}), jobs), flush=True)
    return total


def calibration_origin(scale: str) -> str:
    """Where a calibration estimate comes from, for the plan: the file, when and where it was measured."""
    p = CALIBRATION_DIR / f"{scale}.json"
    if not p.is_file():
        return f"no calibration file {p.relative_to(CALIBRATION_DIR.parent.parent)}"
    meta = json.loads(p.read_text())
    return (f"the calibration in {p.relative_to(CALIBRATION_DIR.parent.parent)}, measured {meta.get('measured_at', '?')} "
            f"on a {meta.get('cpus', '?')}-CPU machine, which may not be this one")


def estimate_line(scale: str, sources: Sequence[str], total: float, unknown_settings: Sequence[str],
                  jobs: int) -> str:
    """One line: how long the pending runs should take and where each part of the number comes from."""
    n_runs, n_cal = sum(src != "unknown" for src in sources), sum(src == "calibration file" for src in sources)
    n_unknown = len(sources) - n_runs
    fix = f"`make calibrate SCALE={scale}` times them on this machine"
    if not n_runs:
        return (f"   estimate: none yet for {n_unknown} runs: no finished run here and no entry in "
                f"experiments/calibration/{scale}.json for {', '.join(unknown_settings)}; {fix}")
    parallel = f" (~{fmt_duration(total / jobs)} with {jobs} runs at once)" if jobs > 1 else ""
    parts = [f"{n_runs - n_cal} from finished runs here"] if n_runs > n_cal else []
    if n_cal:
        parts.append(f"{n_cal} from {calibration_origin(scale)} (`make calibrate SCALE={scale}` re-times this machine)")
    msg = f"   estimate: {fmt_duration(total)} of run time for {n_runs} runs{parallel}: {'; '.join(parts)}"
    if n_unknown:
        msg += f"; {n_unknown} runs not estimated ({', '.join(unknown_settings)} never timed): {fix}"
    return msg


def task_available(task: str) -> bool:
    from fastrl.mini.tasks import TASKS

    return task in TASKS


def default_jobs(launcher: str) -> int:
    """Runs at once when ``--jobs`` is not given: one per CPU core for ``subprocess`` runs (mini
    scale pins torch to 1 thread per run), else 1 (in-process runs share one interpreter;
    deepspeed runs each take every GPU)."""
    return max(1, os.cpu_count() or 1) if launcher == "subprocess" else 1


def warm_start_key(spec: RunSpec) -> tuple[str, ...]:
    """What decides a run's SFT warm start (fastrl.mini.sft caches by it): the scale, the task
    and every ``model.*`` override. Runs with equal keys share one cached warm start, e.g. the
    Geometry3K and GeoQA8K stand-ins of one model size (both SFT on mini-geo's default variant)."""
    return (spec.scale, *sorted(o for o in spec.overrides if o.startswith(("model.", "data.task="))))


def _say(line: str) -> None:
    # one write per line: print() writes text and newline separately, which interleaves across threads
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _launch_and_report(s: RunSpec, launcher: str, label: str) -> tuple[RunSpec, str | None]:
    name = f"{s.group}/{s.scale}/{s.setting}/{s.variant}/seed{s.seed}"
    _say(f"-- {label} {name}")
    try:
        wall = launch(s, launcher)
    except RunError as exc:
        _say(f"   FAILED {label} {name}: {exc}")
        return s, str(exc)
    _say(f"   done {label} {name} in {fmt_duration(wall)}")
    return s, None


def execute(specs: Sequence[RunSpec], launcher: str, *, fail_fast: bool = False,
            jobs: int = 1) -> list[tuple[RunSpec, str]]:
    """Run every unfinished spec, ``jobs`` at a time; returns the failures as (spec, message).

    With ``jobs > 1`` (``subprocess`` launcher only) the SFT warm starts the runs read are built
    first (``build_warm_starts``, untimed), then every run trains ``jobs`` at a time under the same
    load. A run that built its own warm start would be timed beside another SFT, or alone while the
    runs of its warm start wait: measured Dec 6, that moved one seed's CPU-time speedup 1.49x ->
    1.28x with identical accuracies.
    """
    todo = [s for s in specs if not is_finished(s.run_dir)
            and not (s.requires_task and not task_available(s.requires_task))]
    restore = forward_signals(launcher)
    try:
        return _execute(todo, launcher, fail_fast=fail_fast, jobs=jobs)
    finally:
        restore()


def _execute(todo: list[RunSpec], launcher: str, *, fail_fast: bool, jobs: int) -> list[tuple[RunSpec, str]]:
    labels = {id(s): f"[{i}/{len(todo)}]" for i, s in enumerate(todo, start=1)}
    if jobs <= 1 or launcher != "subprocess" or len(todo) <= 1:
        failures: list[tuple[RunSpec, str]] = []
        for s in todo:
            _, err = _launch_and_report(s, launcher, labels[id(s)])
            if err is not None:
                if fail_fast:
                    raise RunError(err)
                failures.append((s, err))
        return failures
    sft_failed = build_warm_starts(todo, jobs)
    if sft_failed and fail_fast:
        raise RunError(next(iter(sft_failed.values())))
    failures = [(s, sft_failed[warm_start_key(s)]) for s in todo if warm_start_key(s) in sft_failed]
    ready = [s for s in todo if warm_start_key(s) not in sft_failed]
    return failures + _execute_parallel(ready, launcher, labels, fail_fast=fail_fast, jobs=jobs)


def sft_command(spec: RunSpec, python: str = sys.executable) -> list[str]:
    """``fastrl sft`` with the run's own config, overrides and scale: builds (or reuses) the warm
    start that its ``fastrl train`` reads from the cache."""
    _train, *rest = train_argv(spec)
    return [python, "-m", "fastrl.cli", "sft", *rest]


def build_warm_starts(specs: Sequence[RunSpec], jobs: int) -> dict[tuple[str, ...], str]:
    """Build (or find cached) the warm start of every ``warm_start_key`` among ``specs``, ``jobs`` at
    a time, each logged to ``<setting dir>/warm_start.log``; returns {key: failure message}."""
    first: dict[tuple[str, ...], RunSpec] = {}
    for s in specs:
        first.setdefault(warm_start_key(s), s)

    def build(item: tuple[int, RunSpec]) -> tuple[tuple[str, ...], str | None]:
        i, spec = item
        log = spec.run_dir.parent.parent / "warm_start.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        _say(f"-- warm start {i}/{len(first)} for {spec.setting} (untimed; log {log})")
        rc = _run_child(sft_command(spec), log)
        if rc == 0:
            return warm_start_key(spec), None
        if stopped() is not None:
            raise Interrupted(stopped())
        return warm_start_key(spec), f"the warm start of {spec.setting} failed (exit {rc}); see {log}"

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(build, enumerate(first.values(), start=1)))
    return {key: msg for key, msg in results if msg is not None}


def _execute_parallel(todo: list[RunSpec], launcher: str, labels: dict[int, str], *, fail_fast: bool,
                      jobs: int) -> list[tuple[RunSpec, str]]:
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    failures: list[tuple[RunSpec, str]] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running: set[Future[tuple[RunSpec, str | None]]] = {
            pool.submit(_launch_and_report, s, launcher, labels[id(s)]) for s in todo}
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                spec, err = fut.result()
                if err is not None:
                    failures.append((spec, err))
                    if fail_fast:
                        for f in running:
                            f.cancel()
                        raise RunError(err)
    return failures
