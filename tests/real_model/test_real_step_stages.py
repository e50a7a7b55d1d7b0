"""bench/real_step_stages.py: the training commands it launches load as configs (the first version
passed a removed key, trainer.tensorboard, and turned DeepSpeed off under paper.yaml's ZeRO-3:
both refused at config load, so the bench never ran) and keep the released 4:1 mini-batches
(it also divided FastRL's mini-batch by 4 on top of fastrl.yaml's divisor: 16:1)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from fastrl.config import load_config

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("real_step_stages", REPO / "bench" / "real_step_stages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_bench_commands_load_and_keep_the_released_ratio(tmp_path: Path) -> None:
    bench = _bench()
    args = argparse.Namespace(steps=2, prompts=2, n=8, max_new_tokens=128, micro_batch=4, threads=1)
    data = (tmp_path / "train.parquet", tmp_path / "test.parquet")
    effective = {}
    for method in ("grpo", "fastrl"):
        cmd = bench.train_command(method, tmp_path / method, data, args)
        assert cmd[2:5] == ["fastrl.cli", "train", f"methods/{method}.yaml"] and cmd[5:7] == ["--scale", "paper"]
        cfg = load_config(cmd[4], cmd[7:], scale="paper")
        assert (cfg.model.source, cfg.rollout.engine, cfg.trainer.use_deepspeed) == ("gguf", "hf", False)
        assert cfg.trainer.torch_threads == 1 and cfg.rollout.n == 8 and cfg.trainer.prompts_per_step == 2
        effective[method] = cfg.trainer.mini_batch_size // cfg.trainer.mini_batch_divisor
    assert effective == {"grpo": 16, "fastrl": 4}


def test_summarize_drops_the_warm_up_step() -> None:
    bench = _bench()
    steps = [{"timing_s/step": 9.0, "cpu_s/step": 9.0, "cpu_s/gen": 9.0},
             {"timing_s/step": 4.0, "cpu_s/step": 2.0, "cpu_s/gen": 1.0, "prune/kept": 4.0}]
    out = bench.summarize({"steps": steps, "process_cpu_s": 1.0, "process_wall_s": 2.0})
    assert out["steps_used"] == 1 and out["cpu"]["gen"] == 1.0 and out["share_cpu"]["gen"] == 0.5
    assert out["prune/kept"] == 4.0 and out["wall"]["step"] == 4.0
