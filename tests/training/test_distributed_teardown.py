"""Every entry point that may join a process group ends through ``exit_process``.

CI lost 2-rank runs (the ZeRO-Offload equivalence run, then the ZeRO-3 data-parallel one) to an
abort at interpreter teardown (rc -6, "terminate called without an active exception") after every
result had been written, even with the group destroyed first. The mechanism, reproduced here:
CPython 3.11 stops daemon threads during finalization with ``pthread_exit``; a thread that is
inside a torch call with the GIL released unwinds through C++ that must not throw, and the process
aborts. ``fastrl.training.distributed.exit_process`` runs the atexit handlers, flushes and
``os._exit``s instead, as ``multiprocessing`` ends its children.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("fastrl", "tests", "dev", "bench", "experiments")

# A daemon thread blocked in a torch store wait (GIL released) that returns only once the main
# thread is finalizing: a module-level object's __del__ sets the key, then gives it time to wake.
SCRIPT = """
import atexit, datetime, sys, threading, time
from pathlib import Path
import torch.distributed as torch_dist
from fastrl.training import distributed as D

marker = Path(sys.argv[1])
atexit.register(lambda: marker.write_text("atexit ran"))

class WakeAtTeardown:
    def __init__(self, store):
        self.store = store
    def __del__(self):
        self.store.set("wake", "1")
        time.sleep(3)

def wait_for_teardown(store):
    store.wait(["wake"])

store = torch_dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=60))
# its own client: a set() on the waiting client's socket would queue behind the wait
waker = WakeAtTeardown(torch_dist.TCPStore("127.0.0.1", store.port, 1, False))
D.init_distributed(single_process_group=True)
threading.Thread(target=wait_for_teardown, args=(store,), daemon=True).start()
print("results written", flush=True)
if sys.argv[2] == "exit_process":
    D.exit_process(0)
D.shutdown_distributed()
"""


def _run(tmp_path: Path, ending: str) -> tuple[subprocess.CompletedProcess, Path]:
    marker = tmp_path / f"{ending}.atexit"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(marker), ending], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                                                       "PATH": "/usr/bin:/bin"})
    return proc, marker


def test_a_plain_exit_aborts_when_a_daemon_thread_is_in_torch(tmp_path: Path) -> None:
    """The failure itself, so the test below shows the cure and not a quiet interpreter."""
    if sys.version_info >= (3, 14):
        pytest.skip("Python 3.14 hangs daemon threads at finalization instead of pthread_exit")
    proc, _ = _run(tmp_path, "plain")
    assert "results written" in proc.stdout
    assert proc.returncode == -6, (proc.returncode, proc.stderr[-2000:])
    assert "terminate called without an active exception" in proc.stderr


def test_exit_process_ends_cleanly_and_runs_atexit(tmp_path: Path) -> None:
    proc, marker = _run(tmp_path, "exit_process")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "results written" in proc.stdout
    assert marker.read_text() == "atexit ran"


def _called_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def _is_script(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)


def test_scripts_that_may_join_a_group_end_through_exit_process() -> None:
    """A script that calls ``init_distributed`` or builds a ``Trainer`` (whose DeepSpeed engine
    joins a group) ends through ``exit_process`` (the CLI through ``entry``, which calls it)."""
    offenders = []
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            called = _called_names(tree)
            may_join = {"init_distributed", "Trainer"} & called
            if _is_script(tree) and may_join and "exit_process" not in called:
                offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"end these scripts with fastrl.training.distributed.exit_process(code): {offenders}"


def test_the_fastrl_command_is_the_entry_that_exits_through_exit_process() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fastrl"] == "fastrl.cli:entry"
    tree = ast.parse((REPO / "fastrl" / "cli.py").read_text())
    guard = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    assert "entry()" in ast.unparse(guard)


LEAVER = """
import os, sys, time
import torch.distributed as dist
from fastrl.training import distributed as D
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
D._joined_a_group = True
dist.barrier()  # both ranks have joined (under load rank 1 was still connecting when rank 0 left)
if rank == 0:
    os._exit(143)  # an interrupted peer: gone without a barrier
time.sleep(2)
D.exit_process(143)  # this rank was interrupted too: it must not wait for the gone peer
"""


def test_an_interrupted_rank_leaves_without_waiting_for_a_gone_peer(tmp_path: Path) -> None:
    """CI: SIGTERM to a 2-rank launch printed a gloo 'Connection closed by peer' traceback from the
    barrier in exit_process; a rank ending with a nonzero code skips it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    script = tmp_path / "leaver.py"
    script.write_text(LEAVER)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), port], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[1].returncode == 143, outs[1]
    assert "Traceback" not in outs[1], outs[1]
