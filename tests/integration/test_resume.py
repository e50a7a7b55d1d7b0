"""A run killed with SIGKILL and resumed ends with the same metrics as an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fastrl.training.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
COMPARED = ("reward/mean", "prune/kept", "rollout/n", "actor/pg_loss", "tokens/generated", "val/accuracy")


def _cmd(run_dir: Path, steps: int) -> list[str]:
    return [
        sys.executable, "-m", "fastrl.cli", "train", "methods/fastrl.yaml", "--scale", "smoke",
        f"trainer.run_dir={run_dir}", f"trainer.total_steps={steps}", "trainer.save_every=1",
        "algorithm.prompt_selector=greso",  # GRESO state must survive the restart too
    ]


def _by_step(rows: list[dict]) -> dict[tuple[int, str], dict]:
    return {(r["step"], r.get("phase", "train")): r for r in rows}


def test_sigkill_then_resume_matches_uninterrupted(tmp_path):
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1"}
    steps = 4
    full = tmp_path / "full"
    subprocess.run(_cmd(full, steps), cwd=REPO, env=env, check=True, capture_output=True, timeout=600)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(killed, steps), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not (killed / "ckpt" / "step_2").exists():
        assert proc.poll() is None, "training ended before the second checkpoint"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run(_cmd(killed, steps), cwd=REPO, env=env, check=True, capture_output=True, timeout=600)

    a, b = _by_step(read_metrics(full)), _by_step(read_metrics(killed))
    assert sorted(a) == sorted(b)
    for step in sorted(a):
        for key in COMPARED:
            if key in a[step]:
                assert a[step][key] == b[step][key], (step, key, a[step][key], b[step][key])
