"""Dr.GRPO's constant (``algorithm.loss_norm_constant``) reaches the loss: config -> LossSettings ->
``update_policy`` -> ``losses.aggregate(mode='seq-mean-token-sum-norm', norm_constant=C)``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from fastrl.config import load_config
from fastrl.rollout.base import PromptInput
from fastrl.training import update
from fastrl.training.batch import RolloutBatch

VOCAB = 11


class TinyLM(torch.nn.Module):
    """Logits [B, logits_to_keep, V] on the CPU that depend on the token ids (so the log-probs vary)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, VOCAB)
        torch.nn.init.normal_(self.emb.weight, generator=torch.Generator().manual_seed(0))

    def forward(self, input_ids: torch.Tensor, logits_to_keep: int, **_: Any) -> SimpleNamespace:
        return SimpleNamespace(logits=self.emb(input_ids)[:, -logits_to_keep:])


class Actor:
    def __init__(self) -> None:
        self.module = TinyLM()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> dict[str, float]:
        self.module.zero_grad()
        return {}


def _batch() -> RolloutBatch:
    responses = [[6, 7], [8, 9, 10], [6], [3, 4, 5, 6]]
    batch = RolloutBatch.from_rows(
        prompts=[PromptInput("q0", [1, 2, 3])] * 2 + [PromptInput("q1", [4, 5])] * 2,
        uids=["q0", "q0", "q1", "q1"], response_ids=responses, texts=[""] * 4,
        engine_logprobs=[[0.0] * len(r) for r in responses], finish_reasons=["stop"] * 4, records=[None] * 4,
    )
    batch.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    return batch


def _losses(overrides: list[str]) -> dict[str, float]:
    cfg = load_config("methods/grpo.yaml", ["algorithm.loss_agg=seq-mean-token-sum-norm", *overrides], scale="smoke")
    settings = update.LossSettings.from_config(cfg.algorithm)
    batch = _batch()
    batch = batch.with_columns(old_logprobs=-2.0 * batch.response_mask, ref_logprobs=-2.5 * batch.response_mask)
    metrics = update.update_policy(Actor(), batch, update.rank_plan([[0, 1, 2, 3]], 0, 1), settings=settings,
                                   micro_batch_size=2, pad_id=0, check_finite=lambda loss, what: None)
    return {k: metrics[f"actor/{k}"] for k in ("pg_loss", "kl_loss")}


def test_loss_norm_constant_scales_the_dr_grpo_loss():
    assert update.LossSettings.from_config(load_config("methods/grpo.yaml").algorithm).norm_constant is None
    at_10 = _losses(["algorithm.loss_norm_constant=10"])
    at_40 = _losses(["algorithm.loss_norm_constant=40"])
    assert at_10["pg_loss"] != 0 and at_10["kl_loss"] != 0
    for k in ("pg_loss", "kl_loss"):  # loss = masked token sum / C: 4x the constant, a quarter of the loss
        assert at_40[k] == pytest.approx(at_10[k] / 4, rel=1e-6)
    # Unset, C is each micro-batch's padded width (3, then 4 here), not a constant.
    default = _losses([])
    assert default["pg_loss"] not in (pytest.approx(at_10["pg_loss"]), pytest.approx(at_40["pg_loss"]))
