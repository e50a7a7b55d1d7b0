"""MDAP overhead on a paper-size step, against the forward pass it saves.

Builds one synthetic rollout batch the size of a paper step — 256 questions x 8 responses,
response lengths uniform in [1, 2048], vocabulary 151,936, rewards in {0, 0.5, 1, 1.5} with GRPO
advantages — and times ``mdap_prune`` (tau = 0.8) on one CPU thread (median of several runs),
for the three ways a trainer can hand over token ids: Python lists, 1-D tensors, PackedTokens.

Token ids are drawn either Zipf-distributed (rank^-1.1 over the whole vocabulary, ranks mapped to
ids by a fixed random permutation: closer to text, many repeated tokens) or uniformly over the
vocabulary (the worst case for the set computations: almost every token distinct).

The reference cost is a log-prob forward pass of the same batch through a tiny Qwen2 built from
config (default: 2 layers, hidden 64, vocabulary 151,936 — the LM head dominates, as in the real
log-prob pass), the same thread count, computing per-token log-probs of the response tokens in
256-token chunks. The forward is timed on ``--forward-seqs`` sequences of the batch and
extrapolated linearly to all response tokens (prompt tokens are not counted, which makes the
reference smaller, i.e. the ratio conservative). A real 3B/7B model costs orders of magnitude more.

Usage::

    python bench/mdap_overhead.py                 # table
    python bench/mdap_overhead.py --json          # JSON on stdout
    python bench/mdap_overhead.py --json out.json # table + JSON file
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

# One core means one core: numpy's BLAS would otherwise start a thread per core (set before import).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastrl.algorithms.advantages import grpo_advantages  # noqa: E402
from fastrl.algorithms.pruning import mdap_prune  # noqa: E402
from fastrl.algorithms.similarity import PackedTokens, grouped_jaccard_distances  # noqa: E402


def make_batch(questions: int, responses: int, max_len: int, vocab: int, dist: str, seed: int) -> dict[str, Any]:
    """One synthetic step: uids, rewards, advantages [N], token ids (lists and tensors)."""
    rng = np.random.default_rng(seed)
    n = questions * responses
    uids = [f"q{q}" for q in range(questions) for _ in range(responses)]
    rewards = torch.from_numpy(rng.choice([0.0, 0.5, 1.0, 1.5], size=n))
    adv = grpo_advantages(rewards, uids)
    lengths = rng.integers(1, max_len + 1, size=n)
    total = int(lengths.sum())
    if dist == "uniform":
        flat = rng.integers(0, vocab, size=total)
    elif dist == "zipf":
        ranks = np.arange(1, vocab + 1, dtype=np.float64)
        p = ranks ** -1.1
        p /= p.sum()
        id_of_rank = rng.permutation(vocab)
        flat = id_of_rank[rng.choice(vocab, size=total, p=p)]
    else:
        raise ValueError(f"unknown token distribution {dist!r}; choose zipf or uniform")
    flat_t = torch.from_numpy(flat.astype(np.int64))
    tensors = list(torch.split(flat_t, lengths.tolist()))
    return {
        "uids": uids, "rewards": rewards, "adv": adv, "lengths": lengths, "tensors": tensors,
        "lists": [t.tolist() for t in tensors], "packed": PackedTokens(flat_t, torch.from_numpy(lengths.astype(np.int64))),
    }


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any, list[float]]:
    """Run ``fn`` once to warm up, then ``repeats`` times.

    Returns (median wall ms, all wall ms, last result, all process-CPU ms). CPU time is what this
    process itself consumed: on a shared machine the wall time also counts time spent waiting
    for a core, so both are reported.
    """
    out = fn()
    runs, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(runs), runs, out, cpu


def forward_ms_per_token(batch: dict[str, Any], vocab: int, hidden: int, layers: int, seqs: int,
                         repeats: int, seed: int) -> dict[str, Any]:
    """Time a log-prob forward of ``seqs`` responses through a tiny Qwen2; ms per response token."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg).eval()
    # a spread of lengths from the batch itself: every k-th response
    picks = list(range(0, len(batch["tensors"]), max(1, len(batch["tensors"]) // seqs)))[:seqs]
    inputs = [batch["tensors"][i] for i in picks]
    tokens = int(sum(t.numel() for t in inputs))

    def run() -> float:
        acc = 0.0
        with torch.no_grad():
            for ids in inputs:  # one sequence per micro-batch: no padding waste
                h = model.model(input_ids=ids[None]).last_hidden_state[0]
                for hs, tgt in zip(torch.split(h[:-1], 256), torch.split(ids[1:], 256)):
                    logp = torch.log_softmax(model.lm_head(hs).float(), dim=-1)
                    acc += float(logp.gather(-1, tgt[:, None]).sum())
        return acc

    med, runs, _, cpu = timed(run, repeats)
    return {"model": f"Qwen2 {layers} layers, hidden {hidden}, vocab {vocab} (random init, from config)",
            "timed_sequences": len(inputs), "timed_tokens": tokens, "median_ms": med, "runs_ms": runs,
            "median_cpu_ms": statistics.median(cpu), "cpu_ms": cpu, "ms_per_token": med / tokens,
            "cpu_ms_per_token": statistics.median(cpu) / tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=256)
    ap.add_argument("--responses", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--tau", type=float, default=0.8)
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per measurement (median reported)")
    ap.add_argument("--dists", default="zipf,uniform", help="token distributions, comma-separated")
    ap.add_argument("--forward-seqs", type=int, default=6, help="sequences actually run through the model")
    ap.add_argument("--forward-repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--no-forward", action="store_true", help="skip the model forward reference")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", nargs="?", const="-", default=None,
                    help="write JSON results to PATH ('-' or no value: stdout, no table)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    result: dict[str, Any] = {
        "command": " ".join(["python", sys.argv[0] if argv is None else "bench/mdap_overhead.py",
                             *(argv if argv is not None else sys.argv[1:])]),
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "env": {"torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
                "cpu": _cpu_name(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
                "load_avg_1m_at_start": os.getloadavg()[0]},
        "mdap": {},
    }
    total_tokens = None
    for dist in [d.strip() for d in args.dists.split(",") if d.strip()]:
        b = make_batch(args.questions, args.responses, args.max_len, args.vocab, dist, args.seed)
        total_tokens = int(b["lengths"].sum())
        rows: dict[str, Any] = {"response_tokens": total_tokens, "responses": len(b["uids"])}
        for form in ("lists", "tensors", "packed"):
            med, runs, kept, cpu = timed(lambda: mdap_prune(b["adv"], b["uids"], b[form], tau=args.tau).kept,
                                         args.repeats)
            rows[f"mdap_prune[{form}]"] = {"median_ms": med, "runs_ms": runs,
                                            "median_cpu_ms": statistics.median(cpu), "cpu_ms": cpu}
            rows["kept"] = len(kept)
        qid = torch.arange(args.questions).repeat_interleave(args.responses)
        med, runs, _, cpu = timed(lambda: grouped_jaccard_distances(b["packed"], qid, args.questions),
                                  args.repeats)
        rows["jaccard_only[packed]"] = {"median_ms": med, "runs_ms": runs,
                                        "median_cpu_ms": statistics.median(cpu), "cpu_ms": cpu}
        result["mdap"][dist] = rows

    if not args.no_forward and total_tokens is not None:
        b = make_batch(args.questions, args.responses, args.max_len, args.vocab, "zipf", args.seed)
        fwd = forward_ms_per_token(b, args.vocab, args.hidden, args.layers, args.forward_seqs,
                                   args.forward_repeats, args.seed)
        fwd["extrapolated_batch_ms"] = fwd["ms_per_token"] * total_tokens
        fwd["extrapolated_batch_cpu_ms"] = fwd["cpu_ms_per_token"] * total_tokens
        result["forward"] = fwd
        for rows in result["mdap"].values():
            for key, val in list(rows.items()):
                if key.startswith("mdap_prune"):
                    val["ratio_to_forward"] = val["median_ms"] / fwd["extrapolated_batch_ms"]
                    val["cpu_ratio_to_forward"] = val["median_cpu_ms"] / fwd["extrapolated_batch_cpu_ms"]

    if args.json != "-":
        _print_table(result)
    if args.json == "-":
        print(json.dumps(result, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _print_table(r: dict[str, Any]) -> None:
    c, e = r["config"], r["env"]
    print(f"MDAP overhead: {c['questions']} questions x {c['responses']} responses, lengths 1..{c['max_len']}, "
          f"vocab {c['vocab']}, tau {c['tau']}, {e['threads']} thread(s), {e['cpu']} "
          f"({e['cores']} cores, load average {e['load_avg_1m_at_start']:.1f} at start)")
    fwd = r.get("forward")
    print(f"{'tokens':8s} {'measurement':24s} {'wall ms':>8s} {'cpu ms':>8s} {'min wall':>9s} {'vs forward':>11s}")
    for dist, rows in r["mdap"].items():
        for key, val in rows.items():
            if not isinstance(val, dict):
                continue
            ratio = f"{100 * val['ratio_to_forward']:.4f} %" if "ratio_to_forward" in val else ""
            print(f"{dist:8s} {key:24s} {val['median_ms']:8.1f} {val['median_cpu_ms']:8.1f} "
                  f"{min(val['runs_ms']):9.1f} {ratio:>11s}")
        print(f"{dist:8s} {'response tokens / kept':24s} {rows['response_tokens']:>8d} {rows['kept']:>8d}")
    if fwd:
        print(f"forward: {fwd['model']}: {fwd['median_ms']:.0f} ms wall ({fwd['median_cpu_ms']:.0f} ms cpu) for "
              f"{fwd['timed_sequences']} sequences / {fwd['timed_tokens']} tokens = {fwd['ms_per_token']:.3f} "
              f"ms/token -> {fwd['extrapolated_batch_ms'] / 1e3:.1f} s for the whole batch (extrapolated)")
    print("(medians; wall = elapsed, cpu = this process's CPU time; 'vs forward' = wall / forward wall)")


if __name__ == "__main__":
    raise SystemExit(main())
