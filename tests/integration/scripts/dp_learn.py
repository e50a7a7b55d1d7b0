"""One learn() step (FastRL, or the method of ``--config=methods/<m>.yaml``) on a fixed rollout
batch; writes kept uids/indices and losses as JSON.

Run on 1 rank (plain python) or 2 ranks (``deepspeed --num_gpus 2``); the test compares the two.
"""

from __future__ import annotations

import json
import sys

import torch

from fastrl.config import load_config
from fastrl.mini.tasks import generate_task
from fastrl.training import distributed as dist
from fastrl.training.batch import RolloutBatch
from fastrl.training.metrics import StageTimer
from fastrl.training.pipeline import Trainer


def fixed_batch(trainer: Trainer, n: int) -> RolloutBatch:
    """Deterministic responses (the same on every rank): each question's worked solution, cut at
    different lengths, so groups have mixed rewards and overlapping token sets."""
    tok = getattr(trainer.policy.processor, "tokenizer", trainer.policy.processor)
    records = generate_task("mini-math", split="train", num=4, seed=7)
    prompts, uids, ids, texts, recs = [], [], [], [], []
    for q, rec in enumerate(records):
        full = tok(rec.meta["solution"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        for j in range(n):
            cut = full if j % 2 == 0 else full[: max(3, len(full) - 2 - j)]
            prompts.append(trainer.encode(rec))
            uids.append(rec.uid)
            ids.append(list(cut))
            texts.append(tok.decode(cut, skip_special_tokens=True))
            recs.append(rec)
    batch = RolloutBatch.from_rows(prompts=prompts, uids=uids, response_ids=ids, texts=texts,
                                   engine_logprobs=[[0.0] * len(r) for r in ids], finish_reasons=["stop"] * len(ids),
                                   records=recs)
    scores, _ = trainer.policy.score(batch.texts, batch.records)
    batch.rewards = torch.tensor([s["overall"] for s in scores], dtype=torch.float32)
    batch.accuracies = torch.tensor([s["accuracy"] for s in scores], dtype=torch.float32)
    return batch


def main(out: str, *overrides: str, config: str = "methods/fastrl.yaml") -> None:
    cfg = load_config(config, [*overrides], scale="smoke")
    trainer = Trainer(cfg)
    batch = fixed_batch(trainer, n=cfg.rollout.n)
    kept, metrics = trainer.learn(batch, StageTimer())
    params = torch.cat([p.detach().flatten().float() for _, p in trainer.policy.actor.named_parameters_for_sync()])
    if dist.is_main():
        with open(out, "w") as fh:
            json.dump({"world": dist.world_size(), "kept": [[u, r] for u, r in zip(kept.uids, kept.response_ids)],
                       "rewards": batch.rewards.tolist(), "advantages": batch.advantages.tolist(),
                       "loss": metrics["actor/loss"], "pg_loss": metrics["actor/pg_loss"],
                       "grad_norm": metrics["actor/grad_norm"], "param_sum": float(params.double().sum()),
                       "param_abs_sum": float(params.double().abs().sum())}, fh)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]  # added by the launcher
    configs = [a.split("=", 1)[1] for a in args if a.startswith("--config=")]
    args = [a for a in args if not a.startswith("--config=")]
    main(args[0], *args[1:], **({"config": configs[0]} if configs else {}))
    dist.exit_process(0)  # leaves the group and skips the teardown ranks were seen to abort in
