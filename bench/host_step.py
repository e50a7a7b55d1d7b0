"""Host-side work of one paper-size rollout step, per rank, on one CPU core.

A paper step is 256 prompts x 8 responses = 2,048 responses of up to 2,048 tokens (vocabulary
151,936). Besides the GPU passes, every rank does host work on that batch; this benchmark times
each piece with the project's own functions on a synthetic batch of realistic boxed-answer text:

    gather     pickling this rank's generation results and unpickling every rank's (what
               ``dist.all_gather_object`` does): Python lists before; now this rank's rows padded
               into columns (``ResponseColumns.from_rows``), gathered as tensors and merged
    reward     the paper's ``math`` reward (mathruler grading, time-boxed) over the responses a
               rank scores (the whole gathered batch before; its own responses now)
    adv        GRPO advantages over the batch
    mdap       ``mdap_prune`` (tau 0.8, refill to 128); now including ``RolloutBatch.response_ids``
               (the Python lists read back from the padded column, as ``Trainer.prune`` passes them)
    plan       ``plan_minibatches`` (fixed_minibatch, 128)
    pad        the old and reference log-prob inputs of this rank's micro-batches (4)

It runs two layouts in one process and reports both with their ratio:

    rescore    before 2026-12-01: every rank re-scored the whole gathered batch; each micro-batch's
               rows padded by a row-by-row copy
    own        the trainer now: each rank scores its own responses and the gather carries their
               scores, as columns (``ResponseColumns``); the log-prob rows are padded once
               into [N, R] columns (``batch.pad_rows``) and each micro-batch's inputs are slices

Wall-clock and process CPU seconds are both reported (the machines here are shared).

Usage::

    python bench/host_step.py                          # paper size, 1 and 4 ranks
    python bench/host_step.py --prompts 8 --n 4 --max-len 64 --ranks 1,2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastrl.algorithms.advantages import grpo_advantages  # noqa: E402
from fastrl.algorithms.pruning import mdap_prune  # noqa: E402
from fastrl.rewards import score_batch  # noqa: E402
from fastrl.training.batch import ResponseColumns, RolloutBatch, pad_rows  # noqa: E402
from fastrl.training.update import micro_batches, plan_minibatches, shard  # noqa: E402

ANSWERS = ["12", "3\\sqrt{2}", "\\frac{5}{2}", "60", "2\\pi", "7.5", "\\sqrt{13}", "144"]
WORDS = ("angle triangle side length so therefore we have the area of circle radius equals "
         "perpendicular bisector compute then substitute hence square root").split()


def response_text(rng: np.random.Generator, tokens: int, truth: str) -> str:
    """A boxed-answer response of about ``tokens`` tokens (~4 characters each): thinking, then a
    box holding the truth, a near miss or another answer (so the grader does real comparisons)."""
    body = " ".join(rng.choice(WORDS, size=max(1, tokens - 12)))
    kind = rng.integers(0, 3)
    answer = truth if kind == 0 else (f"{truth}+1" if kind == 1 else str(rng.choice(ANSWERS)))
    return f"<thinking> {body} </thinking> The answer is \\boxed{{{answer}}}."


def make_step(prompts: int, n: int, max_len: int, vocab: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    total = prompts * n
    lengths = rng.integers(1, max_len + 1, size=total)
    truths = [ANSWERS[q % len(ANSWERS)] for q in range(prompts) for _ in range(n)]
    ranks = np.arange(1, vocab + 1, dtype=np.float64) ** -1.1  # Zipf-like token ids, as text
    ranks /= ranks.sum()
    flat = rng.permutation(vocab)[rng.choice(vocab, size=int(lengths.sum()), p=ranks)]
    ids = [t.tolist() for t in np.split(flat, np.cumsum(lengths)[:-1])]
    return {
        "uids": [f"q{q}" for q in range(prompts) for _ in range(n)],
        "ids": ids,
        "logprobs": [(-rng.random(int(k))).tolist() for k in lengths],
        "texts": [response_text(rng, int(k), t) for k, t in zip(lengths, truths)],
        "truths": truths,
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def pad_rowwise(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)  # the update's _pad: one copy per row
    for r, t in enumerate(rows):
        out[r, : t.numel()] = t.float()
    return out


def pad_stage(step: dict[str, Any], kept: list[int], plan: list[list[int]], mine: list[int], rank: int, world: int,
              sharded: bool) -> Callable[[], None]:
    """The old and reference log-prob inputs of this rank's micro-batches (4): padded row by row
    per micro-batch (before), or sliced from [N, R] columns that compute_logprobs writes (built
    here, untimed) (now)."""
    rows = {i: torch.tensor(step["logprobs"][kept[i]]) for i in mine}
    micros = [micro for mb in plan for micro in micro_batches(shard(mb, rank, world), 4)]
    position = {row: j for j, row in enumerate(mine)}
    old, _ = pad_rows([step["logprobs"][kept[i]] for i in mine], torch.float32)
    ref = old.clone()

    def pad_rowwise_all() -> None:
        for micro in micros:
            width = max(rows[i].numel() for i in micro)
            pad_rowwise([rows[i] for i in micro], width)  # old log-probs
            pad_rowwise([rows[i] for i in micro], width)  # reference log-probs

    def slice_columns() -> None:
        for micro in micros:
            idx = torch.tensor([position[i] for i in micro])
            width = max(rows[i].numel() for i in micro)
            old[idx, :width], ref[idx, :width]

    return slice_columns if sharded else pad_rowwise_all


def rank_stages(step: dict[str, Any], rank: int, world: int, sharded: bool) -> dict[str, tuple[float, float]]:
    """(wall s, cpu s) of each stage for rank ``rank`` of ``world``."""
    total = len(step["uids"])
    own = list(range(rank, total, world))
    stages: dict[str, tuple[float, float]] = {}

    def run(name: str, fn: Callable[[], Any]) -> Any:
        out, wall, cpu = timed(fn)
        stages[name] = (wall, cpu)
        return out

    def part(r: int) -> Any:  # rank r's generation results, as the trainer gathers them
        rows = list(range(r, total, world))
        if not sharded:
            return [(i, step["ids"][i], step["texts"][i], step["logprobs"][i], "stop") for i in rows]
        return ResponseColumns.from_rows(rows, [step["ids"][i] for i in rows], [step["texts"][i] for i in rows],
                                         [step["logprobs"][i] for i in rows], ["stop"] * len(rows),
                                         rewards=torch.full((len(rows),), 1.5), accuracies=torch.ones(len(rows)))

    others = [pickle.dumps(part(r)) for r in range(world) if r != rank]  # built by the other ranks
    own_part = None if sharded else part(rank)

    def gather() -> Any:  # pickle our part, unpickle every rank's
        if not sharded:
            blobs = [pickle.dumps(own_part)] + others
            return [item for blob in blobs for item in pickle.loads(blob)]
        blobs = [pickle.dumps(part(rank))] + others  # now: our rows padded into columns first, then merged
        return ResponseColumns.merge([pickle.loads(blob) for blob in blobs])

    gathered = run("gather", gather)
    if sharded:  # the trainer's batch; its pruner reads the response ids back from the padded column
        batch = RolloutBatch.from_columns([None] * total, step["uids"], [None] * total, gathered)
        token_ids = lambda: batch.response_ids  # noqa: E731
    else:
        token_ids = lambda: step["ids"]  # noqa: E731
    scored = own if sharded else list(range(total))
    run("reward", lambda: score_batch("math", [step["texts"][i] for i in scored],
                                      [step["truths"][i] for i in scored]))
    rewards = torch.tensor([(i * 7919 % 4) * 0.5 for i in range(total)])
    adv = run("adv", lambda: grpo_advantages(rewards, step["uids"]))
    result = run("mdap", lambda: mdap_prune(adv, step["uids"], token_ids(), tau=0.8, align_to=min(128, total)))
    kept = result.kept.tolist()
    g = torch.Generator().manual_seed(0)
    plan = run("plan", lambda: plan_minibatches(len(kept), mode="fixed_minibatch", updates_per_step=4,
                                                 mini_batch_size=min(128, len(kept)), world=world, generator=g))
    mine = sorted(i for mb in plan for i in shard(mb, rank, world))
    run("pad", pad_stage(step, kept, plan, mine, rank, world, sharded))
    return stages


def measure(step: dict[str, Any], world: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layout, sharded in (("rescore", False), ("own", True)):
        stages = rank_stages(step, 0, world, sharded)
        out[layout] = {
            "stages_wall_s": {k: round(v[0], 4) for k, v in stages.items()},
            "stages_cpu_s": {k: round(v[1], 4) for k, v in stages.items()},
            "total_wall_s": round(sum(v[0] for v in stages.values()), 4),
            "total_cpu_s": round(sum(v[1] for v in stages.values()), 4),
        }
    out["ratio_cpu_rescore_over_own"] = round(out["rescore"]["total_cpu_s"] / max(out["own"]["total_cpu_s"], 1e-9), 3)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--ranks", default="1,4", help="comma-separated simulated world sizes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    step = make_step(args.prompts, args.n, args.max_len, args.vocab, args.seed)
    score_batch("math", step["texts"][:8], step["truths"][:8])  # warm-up: imports, grader caches
    result = {
        "shape": {"prompts": args.prompts, "n": args.n, "max_len": args.max_len, "vocab": args.vocab,
                  "responses": args.prompts * args.n, "tokens": int(sum(len(x) for x in step["ids"]))},
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": 1},
        "worlds": {str(w): measure(step, w) for w in (int(x) for x in args.ranks.split(","))},
    }
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


def print_table(result: dict[str, Any]) -> None:
    s = result["shape"]
    print(f"host work of one step: {s['responses']} responses, {s['tokens']} tokens, vocab {s['vocab']}; "
          "seconds per rank (wall / CPU)")
    for world, r in result["worlds"].items():
        names = list(r["rescore"]["stages_wall_s"])
        print(f"\n{world} rank(s)   " + "  ".join(f"{n:>13}" for n in names) + "          total")
        for layout in ("rescore", "own"):
            cells = "  ".join(f"{r[layout]['stages_wall_s'][n]:6.2f}/{r[layout]['stages_cpu_s'][n]:<6.2f}" for n in names)
            print(f"  {layout:<9} {cells}  {r[layout]['total_wall_s']:6.2f}/{r[layout]['total_cpu_s']:.2f}")
        print(f"  CPU ratio rescore / own: {r['ratio_cpu_rescore_over_own']:.2f}x")


if __name__ == "__main__":
    main()
