"""The hf engine under ZeRO-3 on 2 ranks (issue 15, defect 2).

Before the fix ``generate`` ran without ``synced_gpus`` and each rank ran as many generation
chunks as it had sequences: once responses stop at different lengths, or one rank has more
prompts, the ranks' parameter all-gathers stop pairing up (gloo: "collective mismatch"; NCCL: a
hang). ``scripts/hf_zero3_generate.py`` runs three such cases; the launcher run is bounded by a
timeout so a hang fails the test. Without synced_gpus, or with it but without the agreed chunk
count, rank 0 fails with gloo "Connection reset by peer" (checked). Cost: 45-65 s measured here
(two DeepSpeed ranks on the shared 2-core CPU; the first run also JIT-builds the shm comm op).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.test_distributed_zero import _DS_ERROR, DS_LAUNCHER, REPO, _env, _free_port

pytestmark = [pytest.mark.deepspeed, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parent / "scripts" / "hf_zero3_generate.py"
TIMEOUT_S = 300


def test_two_zero3_ranks_with_different_chunk_counts_and_lengths(tmp_path: Path) -> None:
    if _DS_ERROR is not None:
        pytest.skip(_DS_ERROR)
    if not DS_LAUNCHER.exists():
        pytest.skip(f"the deepspeed launcher is not installed next to {sys.executable}")
    cmd = [str(DS_LAUNCHER), "--num_gpus", "2", "--master_port", str(_free_port()), str(SCRIPT), "--out", str(tmp_path)]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"2 ZeRO-3 ranks hung in generate (no result after {TIMEOUT_S} s)") from err
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    # prompts per rank x n responses each, prompt-major
    assert [len(r) for r in result["chunks_3_vs_1"]] == [3, 1]
    assert [len(r) for r in result["rank1_has_none"]] == [4, 0]
    assert [len(r) for r in result["greedy_same_count"]] == [2, 2]
    lengths = [length for case in result.values() for rank in case for length, _, _ in rank]
    reasons = {reason for case in result.values() for rank in case for _, reason, _ in rank}
    assert len(set(lengths)) > 2 and reasons == {"stop", "length"}, result  # the cases do stop unevenly
    assert [p for _, _, p in result["rank1_has_none"][0]] == [0, 0, 1, 1]
