"""Peak memory of the hf engine's log-probs: gathered per step vs the old ``output_logits`` path.

Issue 15, defect 6: ``generate(output_logits=True)`` kept a float32 [batch, vocab] tensor per
generated token. This runs one generation on a random tiny Qwen2 with a real-sized vocabulary
(no stop token, so every row runs to the limit) in a fresh process per path and prints the growth
of the process's peak RSS during generation.

    PYTHONPATH=. python bench/hf_logprob_memory.py --vocab 32000 --batch 16 --new-tokens 512

Measured here (CPU, defaults): per step 32-35 MiB, output_logits 1,024-1,025 MiB (16 x 32,000 x
4 B x 512 = 1,000 MiB of logits).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys


def run(path: str, vocab: int, batch: int, new_tokens: int) -> float:
    """Peak RSS growth (MiB) of one generate call in this process."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from fastrl.rollout.base import PromptInput, SamplingConfig
    from fastrl.rollout.hf import HFRolloutEngine, generation_config

    torch.set_num_threads(1)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=new_tokens + 8)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).eval()
    prompts = [PromptInput(f"p{i}", [5 + i % (vocab - 8), 6, 7]) for i in range(batch)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=new_tokens, seed=0)
    no_stop = [vocab + 5]  # never sampled: every row runs to the limit
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if path == "per_step":
        class Silent:
            def decode(self, ids, skip_special_tokens=True):
                return ""

        HFRolloutEngine(model, Silent(), eos_token_ids=no_stop, pad_token_id=0, batch_size=batch).generate(
            prompts, 1, sampling)
    else:
        gen_cfg = generation_config(sampling, eos_token_ids=no_stop, pad_token_id=0)
        gen_cfg.output_logits = True
        ids = torch.tensor([p.prompt_ids for p in prompts])
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen_cfg)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--path", choices=("per_step", "output_logits"), default=None, help="(internal) one path")
    args = ap.parse_args()
    if args.path:
        print(f"{run(args.path, args.vocab, args.batch, args.new_tokens):.0f}")
        return
    for path in ("per_step", "output_logits"):
        out = subprocess.run([sys.executable, __file__, "--path", path, "--vocab", str(args.vocab), "--batch",
                              str(args.batch), "--new-tokens", str(args.new_tokens)],
                             capture_output=True, text=True, check=True)
        print(f"{path}: peak RSS growth during generate {out.stdout.strip().splitlines()[-1]} MiB "
              f"(batch {args.batch}, vocab {args.vocab}, {args.new_tokens} new tokens)")


if __name__ == "__main__":
    main()
