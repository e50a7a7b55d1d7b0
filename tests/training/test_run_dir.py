"""The run-directory contract without a model: identity diff, the lock, moving a run aside, a torn
metrics line, damaged checkpoints falling back, a re-save killed between its renames."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fastrl.config import ModelConfig, OptimConfig, TrainerConfig, load_config, save_config
from fastrl.training import checkpoint as C
from fastrl.training import identity as I
from fastrl.training import lock as L
from fastrl.training import run_dir as R
from fastrl.training.actor import Actor
from fastrl.training.metrics import RunLogger, read_metrics
from fastrl.training.faults import KILL_ENV


def _cfg(*overrides: str):
    return load_config("methods/fastrl.yaml", list(overrides), scale="smoke")


def test_identity_names_every_changed_key_and_allows_the_resumable_ones(tmp_path: Path) -> None:
    save_config(_cfg("algorithm.mdap.tau=0.8"), tmp_path / I.CONFIG_FILE)
    I.check_identity(tmp_path, _cfg("algorithm.mdap.tau=0.8", "trainer.total_steps=9", "trainer.val_every=3",
                                    "trainer.save_every=1", "trainer.progress=true", f"trainer.run_dir={tmp_path}/x"))
    with pytest.raises(L.RunDirError) as err:
        I.check_identity(tmp_path, _cfg("algorithm.mdap.tau=0.2", "trainer.optim.lr=1e-2"))
    msg = str(err.value)
    assert "\n" not in msg
    assert "algorithm.mdap.tau: 0.8 -> 0.2" in msg and "trainer.optim.lr: 0.0001 -> 0.01" in msg
    assert "--force-new" in msg
    # FastRL -> GRPO: the components and the label.
    grpo = load_config("methods/grpo.yaml", [], scale="smoke")
    with pytest.raises(L.RunDirError, match=r"algorithm.pruner: 'mdap' -> 'none'.*method: 'fastrl' -> 'grpo'"):
        I.check_identity(tmp_path, grpo)


@pytest.mark.parametrize("scale", ["smoke", "paper"])
def test_a_run_written_before_the_optim_and_tiny_renames_is_the_same_run(tmp_path: Path, scale: str) -> None:
    """config.yaml as main 655ab51 wrote it (trainer.lr, model.hidden_size, ..., no betas, eps,
    offload or model.source) is the identity of the same run under the renamed keys; a real
    change is still named under its new key."""
    fixture = Path(__file__).parent / "data" / f"config_655ab51_fastrl_{scale}.yaml"
    shutil.copy(fixture, tmp_path / I.CONFIG_FILE)
    assert "lr_warmup_steps" in fixture.read_text() and "optim" not in fixture.read_text()
    same = load_config("methods/fastrl.yaml", [f"trainer.run_dir={tmp_path}"], scale=scale)
    I.check_identity(tmp_path, same)
    for override, change in [("trainer.optim.lr=0.5", "trainer.optim.lr: "), ("trainer.optim.eps=0.1", "trainer.optim.eps: 1e-08 -> 0.1")]:
        with pytest.raises(L.RunDirError, match=change):
            I.check_identity(tmp_path, load_config("methods/fastrl.yaml", [override], scale=scale))


def test_resumable_keys_exist_in_the_schema() -> None:
    from fastrl.config import valid_keys

    assert set(I.RESUMABLE_KEYS) <= set(valid_keys())


def _hold_lock_in_child(run_dir: Path) -> subprocess.Popen:
    code = ("import sys, time; from fastrl.training.lock import RunLock; "
            f"l = RunLock({str(run_dir)!r}); l.acquire(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_second_writer_fails_naming_the_holder_and_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = _hold_lock_in_child(tmp_path)
    try:
        with pytest.raises(L.RunDirError, match=rf"in use by another run \(pid {holder.pid},"):
            L.RunLock(tmp_path).acquire()
        with pytest.raises(L.RunDirError, match=f"pid {holder.pid}"):
            L.check_unlocked(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    lock = L.RunLock(tmp_path)
    lock.acquire()  # the OS dropped the dead holder's lock
    assert (tmp_path / L.LOCK_FILE).read_text().strip() == str(os.getpid())
    lock.release()


def test_other_ranks_of_a_run_never_probe_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = L.RunLock(tmp_path)
    lock.acquire()  # rank 0 of this launch
    try:
        monkeypatch.setenv("RANK", "1")
        L.check_unlocked(tmp_path)  # rank 1 of the same launch: no lock, no error
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(L.RunDirError):
            L.check_unlocked(tmp_path)
    finally:
        lock.release()


def test_move_aside_keeps_everything_and_the_lock(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "ckpt").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    lock = L.RunLock(run)
    lock.acquire()
    moved = R.move_aside(run)
    assert moved is not None and moved.name.startswith("run" + R.REPLACED_INFIX)
    assert sorted(p.name for p in moved.iterdir()) == ["ckpt", "metrics.jsonl"]
    assert [p.name for p in run.iterdir()] == [L.LOCK_FILE]
    assert R.move_aside(run) is None  # nothing left to move
    lock.release()


def test_a_torn_last_metrics_line_is_dropped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "phase": "val"}\n{"step": 1, "a": 1}\n{"step": 2, "a": 2}\n{"step": 3, "a"')
    with caplog.at_level("WARNING"):
        rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert str(path) in caplog.text and "torn last line 4" in caplog.text
    RunLogger(tmp_path).truncate_after(1)  # resume from step 1
    assert path.read_text() == '{"step": 0, "phase": "val"}\n{"step": 1, "a": 1}\n'
    path.write_text('{"step": 0}\n{"step": 1, \n{"step": 2}\n')  # damage before the end: an error
    with pytest.raises(ValueError, match=rf"{path} line 2 is not JSON"):
        read_metrics(tmp_path)


def test_resume_drops_the_final_line(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 2, "a": 1}\n{"step": 2, "phase": "val_final"}\n')
    RunLogger(tmp_path).truncate_after(2)
    assert read_metrics(tmp_path) == [{"step": 2, "a": 1}]


# ------------------------------------------------------------------------------------ checkpoints
def _actor(seed: int = 0) -> Actor:
    torch.manual_seed(seed)
    trainer = TrainerConfig(optim=OptimConfig(lr=1e-2, weight_decay=1e-2), use_deepspeed=False)
    return Actor(torch.nn.Linear(3, 1), trainer, ModelConfig(dtype="float32"))


def _saved(tmp_path: Path, steps: int = 3) -> Path:
    actor = _actor()
    for step in range(1, steps + 1):
        actor.backward(actor.module(torch.ones(2, 3)).sum())
        actor.step()
        C.save_checkpoint(tmp_path, step, actor, {"step": step}, keep=3)
    return tmp_path / "ckpt"


@pytest.mark.parametrize("damage", ["truncated", "zero-byte"])
@pytest.mark.parametrize("file", [C.STATE_FILE, "actor_state.pt"])
def test_a_damaged_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                             damage: str, file: str) -> None:
    root = _saved(tmp_path)
    target = root / "step_3" / file
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    with caplog.at_level("WARNING"):
        step, state = C.load_latest(tmp_path, _actor(seed=5))
    assert (step, state) == (2, {"step": 2})
    warning = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warning) == 1 and "step_3" in warning[0] and "\n" not in warning[0]


def test_every_checkpoint_damaged_is_one_error_listing_them(tmp_path: Path) -> None:
    root = _saved(tmp_path, steps=2)
    for step in (1, 2):
        (root / f"step_{step}" / C.STATE_FILE).write_bytes(b"")
    with pytest.raises(ValueError, match=r"no checkpoint loads \(.*step_2.*step_1.*\); pass --force-new"):
        C.load_latest(tmp_path, _actor())


def test_a_resave_killed_between_its_renames_stays_resumable(tmp_path: Path) -> None:
    """The end-of-run re-save of step N: old step_N moved aside, the new copy not yet renamed in."""
    root = _saved(tmp_path, steps=2)
    shutil.copytree(root / "step_2", root / ".tmp-step_2")
    os.replace(root / "step_2", root / ".old-step_2")  # the state a SIGKILL between the renames leaves
    assert (root / "latest").read_text().strip() == "step_2"
    assert C.latest_checkpoint(tmp_path) == root / ".old-step_2"
    step, state = C.load_latest(tmp_path, _actor())
    assert (step, state) == (2, {"step": 2})
    C.save_checkpoint(tmp_path, 3, _actor(), {"step": 3}, keep=2)  # the next save repairs the layout
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_2", "step_3"]


def test_the_kill_hook_fires_on_the_kth_arrival(tmp_path: Path) -> None:
    code = ("from fastrl.training.faults import fault_point as f\n"
            "for i in range(5):\n    print(i, flush=True); f('here')\n")
    env = {**os.environ, KILL_ENV: "here:3", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    start = time.time()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == -9 and out.stdout.split() == ["0", "1", "2"], (out, time.time() - start)


def test_the_readme_lists_the_resumable_keys() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Failure behaviour: the run directory", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{key}`" in section for key in I.RESUMABLE_KEYS)


def test_a_config_with_one_ars_section_reads_under_the_per_rule_sections():
    """A config.yaml written after the trainer.optim rename but before the per-rule ARS sections."""
    from fastrl.migrations import upgrade

    saved = {"trainer.optim.lr": 1e-4, "algorithm.ars.rule": "retention", "algorithm.ars.n_floor": 2,
             "algorithm.ars.period_steps": 5, "algorithm.ars.n_min": 2, "algorithm.ars.per_prompt": False}
    assert upgrade(saved) == {"trainer.optim.lr": 1e-4, "algorithm.ars.n_floor": 2,
                                    "algorithm.ars.period_steps": 5, "algorithm.ars_retention.period_steps": 5,
                                    "algorithm.ars_retention.n_min": 2, "algorithm.ars_retention.per_prompt": False}


@pytest.mark.parametrize("scale", ["smoke", "paper"])
def test_a_run_written_with_trainer_tensorboard_resumes_under_trainer_loggers(tmp_path: Path, scale: str) -> None:
    """config.yaml as main 61a3373 wrote it (``trainer.tensorboard: true|false``, before
    ``trainer.loggers``) is the same run under today's schema, with any loggers; a real change is
    still named."""
    fixture = Path(__file__).parent / "data" / f"config_61a3373_fastrl_{scale}.yaml"
    from fastrl.migrations import flatten, upgrade

    shutil.copy(fixture, tmp_path / I.CONFIG_FILE)
    assert "tensorboard: " in fixture.read_text() and "loggers" not in fixture.read_text()
    for loggers in ("[jsonl]", "[jsonl,tensorboard]", "[jsonl,tensorboard,wandb]"):
        I.check_identity(tmp_path, load_config("methods/fastrl.yaml", [f"trainer.loggers={loggers}"], scale=scale))
    with pytest.raises(L.RunDirError, match="trainer.optim.lr: "):
        I.check_identity(tmp_path, load_config("methods/fastrl.yaml", ["trainer.optim.lr=0.5"], scale=scale))
    saved = flatten(__import__("yaml").safe_load(fixture.read_text()))
    assert upgrade(saved)["trainer.loggers"] == (["jsonl", "tensorboard"] if scale == "paper" else ["jsonl"])
    assert "trainer.tensorboard" not in upgrade(saved)
