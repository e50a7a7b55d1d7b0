"""A two-node rehearsal on one machine: two ``torchrun`` agents (``--nnodes 2``, one rank each, a
c10d rendezvous on 127.0.0.1, gloo) train FastRL under ZeRO-3 to the same metrics as one 2-rank
launch; a node killed mid-run (its rank SIGKILLed after step 2, before that step's checkpoint, then
its agent) takes the other node down in bounded time, and the two nodes started again resume to the uninterrupted run's metrics.

The deepspeed equivalent (``--hostfile``) is in docs/architecture.md, "Multi-node"."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.deepspeed, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).parent / "torchrun"
TRAIN = ["-m", "fastrl.cli", "train", "methods/fastrl.yaml", "--scale", "smoke", "trainer.use_deepspeed=true",
         "trainer.zero_stage=3", "trainer.mini_batch_size=8", "trainer.total_steps=3", "trainer.save_every=1",
         "trainer.progress=false"]
DOWN_WITHIN_S = 120  # the surviving node's exit after its peer died (measured: a few seconds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    return {**env, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "TORCH_EXTENSIONS_DIR": str(REPO / ".cache" / "torch_extensions"), "PYTHONPATH": str(REPO)}


def _node(node_rank: int, port: int, run: Path, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """One 'node': a torchrun agent with one rank, in a session of its own (so it can be killed whole)."""
    cmd = [str(TORCHRUN), "--nnodes", "2", "--node_rank", str(node_rank), "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "0",
           *TRAIN, f"trainer.run_dir={run}"]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=open(log, "a"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _two_nodes(run: Path, logs: Path, node1_env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    port = _free_port()
    return [_node(0, port, run, logs / "node0.log", _env()),
            _node(1, port, run, logs / "node1.log", {**_env(), **(node1_env or {})})]


def _steps(run: Path) -> list[dict]:
    """The step lines without wall-clock and CPU times (which differ between any two runs)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("timing_s/", "cpu_s/"))}
            for r in rows if "timing_s/step" in r]


def _wait(procs, timeout: float, logs: Path) -> list[int]:
    try:
        return [p.wait(timeout=timeout) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        raise AssertionError("nodes still running; logs:\n" + "\n".join(
            f.read_text()[-2000:] for f in sorted(logs.glob("*.log"))))


def test_two_torchrun_nodes_train_resume_and_fail_together(tmp_path: Path) -> None:
    if not TORCHRUN.exists():
        pytest.skip("torchrun is not installed beside this Python")
    logs = tmp_path / "logs"
    logs.mkdir()
    # one launch of 2 ranks on one node: the reference
    ref = tmp_path / "one_launch"
    proc = subprocess.run([str(TORCHRUN), "--nproc-per-node", "2", "--master-port", str(_free_port()), *TRAIN,
                           f"trainer.run_dir={ref}"], cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # two nodes; node 1's rank dies (SIGKILL) right after logging step 2, before its checkpoint;
    # then the rest of that node (its agent) is killed too
    run = tmp_path / "two_nodes"
    nodes = _two_nodes(run, logs, {"FASTRL_TEST_KILL_AT": "after_step_line:2"})
    deadline = time.time() + 600
    while not ((run / "metrics.jsonl").is_file() and len(_steps(run)) >= 2):
        assert nodes[0].poll() is None and time.time() < deadline, (logs / "node0.log").read_text()[-3000:]
        time.sleep(0.05)
    killed = time.time()
    os.killpg(nodes[1].pid, signal.SIGKILL)
    codes = _wait(nodes, DOWN_WITHIN_S, logs)
    down_s = time.time() - killed
    print(f"node 0 down {down_s:.1f} s after node 1 was killed")
    assert codes[0] != 0 and codes[1] != 0 and down_s < DOWN_WITHIN_S
    assert len(_steps(run)) < 3  # it did stop mid-run
    # started again, the two nodes resume from the checkpoint and finish
    nodes = _two_nodes(run, logs)
    assert _wait(nodes, 600, logs) == [0, 0]
    assert _steps(run) == _steps(ref)

    def val(path: Path) -> dict:
        last = json.loads((path / "metrics.jsonl").read_text().splitlines()[-1])
        assert last["phase"] == "val_final"
        return {k: v for k, v in last.items() if k.startswith("val/")}

    assert val(run) == val(ref)
