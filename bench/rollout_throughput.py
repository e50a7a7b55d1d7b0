"""Rollout throughput of the ``hf`` engine, shared prefill vs the old path (``prefill``), and of
the ``hf`` and ``vllm`` engines on the same tiny model (``engines``: plus vLLM's start and
weight-sync times and the post-sync log-prob gap). Numbers are measured, never typed.

    .venv/bin/python bench/rollout_throughput.py prefill --repeats 3
    .venv/bin/python bench/rollout_throughput.py engines --prompts 8 --n 4 --max-new-tokens 32

``prefill`` runs two shapes, each with the shape's model (untrained: responses run to the length
limit), prompts (the task's template) and engine batch size: ``demo`` (a training rollout of
``make demo`` / the mini text runs: mini-math, tiny Qwen2 2 x 128, 16 prompts x 8, 48 new tokens,
T = 1, chunks of 64) and ``table4`` (Table 4's evaluation at mini: mini-geo, tiny Qwen2.5-VL
3 x 192, prompts x k = 16, 40 new tokens, T = 0.6 / top-p 0.95, chunks of 256). The old and the new
path sample alternately from the same model, ``--repeats`` times each, on ``--threads`` torch
threads (mini runs use 1); per path the median wall and CPU seconds (this process), and the ratios
new / old, plus the fraction of responses whose tokens equal the old path's (the same seed: they
differ only where float rounding flips a draw).

Writes one JSON line per row to stdout (and to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from fastrl.rollout.base import PromptInput, SamplingConfig


@dataclass(frozen=True)
class Shape:
    name: str
    task: str
    model: dict  # TinyModelSpec fields
    prompts: int
    n: int
    max_new_tokens: int
    batch_size: int
    temperature: float
    top_p: float


# The demo's rollout (configs/scales/mini.yaml) and Table 4's evaluation at mini (configs/tables/
# slots.yaml: vl_7b at mini, geometry3k's budget; experiments/evals.py: EVAL_BATCH_SIZE, k = 16,
# --sampling paper). Table 4 evaluates 256 problems per benchmark; --table4-prompts samples fewer.
SHAPES = {
    "demo": Shape("demo", "mini-math", dict(kind="qwen2", hidden_size=128, num_layers=2, intermediate_size=256),
                  prompts=16, n=8, max_new_tokens=48, batch_size=64, temperature=1.0, top_p=1.0),
    "table4": Shape("table4", "mini-geo", dict(kind="qwen2_5_vl", hidden_size=192, num_heads=3, num_kv_heads=1,
                                               num_layers=3, intermediate_size=384),
                    prompts=32, n=16, max_new_tokens=40, batch_size=256, temperature=0.6, top_p=0.95),
}


def _sample(engine, prompts, n: int, sampling: SamplingConfig) -> tuple[dict[str, float], list[list[int]]]:
    t0, c0 = time.perf_counter(), time.process_time()
    responses = engine.generate(prompts, n, sampling)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    tokens = sum(len(r.response_ids) for r in responses)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "tokens": float(tokens)}, [r.response_ids for r in responses]


def _median_row(runs: list[dict[str, float]]) -> dict[str, float]:
    wall = statistics.median(r["seconds"] for r in runs)
    cpu = statistics.median(r["cpu_seconds"] for r in runs)
    tokens = runs[0]["tokens"]
    return {"seconds": wall, "cpu_seconds": cpu, "tokens": tokens, "tokens_per_s": tokens / wall,
            "tokens_per_cpu_s": tokens / cpu, "seconds_all": [round(r["seconds"], 3) for r in runs],
            "cpu_seconds_all": [round(r["cpu_seconds"], 3) for r in runs]}


def prefill_shape(shape: Shape, root: Path, *, repeats: int, seed: int) -> dict:
    """Old path vs shared prefill at one shape (see the module docstring)."""
    from fastrl.config import HFEngineConfig
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.mini.tasks import generate_task
    from fastrl.policy import PolicySpec, load_policy_kit
    from fastrl.rollout.hf import HFRolloutEngine

    model_dir = build_tiny_model_dir(TinyModelSpec(**shape.model), root / shape.name, seed=seed)
    kit = load_policy_kit(PolicySpec(path=model_dir, hf=HFEngineConfig(batch_size=shape.batch_size)), "cpu")
    new = kit.engine
    old = HFRolloutEngine(kit.model, kit.tokenizer, eos_token_ids=kit.eos_ids, pad_token_id=kit.pad_id,
                          batch_size=shape.batch_size, shared_prefill=False)
    assert isinstance(new, HFRolloutEngine) and new.shared_prefill
    prompts = [kit.encode(r) for r in generate_task(shape.task, split="val", num=shape.prompts, seed=seed)]
    sampling = SamplingConfig(temperature=shape.temperature, top_p=shape.top_p,
                              max_new_tokens=shape.max_new_tokens, seed=seed)
    for engine in (old, new):  # warm-up
        engine.generate(prompts[:1], 2, replace(sampling, max_new_tokens=2))
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    samples: dict[str, list[list[int]]] = {}
    for _ in range(repeats):
        for path, engine in (("old", old), ("new", new)):
            row, samples[path] = _sample(engine, prompts, shape.n, sampling)
            runs[path].append(row)
    med = {path: _median_row(rows) for path, rows in runs.items()}
    same = sum(a == b for a, b in zip(samples["old"], samples["new"])) / len(samples["old"])
    return {"shape": shape.name, "task": shape.task, "model": shape.model, "prompts": shape.prompts, "n": shape.n,
            "max_new_tokens": shape.max_new_tokens, "batch_size": shape.batch_size,
            "temperature": shape.temperature, "top_p": shape.top_p, "repeats": repeats,
            "prompt_tokens_mean": statistics.mean(len(p.prompt_ids) for p in prompts),
            "old": med["old"], "new": med["new"],
            "tokens_per_s_ratio": med["new"]["tokens_per_s"] / med["old"]["tokens_per_s"],
            "cpu_seconds_ratio": med["old"]["cpu_seconds"] / med["new"]["cpu_seconds"],
            "same_responses": same}


def run_prefill(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    shapes = [replace(SHAPES[s], prompts=args.table4_prompts) if s == "table4" else SHAPES[s] for s in args.shapes]
    with tempfile.TemporaryDirectory() as tmp:
        return [prefill_shape(s, Path(tmp), repeats=args.repeats, seed=args.seed) for s in shapes]


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


def run_engines(args: argparse.Namespace) -> list[dict]:
    """HF ``generate`` vs the colocated vLLM engine on one tiny Qwen2 (see the module docstring)."""
    from fastrl.config import HFEngineConfig, VLLMEngineConfig
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.policy import PolicySpec, build_engine, load_policy_kit
    from fastrl.rollout.logprob_check import logprob_check, pad_ragged

    rows = []
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

    return [{"prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens, **row} for row in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    pf = sub.add_parser("prefill", help="hf engine: shared prefill vs the old path, demo and Table 4 shapes")
    pf.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["demo", "table4"])
    pf.add_argument("--repeats", type=int, default=3)
    pf.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the mini runs use 1)")
    pf.add_argument("--table4-prompts", type=int, default=SHAPES["table4"].prompts)
    en = sub.add_parser("engines", help="hf vs vllm on one tiny Qwen2")
    en.add_argument("--prompts", type=int, required=True)
    en.add_argument("--n", type=int, required=True)
    en.add_argument("--max-new-tokens", type=int, required=True)
    en.add_argument("--hf-batch-size", type=int, default=32)
    for p in (pf, en):
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = os.getloadavg()
    rows = run_prefill(args) if args.mode == "prefill" else run_engines(args)
    for row in rows:
        line = json.dumps({"mode": args.mode, **row, "torch_threads": torch.get_num_threads(),
                           "loadavg_1m_before": load_before[0], "loadavg_1m_after": os.getloadavg()[0]})
        print(line, flush=True)
        if args.out is not None:
            with args.out.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
