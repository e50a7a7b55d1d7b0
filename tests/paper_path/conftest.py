"""Session fixtures of the paper-path rehearsal: one offline HF cache holding the hub-shaped tiny
checkpoints under the paper's hub ids, and ``data/prepared/`` written by ``data_prep --from-local``
from hub-format parquet, in one work directory that every ``fastrl`` subprocess runs in.

The terminal summary lists every rehearsal check with its outcome and time (``make rehearsal``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pytest

from tests.paper_path import hub_fixtures as H

REPO = Path(__file__).resolve().parents[2]
PAPER_DIR = Path(__file__).resolve().parent
_REPORT: list[tuple[str, str, float]] = []  # (test, outcome, seconds)
_RUNS: list[tuple[str, int, float]] = []  # (command label, return code, seconds)
_WORKDIR: list[Path] = []  # the rehearsal directory (its logs/ hold every run's output)


def shared_data() -> Path:
    """The repository's ``data/`` (or ``$FASTRL_SHARED_DIR/data``): the real examples the data is made of."""
    from data_prep.common import shared_data_dir

    return shared_data_dir()


@dataclass
class PaperEnv:
    """The rehearsal's work directory (the cwd of every run), its environment and what is in it."""

    root: Path
    hub_cache: Path
    snapshots: dict[str, Path]
    prepared: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(self, label: str, argv: Sequence[str], *, timeout: float = 300, launcher: Sequence[str] = (),
            check: bool = True) -> subprocess.CompletedProcess:
        """``[launcher] python -m fastrl.cli ARGV`` in ``root`` (the hub ids resolve offline)."""
        cmd = [*launcher, "--module", "fastrl.cli", *argv] if launcher else [sys.executable, "-m", "fastrl.cli", *argv]
        log = self.root / "logs" / f"{label}.txt"
        log.parent.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        # Own process group: on a timeout the launcher AND its ranks are killed (a hung rank would
        # otherwise outlive the test).
        child = subprocess.Popen(cmd, cwd=self.root, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            stdout, stderr = child.communicate()
            _RUNS.append((label, -9, time.perf_counter() - t0))
            log.write_text(" ".join(cmd) + "\n" + stdout + stderr)
            raise AssertionError(f"{label}: no result after {timeout:.0f} s (killed; log: {log}): {' '.join(cmd)}\n"
                                 f"{(stdout + stderr)[-1500:]}") from None
        proc = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
        _RUNS.append((label, proc.returncode, time.perf_counter() - t0))
        log.write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(f"{label}: {' '.join(cmd)} -> rc={proc.returncode} (log: {log})\n"
                                 f"{(proc.stdout + proc.stderr)[-3000:]}")
        return proc


def rehearsal_env(hf_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "TRANSFORMERS_CACHE")}
    env.update(
        HF_HOME=str(hf_home), HF_HUB_CACHE=str(hf_home / "hub"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1", DS_ACCELERATOR="cpu", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
        TORCH_EXTENSIONS_DIR=str(REPO / ".cache" / "torch_extensions"), PYTHONWARNINGS="ignore",
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        VLLM_CPU_KVCACHE_SPACE="1",
    )
    return env


def prepare_data(hub_root: Path, out: Path, shared: Path) -> None:
    """``make data``'s per-dataset step, on hub-format parquet: ``data_prep.<name> --from-local``."""
    from data_prep import geometry3k, geoqa8k, math12k

    H.write_geometry3k_hub(hub_root / "geometry3k", shared)
    H.write_geoqa8k_hub(hub_root / "geoqa8k", shared)
    H.write_math12k_hub(hub_root / "math12k", shared)
    for mod, name in ((geometry3k, "geometry3k"), (geoqa8k, "geoqa8k"), (math12k, "math12k")):
        mod.main(["--from-local", str(hub_root / name), "--out", str(out)])


@pytest.fixture(scope="session")
def paper_env(tmp_path_factory: pytest.TempPathFactory) -> PaperEnv:
    root = tmp_path_factory.mktemp("paper_path")
    shared = shared_data()
    texts = H.training_text(shared)
    built = root / "_built"
    # The Llama's <|eot_id|> row is calibrated so that sampled responses stop after 1 to >12 tokens
    # (measured on 8 MATH prompts x 4 at T = 1: groups of lengths [3, 8, 12, 12], [2, 1, 7, 2], ...:
    # the longest response of a rank's batch, its number of generate steps, differs between ranks). Not the VL's: its head is tied, so the row is also the
    # input embedding of every <|im_end|> in the prompt, and responses then stop at once.
    vl = H.write_qwen25vl_checkpoint(built / "qwen25vl", texts, seed=0)
    llama = H.write_llama31_checkpoint(built / "llama31", texts, seed=0, eos_logit=2.0)
    hub = root / "hf" / "hub"
    snapshots = {repo: H.install_in_hub_cache(hub, repo, src) for repo, src in
                 ((H.QWEN_VL_ID, vl), (H.QWEN_VL_3B_ID, vl), (H.LLAMA_ID, llama))}
    _WORKDIR.append(root)
    prepared = root / "data" / "prepared"
    prepare_data(root / "_hub_datasets", prepared, shared)
    return PaperEnv(root=root, hub_cache=hub, snapshots=snapshots, prepared=prepared,
                    env=rehearsal_env(root / "hf"))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------- summary
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Time per check = setup (the runs its fixtures start) + call; failed if either failed."""
    if PAPER_DIR.name not in report.nodeid or report.when == "teardown":
        return
    name = report.nodeid.split("::", 1)[-1]
    if report.when == "setup":
        _REPORT.append((name, report.outcome, report.duration))
        return
    _, before, secs = _REPORT[-1]
    _REPORT[-1] = (name, report.outcome if before == "passed" else before, secs + report.duration)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _REPORT:
        return
    tr = terminalreporter
    tr.section("paper-path rehearsal")
    for name, outcome, secs in _REPORT:
        tr.write_line(f"  {outcome.upper():7s} {secs:6.1f}s  {name}")
    if _RUNS:
        tr.write_line("  runs (fastrl subprocesses, inside the tests above):")
        for label, rc, secs in _RUNS:
            tr.write_line(f"    {'ok ' if rc == 0 else f'rc={rc}'} {secs:6.1f}s  {label}")
    if _WORKDIR:
        tr.write_line(f"  logs of every run: {_WORKDIR[0] / 'logs'}")
    counts = {o: sum(1 for _, oo, _ in _REPORT if oo == o) for o in ("passed", "failed", "skipped")}
    tr.write_line(f"  {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped; "
                  f"{sum(s for _, _, s in _REPORT):.0f}s in tests")
