"""TRL's GRPOTrainer step time with and without MDAP (fastrl.integrations.trl), in one run.

Shape (CPU, stated in the output): a tiny Qwen2 built from config (4 layers, hidden 256, a
word-level vocabulary trained here), 4 prompts x num_generations 8 = 32 completions per generation
batch, max_completion_length 48, per_device_train_batch_size 8 x gradient_accumulation_steps 4
(one generation batch per optimizer step, TRL's default schedule), loss_type dapo, beta 0.
Reward: 1 if the completion's word count is even (ties inside groups: MDAP's buckets have
several members). The arms alternate (baseline, mdap, baseline, mdap, ...), each a fresh trainer
from the same weights and seed for ``--steps`` optimizer steps after one warm-up step; per arm the
median over rounds of: wall and CPU seconds of the steps, and the stages (generation =
``_generate``; loss forward = ``_compute_loss``; backward = ``training_step`` minus
``_prepare_inputs`` minus ``_compute_loss``; prune = the pruner call).

    .venv/bin/python bench/trl_step.py [--steps 3] [--rounds 2] [--tau 0.8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's fastrl

import torch  # noqa: E402

WORDS = [f"w{i}" for i in range(60)]


def build_tiny(out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<eos>"]))
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>",
                                 padding_side="left")
    hf.save_pretrained(out)
    cfg = Qwen2Config(vocab_size=len(hf), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=128,
                      tie_word_embeddings=True, eos_token_id=hf.eos_token_id, pad_token_id=hf.pad_token_id,
                      bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = hf.eos_token_id
    model.generation_config.pad_token_id = hf.pad_token_id
    model.save_pretrained(out)


def reward_even(completions: list[str], **_: Any) -> list[float]:
    return [float(len(c.split()) % 2 == 0) for c in completions]


def timed(obj: Any, name: str, acc: dict[str, float]) -> None:
    base = getattr(obj, name)

    def wrapper(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return base(*a, **k)
        finally:
            acc[name] += time.perf_counter() - t

    setattr(obj, name, wrapper)


def run_arm(arm: str, tiny: Path, out: Path, steps: int, tau: float) -> dict[str, float]:
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from fastrl.integrations.trl import FastRLGRPOTrainer, make_pruner

    prompts = [" ".join(WORDS[i:i + 4]) for i in range(0, 56, 2)]
    args = trl.GRPOConfig(output_dir=str(out), per_device_train_batch_size=8, gradient_accumulation_steps=4,
                          num_generations=8, max_completion_length=48, max_steps=steps + 1, learning_rate=1e-4,
                          logging_steps=1, report_to="none", use_cpu=True, seed=0, save_strategy="no",
                          temperature=1.0, top_k=0, disable_tqdm=True)
    kw = dict(model=AutoModelForCausalLM.from_pretrained(tiny), processing_class=PreTrainedTokenizerFast.from_pretrained(tiny),
              reward_funcs=reward_even, args=args, train_dataset=Dataset.from_dict({"prompt": prompts}))
    if arm == "baseline":
        trainer = trl.GRPOTrainer(**kw)
    else:
        trainer = FastRLGRPOTrainer(**kw, pruner=make_pruner("mdap", tau=tau), update_mode="fixed_updates")
    acc: dict[str, float] = defaultdict(float)
    for name in ("_generate", "_prepare_inputs", "_compute_loss", "training_step"):
        timed(trainer, name, acc)
    if arm != "baseline":
        timed(trainer, "pruner", acc)
    marks: dict[str, Any] = {}

    from transformers import TrainerCallback

    class Clock(TrainerCallback):  # start the clock after the warm-up step
        def on_step_end(self, a: Any, state: Any, control: Any, **k: Any) -> None:
            if state.global_step == 1:
                marks.update(wall=time.perf_counter(), cpu=time.process_time(), stages=dict(acc))

    trainer.add_callback(Clock())
    trainer.train()
    wall, cpu = time.perf_counter() - marks["wall"], time.process_time() - marks["cpu"]
    d = {k: (acc[k] - marks["stages"].get(k, 0.0)) / steps for k in acc}
    kept = [h["fastrl/prune/kept_fraction"] for h in trainer.state.log_history[1:] if "fastrl/prune/kept_fraction" in h]
    return {
        "step_wall_s": wall / steps, "step_cpu_s": cpu / steps,
        "generation_s": d["_generate"],
        "loss_forward_s": d["_compute_loss"],
        "backward_s": d["training_step"] - d["_prepare_inputs"] - d["_compute_loss"],
        "rewards_advantages_prune_s": d["_prepare_inputs"] - d["_generate"],
        "prune_s": d.get("pruner", 0.0),
        "kept_fraction": statistics.mean(kept) if kept else 1.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tau", type=float, default=0.8)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[dict[str, float]]] = {"baseline": [], "mdap": []}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny"
        build_tiny(tiny)
        for r in range(a.rounds):
            for arm in ("baseline", "mdap"):
                results[arm].append(run_arm(arm, tiny, Path(tmp) / f"{arm}{r}", a.steps, a.tau))
                print(f"round {r} {arm}: {json.dumps({k: round(v, 3) for k, v in results[arm][-1].items()})}",
                      file=sys.stderr, flush=True)
    med = {arm: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for arm, rs in results.items()}
    print(f"CPU: {os.cpu_count()} cores visible, torch threads 1; {a.steps} steps x {a.rounds} rounds per arm, "
          f"tau {a.tau}; 32 completions/step, tiny Qwen2 4L h256")
    print(f"{'stage (s per optimizer step)':32s} {'baseline':>10s} {'mdap':>10s} {'mdap/base':>10s}")
    for k in med["baseline"]:
        b, m = med["baseline"][k], med["mdap"][k]
        print(f"{k:32s} {b:10.3f} {m:10.3f} {(m / b if b else float('nan')):10.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"median": med, "rounds": results}, indent=1))


if __name__ == "__main__":
    main()
