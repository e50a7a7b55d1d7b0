"""Atomic checkpoints: layout, the ``latest`` pointer, RNG capture, and a SIGKILL + resume run that
must end with exactly the metrics and weights of an uninterrupted run (plain torch actor)."""

from __future__ import annotations

import errno
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fastrl.training import checkpoint as C
from fastrl.config import ModelConfig, OptimConfig, TrainerConfig
from fastrl.training.actor import Actor

REPO = Path(__file__).resolve().parents[2]
KILL_SCRIPT = Path(__file__).resolve().parent / "scripts" / "kill_resume.py"


def _actor(seed: int = 0) -> Actor:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optim = OptimConfig(lr=1e-2, weight_decay=1e-2, warmup_steps=2)
    return Actor(model, TrainerConfig(optim=optim, use_deepspeed=False), ModelConfig(dtype="float32"))


def _train(actor: Actor, seed: int) -> dict[str, float]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 4, generator=g)
    actor.backward(actor.module(x).pow(2).mean())
    return actor.step()


def _params(actor: Actor) -> dict[str, torch.Tensor]:
    return dict(actor.named_parameters_for_sync())


def test_rng_capture_restore_roundtrip() -> None:
    state = C.capture_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(3))
    C.restore_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == again[0] and first[1] == again[1] and torch.equal(first[2], again[2])
    with pytest.raises(ValueError, match="numpy"):
        C.restore_rng_state({"python": state["python"], "torch": state["torch"]})


def test_layout_pointer_and_keep(tmp_path: Path) -> None:
    actor = _actor()
    paths = []
    for step in (1, 2, 3):
        _train(actor, step)
        paths.append(C.save_checkpoint(tmp_path, step, actor, {"pos": step}, keep=2))
    root = tmp_path / "ckpt"
    assert paths[-1] == root / "step_3"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_2", "step_3"]
    assert (root / "latest").read_text().strip() == "step_3"
    assert (root / "step_3" / C.COMPLETE_FILE).is_file()
    assert C.latest_checkpoint(tmp_path) == root / "step_3"
    assert C.checkpoint_step(root / "step_3") == 3
    with pytest.raises(ValueError, match="keep=0"):
        C.save_checkpoint(tmp_path, 4, actor, {}, keep=0)


