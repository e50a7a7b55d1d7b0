"""The driver: reuse of finished runs, run-directory ownership, commands, estimates, make targets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from experiments import runner as R
from experiments.logs import SPEC_FILE
from experiments.spec import build_runs
from tests.experiments.synthetic import write_run

RunSpecKey = tuple[str, int]

REPO = Path(__file__).resolve().parents[2]
MAKE_TARGETS = ("table1", "table2", "table3", "table4", "table5", "table6", "table7", "table8", "ablation",
                "tau-sweep", "lr-sweep", "correlation", "lag", "figures", "reproduce", "calibrate")


def _spec(tmp_path, variant="grpo"):
    return next(r for r in build_runs("table3", "smoke", [1], tmp_path) if r.variant == variant)


def test_finished_runs_are_reused_not_recomputed(tmp_path, monkeypatch):
    spec = _spec(tmp_path)
    write_run(spec.run_dir, step_times=[1.0])
    launched = []
    monkeypatch.setattr(R, "launch", lambda s, launcher: launched.append(s) or 1.0)
    assert R.execute([spec], "inprocess") == [] and launched == []
    unfinished = _spec(tmp_path, "cppo")
    write_run(unfinished.run_dir, step_times=[1.0], finished=False)
    R.execute([spec, unfinished], "inprocess")
    assert launched == [unfinished]


def test_a_run_dir_of_another_command_is_refused(tmp_path):
    spec = _spec(tmp_path)
    spec.run_dir.mkdir(parents=True)
    (spec.run_dir / SPEC_FILE).write_text(json.dumps({"identity": {"config": "methods/dapo.yaml", "overrides": [],
                                                                   "scale": "smoke"}}))
    with pytest.raises(R.RunError, match="different command"):
        R.launch(spec, "inprocess")


def test_failures_are_collected_and_named(tmp_path, monkeypatch):
    spec = _spec(tmp_path)

    def boom(s, launcher):
        raise R.RunError(f"{s.run_dir}: training failed")

    monkeypatch.setattr(R, "launch", boom)
    failures = R.execute([spec], "inprocess")
    assert len(failures) == 1 and str(spec.run_dir) in failures[0][1]
    with pytest.raises(R.RunError):
        R.execute([spec], "inprocess", fail_fast=True)


def test_parallel_runs_build_each_warm_start_once_before_any_run_is_timed(tmp_path, monkeypatch):
    """jobs > 1: one `fastrl sft` per warm-start key, all before the first run launches, then every run
    once. Before, the first run of each key built its SFT and trained beside another SFT, then its
    partners trained together: on Dec 6 one seed's CPU speedup moved 1.49x -> 1.28x that way."""
    specs = build_runs("table1", "smoke", [1, 2], tmp_path)
    events: list[tuple[str, object]] = []
    monkeypatch.setattr(R, "_run_child", lambda cmd, log: events.append(("sft", tuple(cmd))) or 0)
    monkeypatch.setattr(R, "launch", lambda s, launcher: events.append(("train", (s.setting, s.variant, s.seed))) or 0.0)
    assert R.execute(specs, "subprocess", jobs=3) == []
    keys = {R.warm_start_key(s) for s in specs}
    assert len(keys) == 2  # one warm start per model size: both datasets SFT on one task
    kinds = [k for k, _ in events]
    assert kinds == ["sft"] * len(keys) + ["train"] * len(specs)
    assert all(cmd[1:4] == ("-m", "fastrl.cli", "sft") for k, cmd in events if k == "sft")
    assert sorted(e for k, e in events if k == "train") == sorted((s.setting, s.variant, s.seed) for s in specs)
    assert (specs[0].run_dir.parent.parent / "warm_start.log").parent.is_dir()


