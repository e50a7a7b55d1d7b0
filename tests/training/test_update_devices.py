"""Device placement of the log-prob passes and the policy update, checked without a GPU.

The GPU crash this guards against: the policy's log-probs lived on ``cuda:0`` while the old and
reference log-probs, advantages and response mask stayed on the CPU, and the loss raised
"Expected all tensors to be on the same device". A tensor on PyTorch's ``meta`` device mixed
with a CPU tensor raises the same kind of error ("Tensor on device cpu is not on the expected
device meta"), so a tiny module whose logits live on ``meta`` stands in for a CUDA model here.
Meta tensors carry shapes but no values: the test reads no loss value from them (the update's
one scalar read-back, ``update._item``, returns 0.0 for a meta tensor).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from fastrl.algorithms import registry
from fastrl.models.forward import collate, response_logprobs
from fastrl.rollout.base import PromptInput
from fastrl.training import update
from fastrl.training.batch import RolloutBatch

VOCAB = 11
META = torch.device("meta")


class MetaLogitsLM(torch.nn.Module):
    """Forward returns logits [B, logits_to_keep, V] on ``meta``, whatever the inputs' device.

    ``param_device`` is where its single parameter lives (so where ``response_logprobs`` sends
    the batch): ``meta`` (a model wholly on an accelerator) or ``cpu`` (a model whose logits come
    out on another device than its embedding, as with a split model).
    """

    def __init__(self, param_device: str) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros((), device=param_device))
        self.seen_input_devices: list[torch.device] = []

    def forward(self, input_ids: torch.Tensor, logits_to_keep: int, **_: Any) -> SimpleNamespace:
        self.seen_input_devices.append(input_ids.device)
        logits = torch.zeros(input_ids.shape[0], logits_to_keep, VOCAB, device=META) + self.w.to(META)
        return SimpleNamespace(logits=logits)


class RecordingActor:
    """The slice of :class:`fastrl.training.actor.Actor` that ``update_policy`` uses."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.loss_devices: list[torch.device] = []

    def backward(self, loss: torch.Tensor) -> None:
        assert loss.dim() == 0
        self.loss_devices.append(loss.device)

    def step(self) -> dict[str, float]:
        return {"actor/grad_norm": 0.0, "actor/lr": 0.0}


def _probe_loss(seen: list[dict[str, Any]]):
    """A policy loss that records what it receives and combines it as the real loss does (so a
    tensor on another device than ``logp`` raises right here)."""

    def probe(logp, old_logp, advantages, mask, settings: Any):
        seen.append({
            "devices": {k: t.device for k, t in
                        (("logp", logp), ("old", old_logp), ("adv", advantages), ("mask", mask))},
            "shapes": (tuple(logp.shape), tuple(old_logp.shape), tuple(advantages.shape), tuple(mask.shape)),
        })
        per_token = -(advantages[:, None] * torch.exp(logp - old_logp.detach())) * mask
        return per_token.sum() / mask.sum().clamp_min(1.0), {"probe": per_token.detach().sum()}

    return probe


def _batch() -> RolloutBatch:
    prompts = [PromptInput("q0", [1, 2, 3]), PromptInput("q0", [1, 2, 3]), PromptInput("q1", [4, 5])]
    responses = [[6, 7], [8, 9, 10], [6]]
    batch = RolloutBatch.from_rows(
        prompts=prompts, uids=["q0", "q0", "q1"], response_ids=responses, texts=["", "", ""],
        engine_logprobs=[[0.0] * len(r) for r in responses], finish_reasons=["stop"] * 3,
        records=[None, None, None],
    )
    batch.advantages = torch.tensor([1.0, -1.0, 0.5])
    return batch


def _meta_item(t: torch.Tensor | float) -> float:
    if isinstance(t, torch.Tensor) and t.device.type == "meta":
        return 0.0  # no value to read; the shapes and devices are what is under test
    return float(t)


@pytest.mark.parametrize("param_device", ["meta", "cpu"])
def test_update_policy_moves_every_loss_input_to_the_logits_device(monkeypatch, param_device):
    seen: list[dict[str, Any]] = []
    monkeypatch.setitem(registry.POLICY_LOSSES, "device_probe", _probe_loss(seen))
    monkeypatch.setattr(update, "_item", _meta_item, raising=False)
    batch = _batch()
    # CPU columns, as compute_logprobs returns them
    batch = batch.with_columns(old_logprobs=-1.0 * batch.response_mask, ref_logprobs=-1.5 * batch.response_mask)
    actor = RecordingActor(MetaLogitsLM(param_device))
    settings = update.LossSettings("device_probe", 0.2, 0.3, None, "token-mean", kl_coef=0.01, kl_kind="k3")

    metrics = update.update_policy(
        actor, batch, update.rank_plan([[0, 1, 2]], 0, 1), settings=settings, micro_batch_size=2, pad_id=0,
        check_finite=lambda loss, what: None,
    )

    assert len(seen) == 2  # micro-batches [0, 1] and [2]
    for call in seen:
        assert set(call["devices"].values()) == {META}, call["devices"]
        (logp, old_s, adv, mask) = call["shapes"]
        assert logp == old_s == mask and adv == (logp[0],)
    assert seen[0]["shapes"][0] == (2, 3) and seen[1]["shapes"][0] == (1, 1)
    assert actor.loss_devices == [META, META]  # the KL term (reference log-probs) joined the loss there too
    assert set(actor.module.seen_input_devices) == {torch.device(param_device)}
    assert metrics["actor/optimizer_steps"] == 1.0


@pytest.mark.parametrize("param_device", ["meta", "cpu"])
def test_response_logprobs_live_on_the_logits_device(param_device):
    model = MetaLogitsLM(param_device)
    tensors = collate([PromptInput("q", [1, 2]), PromptInput("r", [3])], [[4, 5, 6], [7]], pad_id=0)
    logp, entropy = response_logprobs(model, tensors, with_entropy=True)
    assert logp.device == entropy.device == META
    assert logp.shape == entropy.shape == (2, 3)
    assert model.seen_input_devices == [torch.device(param_device)]


def test_loss_inputs_are_slices_of_the_columns_placed_on_request():
    batch = _batch()
    old = torch.tensor([[-1.0, -2.0, 0.0], [-3.0, -4.0, -5.0], [-6.0, 0.0, 0.0]])
    batch = batch.with_columns(old_logprobs=old, ref_logprobs=old - 1.0)
    tensors = collate(batch.prompts.inputs([2, 0]), batch.response_ids_of([2, 0]), pad_id=0)
    out = update.loss_inputs(batch, [2, 0], tensors, with_ref=False, width=2, device=torch.device("cpu"))
    assert out["ref"] is None
    assert out["old"].tolist() == [[-6.0, 0.0], [-1.0, -2.0]]  # rows 2 and 0, cut to the micro-batch's width
    assert out["adv"].tolist() == [0.5, 1.0] and out["mask"].tolist() == [[1, 0], [1, 1]]
    on_meta = update.loss_inputs(batch, [2, 0], tensors, with_ref=True, width=2, device=META)
    assert {t.device for t in on_meta.values()} == {META}
