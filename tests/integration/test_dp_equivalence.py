"""2-rank DeepSpeed ZeRO-3 (CPU) = 1 rank: same kept set and, within float tolerance, the same loss,
gradient norm and parameters after one FastRL step on the same batch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "integration" / "scripts" / "dp_learn.py"


def _env() -> dict[str, str]:
    return {**os.environ, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "TORCH_EXTENSIONS_DIR": str(REPO / ".cache" / "torch_extensions"),
            "PYTHONPATH": str(REPO)}


@pytest.mark.deepspeed
@pytest.mark.parametrize("method, port", [("fastrl", 29533), ("cppo", 29535)])
def test_two_ranks_zero3_equal_one_rank(tmp_path, method, port):
    """CPPO computes its old/ref log-prob columns on the whole batch, each rank half, gathered."""
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
    if launcher is None:
        pytest.skip("the `deepspeed` launcher is not installed (pip install deepspeed); `make setup` installs it")
    # FastRL's mini-batch 8 / 4 = 2 trajectories: a multiple of both world sizes, so both runs refill
    # to the same multiple and split the kept set into the same optimizer steps
    common = ["trainer.use_deepspeed=true", "trainer.zero_stage=3", "trainer.micro_batch_size=2",
              "algorithm.kl_coef=0.01", "trainer.mini_batch_size=8", "trainer.progress=false",
              f"--config=methods/{method}.yaml"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    subprocess.run([sys.executable, str(SCRIPT), str(one), f"trainer.run_dir={tmp_path / 'r1'}", *common],
                   cwd=REPO, env=_env(), check=True, timeout=900, capture_output=True)
    proc = subprocess.run([launcher, "--num_gpus", "2", "--master_port", str(port), str(SCRIPT), str(two),
                           f"trainer.run_dir={tmp_path / 'r2'}", *common],
                          cwd=REPO, env=_env(), timeout=900, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert (a["world"], b["world"]) == (1, 2)
    assert sorted(map(str, a["kept"])) == sorted(map(str, b["kept"]))  # the same kept set
    assert len(a["kept"]) < len(a["rewards"])  # the pruner pruned something on this batch
    assert a["advantages"] == b["advantages"]
    for key in ("loss", "pg_loss", "grad_norm", "param_sum", "param_abs_sum"):
        assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key


@pytest.mark.deepspeed
def test_two_rank_training_run_with_checkpoints(tmp_path):
    """The whole loop on 2 ranks (sharded rollout, gathered batch, ZeRO-3 update, validation)."""
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
    if launcher is None:
        pytest.skip("the `deepspeed` launcher is not installed (pip install deepspeed); `make setup` installs it")
    run = tmp_path / "run"
    proc = subprocess.run([launcher, "--num_gpus", "2", "--master_port", "29534", "--module", "fastrl.cli", "train",
                           "methods/fastrl.yaml", "--scale", "smoke", f"trainer.run_dir={run}",
                           "trainer.use_deepspeed=true", "trainer.zero_stage=3", "trainer.save_every=1",
                           "trainer.mini_batch_size=8"],
                          cwd=REPO, env=_env(), timeout=900, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "timing_s/step" in r]
    assert len(steps) == 2 and all(r["prune/kept"] % 4 == 0 for r in steps)  # aligned to 2 ranks x micro 2
    assert (run / "ckpt" / "step_2").is_dir() and (run / "final" / "config.json").exists()
    assert rows[-1]["phase"] == "val_final" and rows[-1]["val/num"] == 16
    # The ranks of one launch share the run dir (rank 0 alone holds its lock); started again, every
    # rank gets rank 0's decision: finished, nothing to do.
    again = subprocess.run(proc.args, cwd=REPO, env=_env(), timeout=900, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{run}: finished, nothing to do" in again.stdout + again.stderr
    assert (run / "metrics.jsonl").read_text().count("timing_s/step") == 2


# A tiny model whose 320 x 320 MLP weights (102,400 elements) are above DeepSpeed's
# stage3_param_persistence_threshold (1e5): they stay partitioned, so every forward all-gathers.
PARTITIONED = ["model.tiny.hidden_size=320", "model.tiny.intermediate_size=320", "model.tiny.num_heads=5",
               "model.tiny.num_kv_heads=5"]


@pytest.mark.deepspeed
def test_cppo_zero3_two_ranks_with_odd_ars_batches(tmp_path):
    """ARS drops n from 4 to 3, so 3 prompts give 9 responses: the rollout splits 2/1 prompts, CPPO's
    whole-batch old/ref log-prob pass 5/4 rows (3/2 micro-batches of 2), and every rank must still
    make the same number of ZeRO-3 forwards (gloo aborted with "Received data size doesn't match"
    before). The update's shards are equal by construction (kept count a multiple of the world)."""
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
    if launcher is None:
        pytest.skip("the `deepspeed` launcher is not installed (pip install deepspeed); `make setup` installs it")
    run = tmp_path / "run"
    proc = subprocess.run([launcher, "--num_gpus", "2", "--master_port", "29536", "--module", "fastrl.cli", "train",
                           "methods/cppo.yaml", "--scale", "smoke", f"trainer.run_dir={run}",
                           "trainer.use_deepspeed=true", "trainer.zero_stage=3",
                           "algorithm.rollout_scaler=ars_retention", "trainer.prompts_per_step=3",
                           "trainer.mini_batch_size=2", "trainer.total_steps=2", "trainer.save_every=0",
                           "algorithm.kl_coef=0.01", *PARTITIONED],
                          cwd=REPO, env=_env(), timeout=900, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "timing_s/step" in r]
    assert [r["rollout/num_responses"] for r in steps] == [12, 9]  # 9: 5 and 4 rows per rank
    assert all(r["prune/kept"] % 2 == 0 for r in steps)
    # the padded pass's log-probs of the kept rows are the engine's own (no row shifted or mixed)
    assert all(r["rollout/probs_diff_max"] < 1e-4 for r in steps)
    assert rows[-1]["phase"] == "val_final"
