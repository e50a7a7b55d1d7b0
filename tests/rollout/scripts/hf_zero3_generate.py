"""The hf engine on ZeRO-3-partitioned weights, 2 ranks (launched by tests/rollout/test_hf_zero3.py).

Every ZeRO-3 forward all-gathers parameters, so both ranks must run the same forwards. The cases
give the ranks different numbers of prompts (so different numbers of generation chunks, one rank
none at all) and responses that stop at different lengths (a third of the vocabulary is EOS).
Rank 0 writes ``<out>/result.json``: each rank's response lengths and finish reasons per case.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --master_port P hf_zero3_generate.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training" / "scripts"))

import tiny  # noqa: E402
from fastrl.rollout.base import PromptInput, SamplingConfig  # noqa: E402
from fastrl.rollout.hf import HFRolloutEngine  # noqa: E402
from fastrl.training import distributed as D  # noqa: E402
from fastrl.config import ModelConfig, OptimConfig, TrainerConfig  # noqa: E402
from fastrl.training.actor import Actor  # noqa: E402

EOS = list(range(1, tiny.VOCAB, 3))
# case -> (prompts per rank, n, temperature)
CASES = {
    "chunks_3_vs_1": ((3, 1), 1, 1.0),
    "rank1_has_none": ((2, 0), 2, 1.0),
    "greedy_same_count": ((2, 2), 1, 0.0),
}


def zero3_sized_qwen2():
    """tiny.tiny_qwen2 with MLP weights of 64 x 1,792 = 114,688 elements: above ZeRO-3's default
    ``stage3_param_persistence_threshold`` (1e5), so they are partitioned and every forward
    all-gathers them (the tiny model's weights are all below it, i.e. replicated, no collective)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import torch

    cfg = Qwen2Config(vocab_size=tiny.VOCAB, hidden_size=64, intermediate_size=1792, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=64,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    model.config._attn_implementation = "eager"
    return model


class WordTokenizer:
    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def prompts_for(rank: int, count: int) -> list[PromptInput]:
    return [PromptInput(f"r{rank}-p{i}", [2 + (5 * rank + 7 * i + j) % (tiny.VOCAB - 3) for j in range(3 + i)])
            for i in range(count)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--local_rank", type=int, default=None, help="set by the deepspeed launcher")
    args = ap.parse_args()
    D.init_distributed()
    trainer = TrainerConfig(optim=OptimConfig(lr=1e-3, weight_decay=1e-2), zero_stage=3, use_deepspeed=True, seed=0)
    actor = Actor(zero3_sized_qwen2(), trainer, ModelConfig(dtype="float32"))
    partitioned = [n for n, p in actor.module.module.named_parameters() if p.ds_persist is False]
    assert partitioned, "no parameter is partitioned: the case would run no collective"
    engine = HFRolloutEngine(actor.module, WordTokenizer(), eos_token_ids=EOS, pad_token_id=0, batch_size=1)
    rank = D.rank()
    results = {}
    for case, (counts, n, temperature) in CASES.items():
        sampling = SamplingConfig(temperature=temperature, max_new_tokens=12, seed=100 + 17 * rank)
        out = engine.generate(prompts_for(rank, counts[rank]), n, sampling)
        mine = [(len(r.response_ids), r.finish_reason, r.prompt_index) for r in out]
        results[case] = D.all_gather_object(mine)
    if D.is_main():
        (args.out / "result.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
    D.exit_process(0)  # leaves the group and skips the teardown ranks were seen to abort in