def test_a_failed_warm_start_fails_its_runs_with_its_log_and_the_others_train(tmp_path, monkeypatch):
    specs = build_runs("table1", "smoke", [1], tmp_path)
    bad = R.warm_start_key(specs[0])
    monkeypatch.setattr(R, "_run_child", lambda cmd, log: 1 if f"trainer.run_dir={specs[0].run_dir}" in cmd else 0)
    trained: list = []
    monkeypatch.setattr(R, "launch", lambda s, launcher: trained.append(s) or 0.0)
    failures = R.execute(specs, "subprocess", jobs=2)
    assert {f[0].run_dir for f in failures} == {s.run_dir for s in specs if R.warm_start_key(s) == bad}
    assert all("warm_start.log" in msg and "exit 1" in msg for _, msg in failures)
    assert trained and all(R.warm_start_key(s) != bad for s in trained)


def test_parallel_failures_are_collected(tmp_path, monkeypatch):
    specs = build_runs("table3", "smoke", [1, 2], tmp_path)

    def boom(s, launcher):
        if s.variant == "cppo":
            raise R.RunError(f"{s.run_dir}: training failed")
        return 0.0

    monkeypatch.setattr(R, "launch", boom)
    monkeypatch.setattr(R, "build_warm_starts", lambda specs, jobs: {})
    failures = R.execute(specs, "subprocess", jobs=2)
    assert sorted(f[0].seed for f in failures) == [1, 2] and all(f[0].variant == "cppo" for f in failures)


def test_commands_per_launcher(tmp_path, monkeypatch):
    spec = next(r for r in build_runs("table3", "paper", [1], tmp_path))
    cmd = R.train_command(spec, "deepspeed")
    assert cmd[:3] == ["deepspeed", "--num_gpus", "8"] and cmd[3:6] == ["--module", "fastrl.cli", "train"]
    assert cmd[-2:] == ["--scale", "paper"] and "model.path=meta-llama/Llama-3.1-8B-Instruct" in cmd
    monkeypatch.setenv("DS_HOSTFILE", "/etc/hosts.ds")
    assert R.train_command(spec, "deepspeed")[3:5] == ["--hostfile", "/etc/hosts.ds"]
    local = R.train_command(_spec(tmp_path), "subprocess", python="py")
    assert local[:4] == ["py", "-m", "fastrl.cli", "train"]


def test_estimate_from_finished_runs_of_the_setting(tmp_path):
    done = _spec(tmp_path, "grpo")
    write_run(done.run_dir, step_times=[2.0, 2.0])  # 2 s per step
    (done.run_dir / SPEC_FILE).write_text(json.dumps({"identity": done.identity(), "status": "finished",
                                                      "run_wall_s": 10.0}))  # 6 s fixed
    todo = _spec(tmp_path, "fastrl")
    e = R.estimate(todo, tmp_path, {})
    assert e.source == "finished runs of this setting"
    assert e.seconds == pytest.approx(6.0 + 2.0 * R.planned_steps(todo))
    other = next(r for r in build_runs("table1", "smoke", [1], tmp_path))
    assert R.estimate(other, tmp_path, {}).seconds is None
    cal = {other.setting: {"step_s": 1.0, "fixed_s": 5.0}}
    assert R.estimate(other, tmp_path, cal).seconds == pytest.approx(5.0 + R.planned_steps(other))


def test_plan_prints_counts_and_estimate(tmp_path, capsys):
    specs = build_runs("table3", "smoke", [1], tmp_path)
    write_run(specs[0].run_dir, step_times=[1.0])
    R.print_plan("table3", "smoke", specs, tmp_path, "inprocess")
    out = capsys.readouterr().out
    assert "4 runs, 1 finished (reused), 3 to run" in out and "estimate" in out
    R.print_plan("table1", "paper", build_runs("table1", "paper", [1], tmp_path), tmp_path, "deepspeed")
    assert "21.16 h" in capsys.readouterr().out


