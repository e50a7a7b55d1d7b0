"""CPU seconds of the update stage's calls: the policy forward, ``Actor.backward`` and ``Actor.step``.

Trains one short run through ``fastrl.api.train`` with timers (``time.process_time``, so a shared
machine's load does not move them) around every call of the update's forward
(``fastrl.training.update.response_logprobs``, with its rows and padded width; the old-log-prob
passes are counted apart), ``Actor.backward`` and ``Actor.step``, and prints count, total and
per-call milliseconds per kind. What separates FastRL's update from its token share is how these
costs grow with rows (paper_figures/README.md, "Speed against its token bound").

    PYTHONPATH=$PWD python bench/update_calls.py methods/fastrl.yaml --out /tmp/fastrl_calls.json
    PYTHONPATH=$PWD python bench/update_calls.py methods/grpo.yaml trainer.use_deepspeed=false

Default overrides: a 10-step run shaped like Table 1's Geometry3K · small cell at mini (8 prompts
x 8, mini-batch 16, 40 new tokens) with a 400-step SFT warm start; later overrides win.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path
from typing import Any, Callable

TABLE1_SHAPE = (
    "data.task=mini-geo", "data.variant=default", "data.ood_variants=[total]", "trainer.prompts_per_step=8",
    "trainer.mini_batch_size=16", "data.num_train=80", "data.num_val=16", "rollout.max_new_tokens=40",
    "algorithm.ars.period_steps=3", "model.tiny.sft_steps=400", "model.kind=qwen2_5_vl", "trainer.seed=1",
    "trainer.progress=false", "trainer.total_steps=10",
)


def _timed(calls: list[dict[str, Any]], kind: Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        out = fn(*args, **kwargs)
        calls.append({"kind": kind(*args), "cpu_s": time.process_time() - start})
        return out
    return wrapper


def instrument(calls: list[dict[str, Any]]) -> None:
    """Wrap the update's forward, ``Actor.backward`` and ``Actor.step`` with CPU timers."""
    import fastrl.training.pipeline as P
    import fastrl.training.update as U
    from fastrl.training.actor import Actor

    inside = [False]
    update = U.update_policy

    def update_policy(*args: Any, **kwargs: Any) -> Any:
        inside[0] = True
        try:
            return update(*args, **kwargs)
        finally:
            inside[0] = False

    def forward_kind(model: Any, tensors: dict) -> str:
        rows, width = tensors["input_ids"].shape
        return f"{'forward' if inside[0] else 'logprob_forward'} rows={rows} width={width}"

    U.response_logprobs = _timed(calls, forward_kind, U.response_logprobs)
    Actor.backward = _timed(calls, lambda *a: "backward", Actor.backward)
    Actor.step = _timed(calls, lambda *a: "optimizer_step", Actor.step)
    P.update_policy = _timed(calls, lambda *a: "update_policy", update_policy)


def table(calls: list[dict[str, Any]]) -> str:
    """Count, total and per-call CPU milliseconds per kind (forwards grouped by rows)."""
    agg: dict[str, list[float]] = collections.defaultdict(list)
    for c in calls:
        agg[c["kind"].split(" width=")[0]].append(c["cpu_s"])
    return "\n".join(f"{k:28s} calls {len(v):4d}  total {sum(v):7.3f} s  per call {1000 * sum(v) / len(v):7.2f} ms"
                     for k, v in sorted(agg.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", help="a method config, e.g. methods/fastrl.yaml")
    p.add_argument("overrides", nargs="*", help="after the Table 1-shaped defaults")
    p.add_argument("--run-dir", default="/tmp/update_calls_run")
    p.add_argument("--out", type=Path, help="the per-call records as JSON")
    args = p.parse_args(argv)
    from fastrl import api

    calls: list[dict[str, Any]] = []
    instrument(calls)
    api.train(args.config, [*TABLE1_SHAPE, f"trainer.run_dir={args.run_dir}", "trainer.resume=false", *args.overrides],
              "mini")
    print(table(calls))
    if args.out:
        args.out.write_text(json.dumps(calls))
    return 0


if __name__ == "__main__":
    from fastrl.training.distributed import exit_process

    exit_process(main())  # a DeepSpeed engine joined a process group: skip the teardown ranks abort in
