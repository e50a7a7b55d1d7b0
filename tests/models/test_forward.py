"""collate + response_logprobs against a plain per-sequence forward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastrl.mini.tasks import generate_task
from fastrl.models.loaders import load_policy
from fastrl.models.forward import collate, response_logprobs
from fastrl.models.processing import PromptEncoder
from fastrl.rollout.base import PromptInput


def _reference_logprobs(model, prompt_ids: list[int], resp: list[int]) -> torch.Tensor:
    """log p(resp[t] | prompt, resp[:t]) from one unpadded forward over the full vocabulary."""
    ids = torch.tensor([prompt_ids + resp])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    pos = torch.arange(len(prompt_ids) - 1, len(prompt_ids) + len(resp) - 1)
    return logp[pos, torch.tensor(resp)]


def test_collate_layout() -> None:
    prompts = [PromptInput("a", [5, 6, 7]), PromptInput("b", [8])]
    b = collate(prompts, [[1, 2], [3, 4, 9, 10]], pad_id=0)
    assert b["input_ids"].tolist() == [[5, 6, 7, 1, 2, 0, 0], [0, 0, 8, 3, 4, 9, 10]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 0], [0, 0, 0, 1, 2, 3, 4]]
    assert b["response_ids"].tolist() == [[1, 2, 0, 0], [3, 4, 9, 10]]
    assert b["response_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        collate(prompts, [[1]], pad_id=0)
    with pytest.raises(ValueError, match="uid=c.*cannot batch"):
        collate([PromptInput("c", [1], model_inputs={"pixel_values_videos": torch.zeros(1)})], [[1]], pad_id=0)


def test_logprobs_match_unpadded_forward(text_model_dir: Path) -> None:
    model, tok = load_policy(text_model_dir)
    torch.manual_seed(0)
    prompts = [PromptInput("a", torch.randint(10, 100, (7,)).tolist()), PromptInput("b", [20, 21]),
               PromptInput("c", torch.randint(10, 100, (12,)).tolist())]
    resps = [[30, 31, 32], [40], [50, 51, 52, 53, 54, 55]]
    batch = collate(prompts, resps, tok.pad_token_id)
    with torch.no_grad():
        logp, ent = response_logprobs(model, batch, with_entropy=True)
    assert logp.shape == ent.shape == (3, 6)
    for i, (p, r) in enumerate(zip(prompts, resps)):
        torch.testing.assert_close(logp[i, :len(r)], _reference_logprobs(model, p.prompt_ids, r), atol=1e-5, rtol=0)
        assert torch.all(logp[i, len(r):] == 0) and torch.all(ent[i, len(r):] == 0)
    assert torch.all(ent[batch["response_mask"] > 0] > 0)
    assert torch.all(ent <= torch.log(torch.tensor(float(len(tok)))) + 1e-4)
    # Temperature divides the logits.
    with torch.no_grad():
        hot = response_logprobs(model, batch, temperature=2.0)
        logits = model(input_ids=torch.tensor([prompts[1].prompt_ids + resps[1]])).logits[0, -2].float()
    torch.testing.assert_close(hot[1, 0], torch.log_softmax(logits / 2.0, -1)[40], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="temperature"):
        response_logprobs(model, batch, temperature=0.0)


def test_logprobs_carry_gradients(text_model_dir: Path) -> None:
    model, tok = load_policy(text_model_dir)
    batch = collate([PromptInput("a", [20, 21, 22])], [[30, 31]], tok.pad_token_id)
    loss = -response_logprobs(model, batch).sum()
    loss.backward()
    assert model.model.embed_tokens.weight.grad is not None
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0


def test_vl_logprobs_match_unpadded_forward(vl_model_dir: Path) -> None:
    model, proc = load_policy(vl_model_dir)
    enc = PromptEncoder.from_processor(proc)
    recs = generate_task("mini-geo", split="val", num=2, seed=0)
    prompts = [enc.encode(r.uid, r.problem, r.images) for r in recs]
    prompts.append(enc.encode("text-only", "compute 1 + 2 .", []))  # no image in a VL batch
    resps = [[30, 31, 32], [40], [50, 51]]
    batch = collate(prompts, resps, enc.tokenizer.pad_token_id)
    assert batch["pixel_values"].shape[0] == sum(p.model_inputs["pixel_values"].shape[0] for p in prompts[:2])
    assert batch["image_grid_thw"].shape == (2, 3)
    assert int(batch["mm_token_type_ids"].sum()) == int((batch["input_ids"] == model.config.image_token_id).sum())
    with torch.no_grad():
        logp = response_logprobs(model, batch)
    for i, (p, r) in enumerate(zip(prompts, resps)):
        single = collate([p], [r], enc.tokenizer.pad_token_id)  # no padding at all
        with torch.no_grad():
            ref = response_logprobs(model, single)[0]
        torch.testing.assert_close(logp[i, :len(r)], ref, atol=1e-5, rtol=0)