@pytest.mark.parametrize("scale", ["smoke", "mini"])
def test_a_fresh_machine_gets_an_estimate_from_the_committed_calibration(tmp_path, capsys, scale):
    """No finished runs: every CPU-scale setting is in experiments/calibration/<scale>.json, and the plan
    says the estimate comes from it and names `make calibrate` (issue 27: 'no measurement yet' and a
    bare python command on a fresh clone)."""
    from experiments.run import registered, resolve_target
    from experiments.spec import load_table

    # Known gap: Table 8's mini setting was added after mini.json was measured, and its calibration run
    # (SFT warm start included) did not finish on the loaded box in time; its plan line names `make calibrate`.
    calibrated = set(R.load_calibration(scale)) | ({"refcoco-qwen35_9b"} if scale == "mini" else set())
    for target in registered():
        if target in ("table6", "figures", "correlation"):  # as `make calibrate`: no GRPO-timed settings of their own
            continue
        if "variants" not in load_table(resolve_target(target).name):
            continue
        settings = {s.setting for s in build_runs(resolve_target(target).name, scale, [1], tmp_path) if not s.requires_task}
        assert settings <= calibrated, f"{target}: {sorted(settings - calibrated)} not in {scale}.json: `make calibrate SCALE={scale}`"
    R.print_plan("table3", scale, build_runs("table3", scale, [1], tmp_path), tmp_path, "inprocess")
    line = next(l for l in capsys.readouterr().out.splitlines() if "estimate:" in l)
    assert f"from the calibration in experiments/calibration/{scale}.json, measured" in line
    assert f"`make calibrate SCALE={scale}`" in line and "not estimated" not in line


