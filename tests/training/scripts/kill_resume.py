"""A tiny training loop with checkpoints, killed with SIGKILL and resumed (test_checkpoint.py).

Every source of randomness a trainer has is used: numpy picks the batch rows, Python's ``random``
jitters the targets, torch's RNG drives dropout. The trainer state carries the data position and
the metrics so far. Modes::

    kill_resume.py --out DIR --steps 6                     # uninterrupted
    kill_resume.py --out DIR --steps 6 --kill-before-commit 4   # SIGKILL inside save of step 4
    kill_resume.py --out DIR --steps 6 --resume [--forget-rng]  # continue from the latest ckpt

The final metrics and parameters go to DIR/result.pt.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
from pathlib import Path

import numpy as np
import torch

from fastrl.training import checkpoint as C
from fastrl.config import ModelConfig, OptimConfig, TrainerConfig
from fastrl.training.actor import Actor

SEED = 11


def build() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 1)
    )
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    y = x.sum(-1, keepdim=True).sin()
    return model, x, y


def train_step(actor: Actor, x: torch.Tensor, y: torch.Tensor, pos: int) -> dict[str, float]:
    rows = np.random.randint(0, x.shape[0], size=8)  # numpy RNG
    rows = (rows + pos) % x.shape[0]  # data position
    target = y[rows] + 0.01 * random.random()  # python RNG
    total = 0.0
    for part in (slice(0, 3), slice(3, 8)):  # two ragged micro-batches; losses sum to the mean
        pred = actor.module(x[rows[part]])  # torch RNG (dropout)
        loss = ((pred - target[part]) ** 2).sum() / len(rows)
        actor.backward(loss)
        total += float(loss.detach())
    out = actor.step()
    out["loss"] = total
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--kill-before-commit", type=int, default=None)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--forget-rng", action="store_true", help="resume WITHOUT the saved RNG states")
    args = ap.parse_args()

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    model, x, y = build()
    optim = OptimConfig(lr=1e-2, weight_decay=1e-2, grad_clip=0.5, warmup_steps=3)
    actor = Actor(model, TrainerConfig(optim=optim, use_deepspeed=False), ModelConfig(dtype="float32"))
    state = {"step": 0, "data_pos": 0, "metrics": []}
    if args.resume:
        path = C.latest_checkpoint(args.out)
        if path is None:
            raise SystemExit(f"no checkpoint under {args.out}")
        rng_before = C.capture_rng_state()
        state = C.load_checkpoint(path, actor)
        if args.forget_rng:
            C.restore_rng_state(rng_before)

    if args.kill_before_commit is not None:
        real_replace = os.replace
        doomed = f".tmp-step_{args.kill_before_commit}"

        def replace(src, dst):  # the commit rename of the doomed step never happens
            if Path(src).name == doomed:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_replace(src, dst)

        C.os.replace = replace  # type: ignore[attr-defined]

    while state["step"] < args.steps:
        m = train_step(actor, x, y, state["data_pos"])
        state["step"] += 1
        state["data_pos"] = (state["data_pos"] + 8) % x.shape[0]
        state["metrics"].append(m)
        C.save_checkpoint(args.out, state["step"], actor, state, keep=2)

    params = {n: p.detach().clone() for n, p in actor.named_parameters_for_sync()}
    torch.save({"metrics": state["metrics"], "params": params}, args.out / "result.pt")


if __name__ == "__main__":
    main()
