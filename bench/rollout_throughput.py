"""Rollout throughput of the ``hf`` and ``vllm`` engines on the same tiny model, plus vLLM's
start and weight-sync times and the post-sync log-prob gap. Numbers are measured, never typed.

    .venv/bin/python bench/rollout_throughput.py --prompts 8 --n 4 --max-new-tokens 32

Writes one JSON line per engine to stdout (and to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from fastrl.rollout.base import PromptInput, SamplingConfig


def _prompts(tokenizer, num: int) -> list[PromptInput]:
    """``num`` short word prompts from the mini vocabulary (deterministic)."""
    words = ["what", "is", "one", "plus", "two", "three", "minus", "four"]
    out = []
    for i in range(num):
        text = " ".join(words[(i + k) % len(words)] for k in range(4 + i % 4))
        out.append(PromptInput(uid=f"q{i}", prompt_ids=tokenizer(text, add_special_tokens=False)["input_ids"]))
    return out


def _tokens_per_s(engine, prompts, n: int, sampling: SamplingConfig) -> dict[str, float]:
    # CPU seconds of this process (all its threads; the colocated vLLM engine runs in-process), so a
    # neighbour's load on a shared machine shows as wall > CPU rather than as a slower engine
    t0, c0 = time.perf_counter(), time.process_time()
    responses = engine.generate(prompts, n, sampling)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    tokens = sum(len(r.response_ids) for r in responses)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "tokens": float(tokens), "tokens_per_s": tokens / seconds,
            "tokens_per_cpu_s": tokens / cpu_seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--max-new-tokens", type=int, required=True)
    ap.add_argument("--hf-batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from fastrl.config import HFEngineConfig, VLLMEngineConfig
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.policy import PolicySpec, build_engine, load_policy_kit
    from fastrl.rollout.logprob_check import logprob_check, pad_ragged

    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        # the shape the README's throughput numbers were measured with
        spec = TinyModelSpec(num_kv_heads=1, intermediate_size=512)
        model_dir = build_tiny_model_dir(spec, Path(tmp) / "tiny", seed=args.seed)
        spec = PolicySpec(path=model_dir, hf=HFEngineConfig(batch_size=args.hf_batch_size), seed=args.seed)
        kit = load_policy_kit(spec, "cpu")  # both engines sample from the same weights, the HF copy on the CPU
        model, tokenizer = kit.model, kit.tokenizer
        prompts = _prompts(tokenizer, args.prompts)
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed)

        kit.engine.generate(prompts[:1], 1, sampling)  # warm-up
        rows.append({"engine": "hf", **_tokens_per_s(kit.engine, prompts, args.n, sampling)})

        t0 = time.perf_counter()
        vllm = VLLMEngineConfig(max_model_len=256, gpu_memory_utilization=0.3, sleep=False)
        engine = build_engine(replace(spec, engine="vllm", vllm=vllm, engine_options={"cpu_kvcache_space_gib": 1}),
                              model, tokenizer)
        start_s = time.perf_counter() - t0
        engine.generate(prompts[:1], 1, sampling)  # warm-up
        row = {"engine": "vllm", "start_seconds": start_s, **_tokens_per_s(engine, prompts, args.n, sampling)}
        # one weight sync with changed weights, then the trainer's check against transformers
        with torch.no_grad():
            gen = torch.Generator().manual_seed(args.seed + 1)
            for p in model.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=gen))
        engine.update_weights((name, p.detach().clone()) for name, p in model.named_parameters())
        row["sync_seconds"] = engine.last_sync["rollout/sync_seconds"]
        from fastrl.models.forward import collate, response_logprobs

        responses = engine.generate(prompts, 1, sampling)
        batch = collate([prompts[r.prompt_index] for r in responses], [r.response_ids for r in responses],
                        kit.pad_id)
        with torch.no_grad():
            trainer = response_logprobs(model, batch)
        eng, _ = pad_ragged([r.logprobs for r in responses])
        eng = torch.nn.functional.pad(eng, (0, trainer.shape[1] - eng.shape[1]))
        row.update(logprob_check(eng, trainer, batch["response_mask"].bool(), tol=1e-3))
        rows.append(row)

    for row in rows:
        line = json.dumps({"prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
                           "torch_threads": torch.get_num_threads(),
                           "loadavg_1m_before": load_before[0], "loadavg_1m_after": os.getloadavg()[0], **row})
        print(line, flush=True)
        if args.out is not None:
            with args.out.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