def test_settings_no_calibration_covers_are_named_with_make_calibrate(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(R, "CALIBRATION_DIR", tmp_path / "none")
    R.print_plan("table3", "smoke", build_runs("table3", "smoke", [1], tmp_path), tmp_path, "inprocess")
    line = next(l for l in capsys.readouterr().out.splitlines() if "estimate:" in l)
    assert "none yet for 4 runs" in line and "`make calibrate SCALE=smoke`" in line and "python -m" not in line


@pytest.mark.parametrize("target", MAKE_TARGETS)
def test_make_targets_exist(target):
    # --no-print-directory: under `make test` the nested make would print Entering/Leaving lines.
    out = subprocess.run(["make", "--no-print-directory", "-n", target, "SCALE=paper", "SEEDS=1 2"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert re.search(rf"-m experiments\.run {re.escape(target)} --scale paper --seeds \"1 2\"", line), line


def test_make_default_scale_is_mini():
    out = subprocess.run(["make", "-n", "table1"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "--scale mini" in out.stdout


def test_a_launched_run_records_the_environment_it_ran_in(tmp_path, monkeypatch):
    """The same commit trained different floats on another machine (docs/results.md, Known limits):
    run_spec.json names the library versions and the CPU, and the run metadata carries them."""
    from experiments import export as X

    spec = _spec(tmp_path)
    monkeypatch.setattr(R, "code_commit", lambda repo: "abc123")
    monkeypatch.setattr(R, "_run_child", lambda cmd, log: log.write_text("boom\n") and 3)  # the training fails
    with pytest.raises(R.RunError):
        R.launch(spec, "subprocess")
    env = json.loads((spec.run_dir / SPEC_FILE).read_text())["environment"]
    assert env == X.environment()
    assert set(env["packages"]) == set(X.ENVIRONMENT_PACKAGES) and env["packages"]["torch"]
    assert isinstance(env["avx512"], bool) and env["python"].count(".") == 2


# A training child that starts a grandchild (as the `deepspeed` runner starts launch.py and the
# ranks) and writes both pids; it ignores nothing, so only a signal to its process group ends both.
_CHILD = """
import os, subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {g.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_child_process_and_marks_the_run_interrupted(tmp_path, monkeypatch, signum):
    spec = _spec(tmp_path)
    pids = tmp_path / "pids"
    monkeypatch.setattr(R, "train_command", lambda s, launcher, python=sys.executable: [python, "-c", _CHILD, str(pids)])

    def signal_when_started() -> None:
        deadline = time.time() + 60
        while not pids.exists() and time.time() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signum)  # the runner's own pid, as `kill` or a scheduler would

    threading.Thread(target=signal_when_started, daemon=True).start()
    start = time.time()
    with pytest.raises(R.Interrupted) as err:
        R.execute([spec], "subprocess")
    assert err.value.signum == signum and time.time() - start < 30
    child, grandchild = map(int, pids.read_text().split())
    for pid in (child, grandchild):  # the whole process group got the signal: nothing left running
        deadline = time.time() + 10
        while _alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), pid
    info = json.loads((spec.run_dir / SPEC_FILE).read_text())
    assert info["status"] == "interrupted" and info["signal"] == signal.Signals(signum).name
    assert signal.getsignal(signal.SIGTERM) is not R._forward  # the handlers are restored


_HOLDER = """
import fcntl, os, sys, time
from pathlib import Path
from tests.experiments.synthetic import write_run
run = Path(sys.argv[1]); run.mkdir(parents=True, exist_ok=True)
fh = open(run / sys.argv[3], "a+"); fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
fh.write(f"{os.getpid()}\\n"); fh.flush()
open(sys.argv[2], "w").write("held")
time.sleep(2)
write_run(run, step_times=[1.0])
"""


@pytest.mark.parametrize("lock", [".runner.lock", ".lock"])  # another experiments.run; a trainer
def test_a_run_held_by_another_live_process_is_waited_for_not_a_failure(tmp_path, monkeypatch, capsys, lock):
    """Two `experiments.run` of one target on one runs root: the second waits for the first's run
    (and for a run a plain `fastrl train` holds) and does not count it as a failure."""
    spec = _spec(tmp_path)
    held = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(spec.run_dir), str(held), lock], cwd=REPO)
    deadline = time.time() + 60
    while not held.exists():
        assert holder.poll() is None and time.time() < deadline
        time.sleep(0.05)
    monkeypatch.setattr(R, "_run_child", lambda cmd, log: pytest.fail("launched a run another process holds"))
    assert R.execute([spec], "subprocess") == []
    assert holder.wait(timeout=60) == 0
    out = capsys.readouterr().out
    assert f"is held by pid {holder.pid}" in out and f"finished by pid {holder.pid}" in out
    assert json.loads((spec.run_dir / SPEC_FILE).read_text())["status"] == "finished"


def _finished_by(spec, identity) -> None:
    write_run(spec.run_dir, step_times=[1.0])
    (spec.run_dir / SPEC_FILE).write_text(json.dumps({"identity": identity, "status": "finished"}))


def _finished_quiet_or_busy(spec, load_mean) -> None:
    write_run(spec.run_dir, step_times=[1.0])
    record = {"identity": spec.identity(), "status": "finished", "launcher": "subprocess"}
    if load_mean is not None:
        record["machine_load"] = {"cpus": 2, "samples": 10, "load_1min_mean": load_mean, "load_1min_max": load_mean}
    (spec.run_dir / SPEC_FILE).write_text(json.dumps(record))


def test_a_run_timed_on_a_busy_machine_is_refused_not_reused(tmp_path, monkeypatch):
    """On Dec 6 Table 4 retrained ten GeoQA-large runs beside the test suite; Tables 2 and 7 reused
    them as their GRPO/FastRL references, 35-40 % slower in CPU time than quiet runs of the same
    command. A run's recorded load now decides whether its times may be reused."""
    from experiments import run as RUN
    from experiments.grid import Context

    specs = [s for s in build_runs("table1", "smoke", [1], tmp_path / "runs") if s.setting == "geometry3k-vl_3b"]
    busy, quiet, unknown = specs[0], specs[1], specs[2]
    _finished_quiet_or_busy(busy, 3.6)      # 2 CPUs, 3.6 runnable on average: oversubscribed
    _finished_quiet_or_busy(quiet, 2.3)     # two runs at once on 2 CPUs, as a JOBS=2 sitting is
    _finished_quiet_or_busy(unknown, None)  # trained before the load was recorded: not judged
    assert R.timed_busy(specs) == [busy] and R.superseded(specs) == []
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                  launcher="inprocess", settings=("geometry3k-vl_3b",))
    with pytest.raises(R.RunError, match=f"(?s)1 finished runs were timed on a busy machine \\(load 3.6 on 2 CPUs"
                                          f".*{busy.run_dir}.*--set-aside-superseded"):
        RUN.run_target("table1", ctx, collect_only=True)
    launched = []
    monkeypatch.setattr(R, "launch", lambda s, launcher: launched.append(s) or 1.0)
    R.settle_superseded(specs, tmp_path / "runs", move=True)
    assert not busy.run_dir.exists() and quiet.run_dir.is_dir() and unknown.run_dir.is_dir()
    R.execute(specs, "inprocess")
    assert busy in launched and quiet not in launched and unknown not in launched


def test_a_launched_run_records_the_load_it_was_timed_under(tmp_path, monkeypatch):
    spec = _spec(tmp_path)
    monkeypatch.setattr(R, "_train", lambda s, launcher, record: write_run(s.run_dir, step_times=[1.0]) and 1.0)
    monkeypatch.setattr(R.os, "getloadavg", lambda: (5.0, 1.0, 1.0))
    monkeypatch.setattr(R.os, "cpu_count", lambda: 2)
    R.launch(spec, "subprocess")
    load = json.loads((spec.run_dir / SPEC_FILE).read_text())["machine_load"]
    assert load == {"cpus": 2, "samples": 1, "load_1min_mean": 5.0, "load_1min_max": 5.0}
    assert R.timed_busy([spec]) == [spec]
    # in-process runs are never timed, deepspeed runs are timed on their GPUs: no load kept, never refused
    for variant, launcher in (("cppo", "inprocess"), ("fastrl", "deepspeed")):
        other = _spec(tmp_path, variant)
        R.launch(other, launcher)
        assert "machine_load" not in json.loads((other.run_dir / SPEC_FILE).read_text()) and R.timed_busy([other]) == []


def test_the_load_sampler_samples_while_a_run_trains_and_at_its_end():
    with R.LoadSampler(every_s=0.01) as load:
        time.sleep(0.1)
    rec = load.record()
    assert rec["samples"] >= 2 and rec["load_1min_max"] >= rec["load_1min_mean"] >= 0 and rec["cpus"] >= 1


def test_a_finished_run_of_another_command_is_refused_not_reused(tmp_path, monkeypatch, capsys):
    """A finished run whose run_spec.json records another command (here: the warm-start recipe
    changed since) was counted as done: reused and collected beside today's runs in one table. On
    Dec 6 ten Table 1 runs trained before the SFT anneal sat among the re-measured ones."""
    from experiments import run as RUN
    from experiments.grid import Context

    specs = [s for s in build_runs("table1", "smoke", [1], tmp_path / "runs") if s.setting == "geometry3k-vl_3b"]
    old, same = specs[0], specs[1]
    _finished_by(old, {**old.identity(), "overrides": old.identity()["overrides"][1:]})  # one override fewer
    _finished_by(same, {**same.identity(), "overrides": [*same.identity()["overrides"]]})
    assert R.superseded(specs) == [old]
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                  launcher="inprocess", settings=("geometry3k-vl_3b",))
    with pytest.raises(R.RunError, match=f"(?s)1 finished runs were made by another command.*{old.run_dir}.*"
                                          "--set-aside-superseded"):
        RUN.run_target("table1", ctx, collect_only=True)

    launched = []
    monkeypatch.setattr(R, "launch", lambda s, launcher: launched.append(s) or 1.0)
    aside = tmp_path / "runs" / R.SUPERSEDED_DIR
    R.settle_superseded(specs, tmp_path / "runs", move=True)
    moved = list(aside.glob(f"*/{old.run_dir.relative_to(tmp_path / 'runs')}/metrics.jsonl"))
    assert len(moved) == 1 and not old.run_dir.exists()  # kept, out of the way, not deleted
    assert R.superseded(specs) == [] and same.run_dir.is_dir()
    R.execute(specs, "inprocess")
    assert old in launched and same not in launched
