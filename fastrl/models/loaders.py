"""Loads a policy and its tokenizer or processor, at every scale, with the same code.

``load_hf_model`` (the weights; the one loader of the actor, its reference, evaluation and SFT)
and ``load_policy`` (the weights with their tokenizer or processor) take a hub id or a local
directory: a paper-scale checkpoint (Qwen2.5-VL-3B/7B-Instruct, Llama-3.1-8B-Instruct, ...) or a
tiny model directory written by
``fastrl.mini.builders.build_tiny_model_dir`` (or an SFT warm start or run export on top of one).

Tiny directories are recognised by their marker file (``TINY_SPEC_FILE``) and get two
differences: their word-level tokenizer is loaded by class name (``AutoTokenizer`` would put
Qwen2's byte-level BPE in its place for ``model_type: qwen2``), and their VL processor is built
from its parts. The marker is defined here rather than in ``fastrl.mini`` because the loader must
recognise it and ``fastrl.models`` may not import ``fastrl.mini`` (mini builds on models).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

# model_type values (config.json) that load_policy treats as vision-language models.
VL_MODEL_TYPES: frozenset[str] = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"})
TINY_SPEC_FILE = "fastrl_spec.json"  # marks a directory built by fastrl.mini.builders (word-level tokenizer)


def is_fastrl_tiny_dir(path: str | Path) -> bool:
    """True for a directory written by ``fastrl.mini.builders.build_tiny_model_dir`` (or SFT on top of one)."""
    return (Path(path) / TINY_SPEC_FILE).is_file()


@dataclass
class VLProcessorParts:
    """Tokenizer + image processor of a VL model, for when ``AutoProcessor`` cannot be built.

    On CPU boxes ``Qwen2_5_VLProcessor`` fails to build without torchvision (its video
    processor); prompts are then encoded with these two parts and hand-expanded image tokens
    (``fastrl.models.processing.PromptEncoder``). Same attribute names as a transformers
    processor, so code can treat both alike.
    """

    tokenizer: Any
    image_processor: Any


def is_vl_config(config: Any) -> bool:
    return getattr(config, "model_type", None) in VL_MODEL_TYPES or hasattr(config, "vision_config")


class ModelFileError(ValueError):
    """A model directory whose file is missing or damaged; the message names the file."""


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer of a model directory / hub id (tiny dirs: the word-level class by name). A
    directory without ``tokenizer.json`` whose tokenizer cannot be built otherwise is one line
    naming the missing file (transformers suggests installing sentencepiece instead)."""
    try:
        if is_fastrl_tiny_dir(path):
            return PreTrainedTokenizerFast.from_pretrained(str(path))
        return AutoTokenizer.from_pretrained(str(path))
    except (ValueError, OSError, TypeError) as err:
        missing = Path(path) / "tokenizer.json"
        if Path(path).is_dir() and not missing.is_file():
            raise ModelFileError(f"{missing}: missing, and the tokenizer of {path} cannot be built without it "
                                 f"({type(err).__name__}); copy tokenizer.json from the model it came from") from None
        raise


def load_processor(path: str | Path, config: Any) -> Any:
    """Tokenizer (text models) or processor (VL models) of a model directory / hub id."""
    if not is_vl_config(config):
        return load_tokenizer(path)
    if is_fastrl_tiny_dir(path):
        # Tiny VL dirs: AutoProcessor would need torchvision on CPU; build the parts directly.
        return VLProcessorParts(tokenizer=load_tokenizer(path), image_processor=_load_image_processor(path))
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(str(path))
    except (ImportError, ValueError, OSError, TypeError) as err:
        # Expected on CPU boxes without torchvision; the tokenizer + image processor suffice.
        log.info("AutoProcessor unavailable for %s (%s); using tokenizer + image processor", path, err)
        return VLProcessorParts(tokenizer=load_tokenizer(path), image_processor=_load_image_processor(path))


def _load_image_processor(path: str | Path) -> Any:
    """The image processor of a VL model, on the PIL backend (no torchvision needed)."""
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(str(path), backend="pil")


def load_hf_model(path: str | Path, *, dtype: torch.dtype = torch.float32,
                  attn_implementation: str | None = None) -> PreTrainedModel:
    """The one HF model loader (the actor's policy, its reference, evaluation, SFT): a directory or
    hub id, as ``AutoModelForImageTextToText`` for a VL config (Qwen2.5-VL, which transformers maps
    only there) and ``AutoModelForCausalLM`` otherwise, on the CPU in ``dtype``."""
    config = AutoConfig.from_pretrained(str(path))
    kwargs: dict[str, Any] = {"dtype": dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        if is_vl_config(config):
            from transformers import AutoModelForImageTextToText

            return AutoModelForImageTextToText.from_pretrained(str(path), **kwargs)
        return AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except Exception as err:  # safetensors' errors name no file: find the damaged one
        damaged = damaged_safetensors(path)
        if damaged is None:
            raise
        raise ModelFileError(f"{damaged[0]}: {damaged[1]} ({type(err).__name__}: {str(err).splitlines()[0]}); "
                             "export or copy the model again") from None


def damaged_safetensors(path: str | Path) -> tuple[Path, str] | None:
    """The first ``*.safetensors`` file of a local directory whose header or size is wrong (a
    truncated copy), with why; None when every one is whole (or ``path`` is a hub id)."""
    import json
    import struct

    for file in sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []:
        size = file.stat().st_size
        with open(file, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return file, f"truncated: {size} bytes, not even a header"
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                return file, f"truncated: {size} bytes, its header alone needs {8 + n}"
            try:
                header = json.loads(fh.read(n))
            except ValueError:
                return file, "damaged: its header is not JSON"
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and "data_offsets" in t]
        need = 8 + n + max(ends, default=0)
        if size < need:
            return file, f"truncated: {size} of {need} bytes"
    return None


def load_gguf_model(path: Path) -> PreTrainedModel:
    """A GGUF checkpoint through transformers' GGUF loader, dequantized to float32 (only
    ``fastrl.models.gguf`` calls it, once per file, to write an ordinary directory)."""
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)


def load_policy(path: str | Path, *, dtype: torch.dtype = torch.float32,
                attn_implementation: str | None = None) -> tuple[PreTrainedModel, Any]:
    """Load a policy (``load_hf_model``) and its tokenizer (text) or processor (VL) from a directory
    or hub id.

    The same code loads a tiny mini-scale directory and a paper-scale checkpoint
    (Qwen2.5-VL-3B/7B-Instruct, Llama-3.1-8B-Instruct, ...) and every tiny kind (qwen2, llama,
    qwen2_5_vl). For VL models the second value is an ``AutoProcessor`` when it can be built,
    else a ``VLProcessorParts``.
    """
    model = load_hf_model(path, dtype=dtype, attn_implementation=attn_implementation)
    return model, load_processor(path, model.config)
