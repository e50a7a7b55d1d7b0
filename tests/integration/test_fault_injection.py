"""SIGKILL a smoke run over and over, resuming after each kill: the resumed run ends with exactly
the metrics (every non-timing value) and final weights of an uninterrupted run.

At least 10 kills: aimed ones (``$FASTRL_TEST_KILL_AT``, fastrl.training.faults.fault_point) inside
both checkpoint writes, between the two renames of the end-of-run re-save (total_steps % save_every
== 0), after a step's log line, around the final line, and kills at random times. A kill that
lands after the run finished starts a new episode in a fresh run dir. Runs are forked from a
forkserver that imported the trainer once, so a kill-and-resume cycle costs ~1 s, not an
interpreter start.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from fastrl.training.metrics import read_metrics
from fastrl.training.faults import KILL_ENV

OVERRIDES = ["trainer.total_steps=4", "trainer.save_every=2", "algorithm.prompt_selector=greso"]
RANDOM = "random"
PLAN = ["after_step_line:1", "save_after_actor:1", "save_before_commit:1", "save_before_pointer:1", RANDOM,
        "after_step_line:2", RANDOM, "save_before_commit:1", "resave_between_renames:1", "save_before_pointer:1",
        RANDOM, "before_final_line:1", "before_summary:1", RANDOM]


def _train(run_dir: str, kill_at: str | None) -> None:
    os.environ.update(DS_ACCELERATOR="cpu", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if kill_at:
        os.environ[KILL_ENV] = kill_at
    from fastrl import api

    api.train("methods/fastrl.yaml", [*OVERRIDES, f"trainer.run_dir={run_dir}"], "smoke")


def _run(ctx, run_dir: Path, kill_at: str | None = None, kill_after_s: float | None = None) -> int:
    proc = ctx.Process(target=_train, args=(str(run_dir), kill_at))
    proc.start()
    proc.join(kill_after_s)
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(300)
    assert proc.exitcode is not None
    return proc.exitcode


def _comparable(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("timing_s/", "cpu_s/"))} for r in read_metrics(run_dir)]


def _check_same(full: Path, run: Path) -> None:
    assert _comparable(run) == _comparable(full)
    weights = "final/model.safetensors"
    assert (run / weights).read_bytes() == (full / weights).read_bytes()


@pytest.mark.slow
def test_repeated_sigkills_resume_to_the_uninterrupted_result(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["fastrl.api", "fastrl.training.pipeline", "fastrl.training.checkpoint"])
    full = tmp_path / "full"
    assert _run(ctx, full) == 0  # also starts the forkserver
    start = time.perf_counter()
    assert _run(ctx, tmp_path / "again") == 0  # a warm run: how long a random kill may wait
    full_s = time.perf_counter() - start
    _check_same(full, tmp_path / "again")
    rng = random.Random(16)
    kills, episodes, aimed_resave = 0, 0, False
    run = tmp_path / "episode_0"
    for point in PLAN:
        if point == RANDOM:
            code = _run(ctx, run, kill_after_s=rng.uniform(0.05, 0.9 * full_s))
        else:
            code = _run(ctx, run, kill_at=point)
        assert code in (0, -signal.SIGKILL), (point, code)
        if code == -signal.SIGKILL:
            kills += 1
            aimed_resave |= point.startswith("resave_between_renames")
        else:  # the run finished before this kill: check it, go on in a fresh run dir
            _check_same(full, run)
            episodes += 1
            run = tmp_path / f"episode_{episodes}"
    assert _run(ctx, run) == 0
    _check_same(full, run)
    assert kills >= 10 and aimed_resave, (kills, aimed_resave)
    shutil.rmtree(tmp_path)
