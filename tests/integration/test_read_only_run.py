"""A finished run on a read-only mount, started again (issue 24, defect 7): before, an OSError
traceback on ``.lock``. Reading needs no lock: the same config says "finished, nothing to do";
anything that would train says in one line that the lock cannot be written.

Two ways to make the run dir read-only: a read-only bind mount in a private mount namespace
(``unshare -rm``; skipped where the kernel does not allow it), and, everywhere, opening the lock
made to fail with EROFS (chmod does not stop root)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fastrl.cli import main
from fastrl.training import lock as lock_module
from tests.mini.conftest import one_torch_thread, text_model_dir  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]


def _args(run: Path, model: Path, *extra: str) -> list[str]:
    return ["train", "methods/grpo.yaml", "--scale", "smoke", f"trainer.run_dir={run}", "model.source=path",
            f"model.path={model}", "data.num_train=8", "data.num_val=2", "trainer.total_steps=1",
            "trainer.progress=false", *extra]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, text_model_dir: Path) -> tuple[Path, Path]:
    run = tmp_path_factory.mktemp("ro") / "run"
    assert main(_args(run, text_model_dir)) == 0
    return run, text_model_dir


def _no_lock(monkeypatch) -> None:
    real_open = open

    def read_only(file, *args, **kwargs):
        if str(file).endswith(lock_module.LOCK_FILE):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(lock_module, "open", read_only, raising=False)


def test_a_finished_run_whose_lock_cannot_be_written_is_reported_finished(finished_run, monkeypatch, capsys):
    run, model = finished_run
    _no_lock(monkeypatch)
    capsys.readouterr()
    assert main(_args(run, model)) == 0
    assert f"{run}: finished, nothing to do" in capsys.readouterr().out


def test_training_where_the_lock_cannot_be_written_is_one_line(finished_run, monkeypatch, capsys):
    run, model = finished_run
    _no_lock(monkeypatch)
    capsys.readouterr()
    assert main(_args(run, model, "trainer.total_steps=2")) == 2
    stderr = capsys.readouterr().err  # the INFO log lines (the config's key lines) come first
    err = [line for line in stderr.splitlines() if line.startswith("fastrl: error")]
    assert "Traceback" not in stderr and len(err) == 1 and err[0].startswith(f"fastrl: error: {run / '.lock'}: cannot write the run lock "
                                               "(Read-only file system); training here needs to write"), err


def _unshare_ro(target: Path, command: str) -> subprocess.CompletedProcess:
    script = (f"mount --bind {target} {target} && mount -o remount,bind,ro {target} && "
              f"if touch {target}/.probe 2>/dev/null; then exit 99; fi; {command}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"), timeout=300)


def test_a_finished_run_on_a_read_only_bind_mount(finished_run, tmp_path):
    if shutil.which("unshare") is None or _unshare_ro(tmp_path, "true").returncode:
        pytest.skip("no read-only bind mount here (unshare -rm not allowed)")
    run, model = finished_run
    cmd = " ".join([sys.executable, "-m", "fastrl.cli", *_args(run, model)])
    proc = _unshare_ro(run.parent, cmd)
    assert proc.returncode == 0 and f"{run}: finished, nothing to do" in proc.stdout, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    proc = _unshare_ro(run.parent, cmd + " trainer.total_steps=2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"fastrl: error: {run / '.lock'}: cannot write the run lock")
