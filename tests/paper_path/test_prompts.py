"""The prompts the paper configuration builds from the hub-shaped checkpoints: the chat template,
Qwen's default system prompt, the paper's instruction, exactly one BOS for Llama, and as many
image tokens as qwen-vl-utils' smart_resize gives at the released min/max pixels."""

from __future__ import annotations

import pytest

from fastrl.config import load_config
from fastrl.data.loaders import load_records
from fastrl.data.templates import FASTRL_INSTRUCTION
from tests.data.test_vision import qwen_vl_utils  # noqa: F401  (the fixture: the library itself)
from tests.paper_path import hub_fixtures as H

pytestmark = pytest.mark.slow


def _kit(paper_env, repo: str, overrides: list[str]):
    from fastrl.policy import PolicySpec, load_policy_kit

    cfg = load_config("methods/fastrl.yaml", ["rollout.engine=hf", *overrides], scale="paper")
    return cfg, load_policy_kit(PolicySpec.from_config(cfg, paper_env.snapshots[repo], seed=0))


def test_qwen_vl_prompt_is_the_papers(paper_env, qwen_vl_utils):  # noqa: F811
    from PIL import Image

    cfg, kit = _kit(paper_env, H.QWEN_VL_ID, [])
    record = load_records(paper_env.prepared / "geometry3k_train.parquet")[0]
    prompt = kit.encode(record)
    text = kit.tokenizer.decode(prompt.prompt_ids)
    assert text.startswith(f"<|im_start|>system\n{H.QWEN_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n")
    assert text.endswith(f"{FASTRL_INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")
    image = Image.open(record.images[0]) if isinstance(record.images[0], str) else record.images[0]
    h, w = qwen_vl_utils.smart_resize(image.height, image.width, factor=28, min_pixels=cfg.model.min_pixels,
                                      max_pixels=cfg.model.max_pixels)
    pad = kit.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert prompt.prompt_ids.count(pad) == (h // 28) * (w // 28) > 0
    assert text.count("<|vision_start|>") == 1 and "<image>" not in text


def test_llama_prompt_has_one_bos_and_the_31_template(paper_env):
    _, kit = _kit(paper_env, H.LLAMA_ID, ["data.template=fastrl_math"])
    record = load_records(paper_env.prepared / "math12k_train.parquet")[0]
    prompt = kit.encode(record)
    bos = kit.tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    assert prompt.prompt_ids.count(bos) == 1 and prompt.prompt_ids[0] == bos
    text = kit.tokenizer.decode(prompt.prompt_ids)
    assert "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023" in text
    assert text.endswith(f"{FASTRL_INSTRUCTION}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert kit.pad_id == kit.tokenizer.eos_token_id  # no pad token: the EOS stands in
