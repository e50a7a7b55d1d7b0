"""Paper-scale image resizing against qwen-vl-utils itself, on the Geometry3K diagrams.

``qwen_vl_utils.vision_process`` imports torchvision at module level; the CPU stack has none, so
the library is imported here with an empty stand-in for torchvision (its image path never calls
torchvision). Where torchvision is really installed, the real one is used.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

from data_prep.common import shared_data_dir
from fastrl.data import vision
from fastrl.data.vision import (
    RELEASED_MAX_PIXELS,
    RELEASED_MIN_PIXELS,
    image_token_count,
    resize_image,
    smart_resize_reimpl,
)
from fastrl.models.processing import IMAGE_PAD, PromptEncoder

GEO3K = shared_data_dir() / "geometry3k_examples"
QWEN25_VL_PROCESSOR = {"shortest_edge": 3136, "longest_edge": 12845056}  # Qwen2.5-VL-7B-Instruct's


def _torchvision_stand_in() -> dict[str, types.ModuleType]:
    tv = types.ModuleType("torchvision")
    tv.__version__ = "0.0.0"
    io_mod = types.ModuleType("torchvision.io")
    transforms = types.ModuleType("torchvision.transforms")
    transforms.InterpolationMode = type("InterpolationMode", (), {"BICUBIC": "bicubic"})
    tv.io, tv.transforms = io_mod, transforms
    return {"torchvision": tv, "torchvision.io": io_mod, "torchvision.transforms": transforms}


@pytest.fixture(scope="module")
def qwen_vl_utils():
    if importlib.util.find_spec("qwen_vl_utils") is None:
        pytest.skip("qwen-vl-utils is not installed (pip install -e .[cpu] brings it)")
    saved = {k: sys.modules.get(k) for k in ("torchvision", "torchvision.io", "torchvision.transforms",
                                             "qwen_vl_utils", "qwen_vl_utils.vision_process")}
    if importlib.util.find_spec("torchvision") is None:
        sys.modules.update(_torchvision_stand_in())
    try:
        module = importlib.import_module("qwen_vl_utils.vision_process")
    finally:  # the stand-in must not outlive the import (transformers probes for torchvision)
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


def _geo3k_images() -> list[Path]:
    paths = sorted(GEO3K.glob("*/img_diagram.png"))
    assert paths, f"no Geometry3K diagrams under {GEO3K}"
    return paths


def test_resize_matches_qwen_vl_utils_fetch_image_on_geometry3k(qwen_vl_utils):
    for path in _geo3k_images():
        with Image.open(path) as img:
            img.load()
            ours = resize_image(img, min_pixels=RELEASED_MIN_PIXELS, max_pixels=RELEASED_MAX_PIXELS)
            theirs = qwen_vl_utils.fetch_image(
                {"image": img, "min_pixels": RELEASED_MIN_PIXELS, "max_pixels": RELEASED_MAX_PIXELS})
        assert ours.size == theirs.size, path
        assert ours.mode == theirs.mode == "RGB"
        assert ours.tobytes() == theirs.tobytes(), f"{path}: pixels differ after the resize"
        w, h = ours.size
        assert RELEASED_MIN_PIXELS <= w * h <= RELEASED_MAX_PIXELS


@settings(max_examples=300, deadline=None)
@given(h=st.integers(1, 6000), w=st.integers(1, 6000), lo=st.integers(1, 2_000_000), span=st.integers(0, 8_000_000),
       factor=st.sampled_from([28, 32]))
def test_reimplementation_equals_the_library(qwen_vl_utils, h, w, lo, span, factor):
    if max(h, w) / min(h, w) > vision.MAX_RATIO:
        with pytest.raises(ValueError, match="aspect ratio"):
            smart_resize_reimpl(h, w, factor, lo, lo + span)
        return
    assert smart_resize_reimpl(h, w, factor, lo, lo + span) == tuple(
        qwen_vl_utils.smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=lo + span))


def test_image_tokens_on_geometry3k_match_the_library_resize(qwen_vl_utils):
    """PromptEncoder at the released min/max pixels: as many <|image_pad|> tokens per diagram as
    qwen-vl-utils' resize implies, and the processor's patch grid is that size."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(size=QWEN25_VL_PROCESSOR, patch_size=14, temporal_patch_size=2, merge_size=2)
    encoder = PromptEncoder(_mini_tokenizer(), processor, use_chat_template=False,
                            min_pixels=RELEASED_MIN_PIXELS, max_pixels=RELEASED_MAX_PIXELS)
    pad_id = encoder.image_token_id
    counts = []
    for path in _geo3k_images():
        with Image.open(path) as img:
            img.load()
            h, w = qwen_vl_utils.smart_resize(img.height, img.width, factor=28, min_pixels=RELEASED_MIN_PIXELS,
                                              max_pixels=RELEASED_MAX_PIXELS)
            prompt = encoder.encode(path.parent.name, "<image> find x", [img])
        expected = image_token_count(h, w)
        assert prompt.prompt_ids.count(pad_id) == expected, path
        assert prompt.model_inputs["image_grid_thw"].tolist() == [[1, h // 14, w // 14]]
        assert int(prompt.model_inputs["mm_token_type_ids"].sum()) == expected
        counts.append(expected)
    assert min(counts) >= RELEASED_MIN_PIXELS // 28**2  # every diagram was scaled up to >= 512^2 pixels
    assert len(set(counts)) > 1


def test_encoder_without_bounds_keeps_the_processor_size_and_rejects_half_bounds():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(size={"shortest_edge": 56 * 56, "longest_edge": 56 * 56},
                                         patch_size=14, temporal_patch_size=2, merge_size=2)
    encoder = PromptEncoder(_mini_tokenizer(), processor, use_chat_template=False)
    prompt = encoder.encode("u", "<image> x", [Image.new("RGB", (300, 200), "white")])
    # The processor's own rule (min = max = 3136 pixels): 300x200 becomes 56x28, i.e. 2 tokens.
    assert prompt.model_inputs["image_grid_thw"].tolist() == [[1, 2, 4]]
    assert prompt.prompt_ids.count(encoder.image_token_id) == 2
    with pytest.raises(ValueError, match="both min_pixels and max_pixels"):
        PromptEncoder(_mini_tokenizer(), processor, use_chat_template=False, min_pixels=100)
    with pytest.raises(ValueError, match="uid=v image 0: smart_resize: aspect ratio"):
        PromptEncoder(_mini_tokenizer(), processor, use_chat_template=False, min_pixels=784, max_pixels=4000
                      ).encode("v", "<image>", [Image.new("RGB", (1000, 2), "white")])


def _mini_tokenizer():
    from fastrl.mini.tokenizer import build_mini_tokenizer

    tok = build_mini_tokenizer()
    assert tok.convert_tokens_to_ids(IMAGE_PAD) != tok.unk_token_id
    return tok