def test_latest_checkpoint_edge_cases(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert C.latest_checkpoint(tmp_path) is None  # no ckpt folder at all
    actor = _actor()
    _train(actor, 1)
    C.save_checkpoint(tmp_path, 1, actor, {})
    root = tmp_path / "ckpt"
    # A half-written folder (killed before its commit) is never returned.
    (root / ".tmp-step_2").mkdir()
    (root / ".tmp-step_2" / "junk").write_text("partial")
    assert C.latest_checkpoint(tmp_path) == root / "step_1"
    # A kill between the commit rename and the pointer update: the committed folder wins.
    _train(actor, 2)
    C.save_checkpoint(tmp_path, 2, actor, {})
    (root / "latest").write_text("step_1\n")
    assert C.latest_checkpoint(tmp_path) == root / "step_2"
    # The next save of step 2 removes the stale temp folder... and re-saving replaces step_2.
    C.save_checkpoint(tmp_path, 2, actor, {"again": True})
    assert not (root / ".tmp-step_2").exists()
    assert C.load_checkpoint(root / "step_2", _actor()) == {"again": True}
    # A pointer to something that is not a complete checkpoint is warned about; the folders decide.
    (root / "latest").write_text("step_9\n")
    with caplog.at_level("WARNING"):
        assert C.latest_checkpoint(tmp_path) == root / "step_2"
    assert "'step_9', which is not a complete checkpoint" in caplog.text


def test_load_restores_actor_rng_and_state(tmp_path: Path) -> None:
    actor = _actor()
    _train(actor, 1)
    torch.manual_seed(123)
    path = C.save_checkpoint(tmp_path, 1, actor, {"data_pos": 17, "ars": {"n": 6}})
    expected_draw = torch.rand(4)
    m_ref = _train(actor, 2)
    after_ref = _params(actor)

    fresh = _actor(seed=5)  # different initial weights: everything must come from the checkpoint
    torch.manual_seed(999)
    state = C.load_checkpoint(path, fresh)
    assert state == {"data_pos": 17, "ars": {"n": 6}}
    assert torch.equal(torch.rand(4), expected_draw)  # RNG restored to the moment of saving
    assert fresh.num_steps == 1
    m = _train(fresh, 2)
    assert m == m_ref  # same lr from the restored scheduler, same grad norm
    for name, t in _params(fresh).items():
        assert torch.equal(t, after_ref[name]), name


def test_incomplete_checkpoint_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "ckpt" / "step_3"
    bad.mkdir(parents=True)
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        C.load_checkpoint(bad, _actor())
    with pytest.raises(ValueError, match="step_N"):
        C.checkpoint_step(tmp_path / "weird")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, str(KILL_SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_sigkill_mid_save_then_resume_matches_uninterrupted(tmp_path: Path) -> None:
    full, killed = tmp_path / "full", tmp_path / "killed"
    r = _run("--out", str(full), "--steps", "6")
    assert r.returncode == 0, r.stderr[-3000:]
    r = _run("--out", str(killed), "--steps", "6", "--kill-before-commit", "4")
    assert r.returncode == -9, (r.returncode, r.stderr[-3000:])  # really SIGKILLed
    root = killed / "ckpt"
    assert (root / ".tmp-step_4").is_dir()  # the interrupted write is on disk...
    assert C.latest_checkpoint(killed) == root / "step_3"  # ...and ignored
    forgot = tmp_path / "forgot"
    shutil.copytree(killed, forgot)
    r = _run("--out", str(killed), "--steps", "6", "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    a = torch.load(full / "result.pt", weights_only=False)
    b = torch.load(killed / "result.pt", weights_only=False)
    assert len(a["metrics"]) == 6
    assert b["metrics"] == a["metrics"]  # losses, grad norms, lrs: bitwise
    for name, t in a["params"].items():
        assert torch.equal(b["params"][name], t), name
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_5", "step_6"]

    # Not vacuous: the same resume without the saved RNG states diverges.
    r = _run("--out", str(forgot), "--steps", "6", "--resume", "--forget-rng")
    assert r.returncode == 0, r.stderr[-3000:]
    c = torch.load(forgot / "result.pt", weights_only=False)
    assert c["metrics"][:3] == a["metrics"][:3]
    assert c["metrics"][3:] != a["metrics"][3:]


def test_a_checkpoint_write_past_a_file_size_limit_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """Issue 24, defect 5: a full disk during a save gave torch's ``inline_container.cc ... unexpected
    pos`` traceback, naming no file and no cause. A real limit: RLIMIT_FSIZE in a subprocess."""
    script = Path(__file__).resolve().parent / "scripts" / "full_disk_save.py"
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout's fastrl
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)
    out = proc.stdout.strip()
    assert proc.returncode == 0 and len(out.splitlines()) == 1, proc.stdout + proc.stderr
    assert out.startswith(f"TrainingError: {tmp_path / 'ckpt' / '.tmp-step_2' / 'actor_state.pt'}: cannot write "
                          "checkpoint step_2: File too large"), out
    assert "resumes from step_1" in out and "inline_container" not in out
    assert not (tmp_path / "ckpt" / ".tmp-step_2").exists()  # the partial checkpoint's space is freed
    assert [s for s, _ in C.checkpoint_candidates(tmp_path)] == [1]  # recovery: step_1 is still the newest


def test_a_full_disk_during_a_save_is_one_line_naming_the_file_and_the_cause(tmp_path: Path, monkeypatch) -> None:
    actor = _actor()
    C.save_checkpoint(tmp_path, 1, actor, {})
    real_save = torch.save

    def full_disk(obj, f, *a, **kw):  # the plain actor's file fits; the trainer state hits a full disk
        if Path(f).name == C.STATE_FILE:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(C, "_grow_errno", lambda file: errno.ENOSPC)  # what a write to the full disk gets
    with pytest.raises(Exception) as err:
        C.save_checkpoint(tmp_path, 2, actor, {})
    assert type(err.value).__name__ == "TrainingError"
    assert str(err.value).startswith(f"{tmp_path / 'ckpt' / '.tmp-step_2'}")
    assert ": cannot write checkpoint step_2: No space left on device; " in str(err.value)
    assert [s for s, _ in C.checkpoint_candidates(tmp_path)] == [1]


def test_other_save_errors_keep_their_own_exception(tmp_path: Path, monkeypatch) -> None:
    def bug(obj, f, *a, **kw):
        raise RuntimeError("a bug, not a full disk")

    monkeypatch.setattr(torch, "save", bug)
    with pytest.raises(RuntimeError, match="a bug, not a full disk"):
        C.save_checkpoint(tmp_path, 1, _actor(), {})
