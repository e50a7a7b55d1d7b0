"""PromptEncoder: chat template, hand-expanded image tokens, clear errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from fastrl.mini.tasks import generate_task
from fastrl.models.loaders import load_policy
from fastrl.models.processing import PromptEncoder


def test_text_prompt(text_model_dir: Path) -> None:
    _, tok = load_policy(text_model_dir)
    enc = PromptEncoder.from_processor(tok)
    p = enc.encode("u1", "compute 3 + 4 - 1 .", [])
    assert p.uid == "u1" and p.images == [] and p.model_inputs == {}
    assert tok.convert_ids_to_tokens(p.prompt_ids) == [
        "<|im_start|>", "user", "compute", "3", "+", "4", "-", "1", ".", "<|im_end|>", "<|im_start|>", "assistant"]
    raw = PromptEncoder(tok, use_chat_template=False).encode("u1", "compute 3 + 4 - 1 .", [])
    assert tok.convert_ids_to_tokens(raw.prompt_ids)[0] == "compute"
    with pytest.raises(ValueError, match="uid=u2: prompt has 1 images but the model has no image processor"):
        enc.encode("u2", "<image> how many", [object()])
    with pytest.raises(ValueError, match="max_prompt_length=5"):
        PromptEncoder(tok, max_prompt_length=5).encode("u3", "compute 3 + 4 - 1 .", [])


def test_vl_prompt_expands_image_tokens(vl_model_dir: Path) -> None:
    _, proc = load_policy(vl_model_dir)
    enc = PromptEncoder.from_processor(proc)
    rec = generate_task("mini-geo", split="val", num=1, seed=0)[0]
    p = enc.encode(rec.uid, rec.problem, rec.images)
    tokens = proc.tokenizer.convert_ids_to_tokens(p.prompt_ids)
    grid = p.model_inputs["image_grid_thw"]
    assert grid.tolist() == [[1, 4, 4]]  # 56x56 pixels = 4x4 patches of 14
    k = 16 // 4  # merged 2x2
    start = tokens.index("<|vision_start|>")
    assert tokens[start:start + k + 2] == ["<|vision_start|>"] + ["<|image_pad|>"] * k + ["<|vision_end|>"]
    assert tokens.count("<|image_pad|>") == k
    assert p.model_inputs["pixel_values"].shape == (16, 3 * 2 * 14 * 14)
    assert p.model_inputs["mm_token_type_ids"].tolist() == [int(t == "<|image_pad|>") for t in tokens]
    assert len(p.images) == 1 and p.images[0].mode == "RGB"
    # Same image as PNG bytes gives the same pixels.
    buf = io.BytesIO()
    rec.images[0].save(buf, format="PNG")
    q = enc.encode(rec.uid, rec.problem, [buf.getvalue()])
    assert q.prompt_ids == p.prompt_ids and torch.equal(q.model_inputs["pixel_values"], p.model_inputs["pixel_values"])
    with pytest.raises(ValueError, match="2 <image> placeholders but 1 images"):
        enc.encode("u", "<image> <image> x", rec.images)
    with pytest.raises(ValueError, match="uid=u image 0: image does not open"):
        enc.encode("u", "<image> x", [b"not a png"])
