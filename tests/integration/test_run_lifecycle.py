"""Smoke runs through the run-directory contract: a changed config is refused before any model is
built, a finished run is never retrained, --force-new moves the old run aside, a second writer
fails at once, damaged checkpoints fall back, no validation set logs no val/* metrics, SIGINT ends
with one line and code 130, and the warm-start cache does not depend on the cwd."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastrl import api
from fastrl.config import REPO_ROOT
from fastrl.training import identity as I
from fastrl.training import lock as L
from fastrl.training import run_dir as R
from fastrl.training import setup as S
from fastrl.training.metrics import read_metrics

SMOKE = ["trainer.total_steps=2", "trainer.save_every=1"]


def _train(run: Path, *overrides: str, method: str = "fastrl", force_new: bool = False) -> dict:
    return api.train(f"methods/{method}.yaml", [*SMOKE, f"trainer.run_dir={run}", *overrides], "smoke",
                     force_new=force_new)


def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(cfg):
        raise AssertionError("a model was built")

    monkeypatch.setattr("fastrl.training.pipeline.build_policy", boom)


def test_resume_with_a_changed_config_is_refused_before_any_model(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    _train(run, "trainer.total_steps=3")
    (run / "final").rename(run / "final.x")  # make it an unfinished run with checkpoints
    saved = (run / "config.yaml").read_text()
    _no_model(monkeypatch)
    with pytest.raises(L.RunDirError, match=r"algorithm.mdap.tau: 0.8 -> 0.2; .*trainer.optim.lr: 0.0001 -> 0.01"):
        _train(run, "trainer.total_steps=3", "algorithm.mdap.tau=0.2", "trainer.optim.lr=1e-2")
    with pytest.raises(L.RunDirError, match=r"method: 'fastrl' -> 'grpo'"):
        _train(run, "trainer.total_steps=3", method="grpo")
    assert (run / "config.yaml").read_text() == saved  # the identity is never rewritten


def test_a_finished_run_is_not_retrained_and_extends_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    first = _train(run)
    log, final = (run / "metrics.jsonl").read_bytes(), (run / "final" / "config.json").stat().st_mtime_ns
    with monkeypatch.context() as m:
        _no_model(m)
        again = _train(run)
        assert again["status"] == "finished" and again["summary_path"] == str(run / R.SUMMARY_FILE)
        assert again["acc_after"] == first["acc_after"]
        with pytest.raises(L.RunDirError, match=r"trainer.seed: 1 -> 7"):
            _train(run, "trainer.seed=7")
    assert (run / "metrics.jsonl").read_bytes() == log
    assert (run / "final" / "config.json").stat().st_mtime_ns == final
    # trainer.total_steps may change: the finished run continues from its last checkpoint.
    longer = _train(run, "trainer.total_steps=3")
    rows = read_metrics(run)
    assert longer["resumed_from_step"] == 2 and longer["steps"] == 3
    assert [r["step"] for r in rows if "timing_s/step" in r] == [1, 2, 3]
    assert [r.get("phase") for r in rows].count("val_final") == 1


def test_force_new_moves_the_old_run_aside(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(run, "trainer.total_steps=1")
    fresh = _train(run, "trainer.seed=7", "trainer.total_steps=1", force_new=True)
    assert fresh["resumed_from_step"] is None and "status" not in fresh
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run" + R.REPLACED_INFIX)]
    assert len(aside) == 1 and (aside[0] / "final").is_dir() and (aside[0] / "metrics.jsonl").is_file()
    assert "seed: 7" in (run / "config.yaml").read_text()


def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(run, "trainer.total_steps=3")
    (run / "final").rename(run / "final.x")
    (run / "summary.json").unlink(missing_ok=True)
    state = run / "ckpt" / "step_3" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:100])  # truncated
    again = _train(run, "trainer.total_steps=3")
    assert again["resumed_from_step"] == 2 and again["steps"] == 3
    assert [r["step"] for r in read_metrics(run) if "timing_s/step" in r] == [1, 2, 3]


def test_a_kill_after_the_final_line_leaves_one_final_line(tmp_path: Path) -> None:
    """Before, the final line came before the re-save and final/: a kill there made the resume
    append a second one. The resume now redoes the end and keeps one."""
    run = tmp_path / "run"
    _train(run)
    (run / "final").rename(run / "final.x")  # the state such a kill left: final line, no final/
    (run / "summary.json").unlink(missing_ok=True)
    again = _train(run)
    assert again["resumed_from_step"] == 2
    assert [r.get("phase") for r in read_metrics(run)].count("val_final") == 1


def test_no_validation_set_logs_no_val_metrics(tmp_path: Path) -> None:
    summary = _train(tmp_path / "run", "data.num_val=0")
    rows = read_metrics(tmp_path / "run")
    assert not [k for r in rows for k in r if k.startswith("val/")]
    assert summary["acc_after"] is None and "acc_before" not in summary
    assert rows[-1]["phase"] == "val_final"


def test_the_warm_start_cache_does_not_depend_on_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr("fastrl.mini.source.warm_start", lambda *a, out_root, **k: seen.append(out_root) or out_root)
    cfg = api.load_config("methods/grpo.yaml", [], scale="smoke")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTRL_CACHE", raising=False)
    S.resolve_policy_path(cfg)
    monkeypatch.setenv("FASTRL_CACHE", str(tmp_path / "c"))
    S.resolve_policy_path(cfg)
    assert seen == [REPO_ROOT / ".cache" / "sft", tmp_path / "c" / "sft"]


def _cli(run: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fastrl.cli", "train", "methods/grpo.yaml", "--scale", "smoke",
            f"trainer.run_dir={run}", *extra]


ENV = {**os.environ, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}


def test_a_second_writer_exits_at_once_naming_the_holder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = L.RunLock(run)
    holder.acquire()  # this process plays the running trainer
    try:
        start = time.time()
        out = subprocess.run(_cli(run), cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    finally:
        holder.release()
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"fastrl: error: {run} is in use by another run (pid {os.getpid()}, lock {run / L.LOCK_FILE}); "
        "wait for it to end or use another trainer.run_dir"]
    assert time.time() - start < 30  # before torch is imported (about 0.2 s here)


def test_sigint_is_one_line_and_code_130(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(_cli(run, "trainer.total_steps=200"), cwd=REPO_ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not any("timing_s/step" in r for r in read_metrics(run)):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "fastrl: interrupted (SIGINT)"


def test_sigterm_is_one_line_code_143_and_resumable(tmp_path: Path) -> None:
    """A scheduler's preemption (SLURM sends SIGTERM): the trainer unwinds as on Ctrl-C, releases
    the run lock and exits 143; started again, it resumes from its checkpoint and finishes."""
    run = tmp_path / "run"
    proc = subprocess.Popen(_cli(run, "trainer.total_steps=3", "trainer.save_every=1"), cwd=REPO_ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (run / "ckpt" / "step_1").is_dir():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "fastrl: interrupted (SIGTERM)"
    lock = L.RunLock(run)
    lock.acquire()  # released by the interrupted trainer
    lock.release()
    steps = sum("timing_s/step" in r for r in read_metrics(run))
    assert steps < 3
    again = subprocess.run(_cli(run, "trainer.total_steps=3", "trainer.save_every=1", "--json"), cwd=REPO_ROOT,
                           env=ENV, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert '"resumed_from_step": ' in again.stdout and '"resumed_from_step": null' not in again.stdout
    assert [r["step"] for r in read_metrics(run) if "timing_s/step" in r] == [1, 2, 3]
