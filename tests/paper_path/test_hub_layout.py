"""The rehearsal's fixtures are what the hub serves: file layout, weight names, tokenizers, and the
paper's hub ids resolving offline from the HF cache."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from tests.paper_path import hub_fixtures as H

pytestmark = pytest.mark.slow

QWEN_FILES = {"config.json", "generation_config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
              "model-00002-of-00002.safetensors", "tokenizer.json", "tokenizer_config.json",
              "vocab.json", "merges.txt", "chat_template.json", "preprocessor_config.json"}


def test_paper_hub_ids_resolve_offline(paper_env):
    from huggingface_hub import snapshot_download

    for repo in (H.QWEN_VL_ID, H.QWEN_VL_3B_ID, H.LLAMA_ID):
        got = snapshot_download(repo, cache_dir=paper_env.hub_cache, local_files_only=True)
        assert got == str(paper_env.snapshots[repo])
    assert QWEN_FILES <= {p.name for p in paper_env.snapshots[H.QWEN_VL_ID].iterdir()}


def test_qwen_vl_checkpoint_has_the_hub_layout_and_loads_whole(paper_env):
    from fastrl.models.loaders import load_policy

    snap = paper_env.snapshots[H.QWEN_VL_ID]
    cfg = json.loads((snap / "config.json").read_text())
    assert cfg["model_type"] == "qwen2_5_vl" and "text_config" not in cfg and cfg["tie_word_embeddings"]
    assert cfg["rope_scaling"] == {"type": "mrope", "mrope_section": [4, 6, 6]}
    saved = {}
    for shard in sorted(snap.glob("model-*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            saved.update({k: f.get_tensor(k) for k in f.keys()})
    index = json.loads((snap / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(saved)
    assert {k.split(".")[0] for k in saved} == {"model", "visual"} and "lm_head.weight" not in saved
    assert all(not k.startswith("model.language_model") for k in saved)
    model, processor = load_policy(snap)
    state = model.state_dict()
    for hub_key, tensor in saved.items():  # every hub tensor landed in the model (none left random)
        assert torch.equal(state[model_key_of(hub_key)], tensor.float()), hub_key
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    tok = processor.tokenizer
    assert type(tok).__name__ == "Qwen2Tokenizer" and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    ids = [tok.convert_tokens_to_ids(t) for t, _ in H.QWEN_ADDED_TOKENS]
    assert len(ids) == 22 and ids == list(range(ids[0], ids[0] + 22))  # the hub's order
    assert type(processor.image_processor).__name__.startswith("Qwen2VLImageProcessor")
    gen = json.loads((snap / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]


def model_key_of(hub_key: str) -> str:
    """The hub's Qwen2.5-VL key -> transformers 5's (the inverse of hub_fixtures.hub_key_qwen25vl)."""
    if hub_key.startswith("visual."):
        return "model." + hub_key
    return "model.language_model." + hub_key[len("model."):]


def test_llama_checkpoint_has_the_hub_layout(paper_env):
    from fastrl.models.loaders import load_policy

    snap = paper_env.snapshots[H.LLAMA_ID]
    cfg = json.loads((snap / "config.json").read_text())
    assert cfg["rope_scaling"]["rope_type"] == "llama3" and cfg["tie_word_embeddings"] is False
    model, tok = load_policy(snap)
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    assert tok.pad_token is None and tok.eos_token == "<|eot_id|>"
    bos = tok.convert_tokens_to_ids("<|begin_of_text|>")
    assert tok("x = 1")["input_ids"][0] == bos  # the TemplateProcessing post-processor
    assert "Cutting Knowledge Date" in tok.chat_template


def test_llama_responses_stop_after_different_numbers_of_tokens(paper_env):
    """What the 2-rank ZeRO-3 run needs: the longest response of a batch (the number of generate
    steps a rank runs) differs between batches, and some groups end before the length limit."""
    import torch

    from fastrl.config import load_config
    from fastrl.data.loaders import load_records
    from fastrl.policy import PolicySpec, load_policy_kit
    from fastrl.rollout.base import SamplingConfig

    cfg = load_config("methods/grpo.yaml", ["rollout.engine=hf", "data.template=fastrl_math"], scale="paper")
    kit = load_policy_kit(PolicySpec.from_config(cfg, paper_env.snapshots[H.LLAMA_ID], seed=0))
    records = load_records(paper_env.prepared / "math12k_train.parquet")[:8]
    torch.manual_seed(0)
    responses = kit.engine.generate([kit.encode(r) for r in records], 4, SamplingConfig(max_new_tokens=12))
    longest = [max(len(r.response_ids) for r in responses if r.prompt_index == i) for i in range(len(records))]
    assert len(set(longest)) > 1 and min(longest) < 12, longest
