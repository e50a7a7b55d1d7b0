"""A SIGTERM to a whole `deepspeed` launch (its process group, as SLURM's preemption and Ctrl-C in a
terminal reach every process of a job): every rank exits 143 with one line, nothing is left running,
and the run resumes from its checkpoint. (SIGTERM to the `deepspeed` runner's pid alone ends only
the runner: docs/architecture.md, "Signals".)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.deepspeed, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "TORCH_EXTENSIONS_DIR": str(REPO / ".cache" / "torch_extensions"), "PYTHONPATH": str(REPO)}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_to_a_deepspeed_launch_stops_every_process_resumably(tmp_path: Path) -> None:
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
    if launcher is None:
        pytest.skip("the `deepspeed` launcher is not installed (pip install deepspeed); `make setup` installs it")
    run = tmp_path / "run"
    cmd = [launcher, "--num_gpus", "2", "--master_port", "29537", "--module", "fastrl.cli", "train",
           "methods/fastrl.yaml", "--scale", "smoke", f"trainer.run_dir={run}", "trainer.use_deepspeed=true",
           "trainer.zero_stage=3", "trainer.save_every=1", "trainer.mini_batch_size=8", "trainer.total_steps=4",
           "trainer.progress=false"]
    log = tmp_path / "launch.log"
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 600
    while not (run / "ckpt" / "latest").exists():
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # what `scancel` / a preemption does to the job's processes
    sent = time.time()
    while (proc.poll() is None or _group_alive(proc.pid)) and time.time() - sent < 90:
        time.sleep(0.1)  # poll() reaps the runner: a zombie still counts as a member of the group
    alive = _group_alive(proc.pid)
    if alive:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not alive, "processes of the launch still running 90 s after SIGTERM:\n" + log.read_text()[-3000:]
    text = log.read_text()
    assert proc.wait() != 0
    assert text.count("fastrl: interrupted (SIGTERM)") == 2, text[-3000:]  # both ranks, one line each
    assert "Traceback" not in text, text[-3000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if "timing_s/step" in line]
    assert len(steps) < 4
    again = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if "timing_s/step" in line]
    assert steps == [1, 2, 3, 4]
