"""Prompt encoding: chat template, ``<image>`` expansion, token ids -> ``PromptInput``.

One code path for every scale. The problem text holds one ``<image>`` placeholder per image
(the canonical record, docs/architecture.md "Data record"). The text is wrapped by the tokenizer's chat template (the
mini tokenizer ships a Qwen-style one), then each placeholder becomes
``<|vision_start|>`` + ``<|image_pad|>`` x k + ``<|vision_end|>`` with
k = prod(image_grid_thw[i]) / merge_size**2 from the image processor, exactly what
``Qwen2_5_VLProcessor`` produces. Expanding by hand means the CPU box needs only
``Qwen2VLImageProcessor`` (PIL backend) and the tokenizer: the full processor cannot be built
there without torchvision.

Paper-scale VL prompts resize each image first as qwen-vl-utils' ``fetch_image`` does
(``min_pixels`` / ``max_pixels``, ``fastrl.data.vision``), so the image-token count is the
paper's; the image processor is then called with the same bounds and keeps that size.

Two steps, so that a trainer can keep every record's prompt without its pixels:
``tokenize`` gives the token ids and image grids from the images' sizes alone (no pixel tensor is
built: the resize rule decides the grid), ``materialize`` builds the resized images and pixel
values for one batch and checks the image processor produced the grid ``tokenize`` counted.
``encode`` is the two in a row.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Sequence

import torch
from PIL import Image

from fastrl.data.images import to_rgb
from fastrl.data.schema import IMAGE_PLACEHOLDER
from fastrl.data.vision import resize_image, smart_resize
from fastrl.models.inputs import PromptInput, PromptTokens

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"


def to_pil(image: Any, *, where: str) -> Image.Image:
    """An RGB PIL image from a PIL image, a path, raw bytes or an HF ``{"bytes": ...}`` dict
    (transparent pixels become white, as in qwen-vl-utils and the loaders)."""
    try:
        if isinstance(image, Image.Image):
            img = image
        elif isinstance(image, (str, Path)):
            img = Image.open(image)
        elif isinstance(image, (bytes, bytearray)):
            img = Image.open(io.BytesIO(image))
        elif isinstance(image, dict) and image.get("bytes") is not None:
            img = Image.open(io.BytesIO(image["bytes"]))
        elif isinstance(image, dict) and image.get("path") is not None:
            img = Image.open(image["path"])
        else:
            raise ValueError(f"unsupported image type {type(image).__name__}")
        return to_rgb(img)
    except (OSError, ValueError) as err:
        raise ValueError(f"{where}: image does not open ({err})") from err


def image_size(image: Any, *, where: str) -> tuple[int, int]:
    """(width, height) of an image reference, reading only the file header for paths and bytes."""
    if isinstance(image, Image.Image):
        return image.size
    try:
        if isinstance(image, dict):
            image = image["bytes"] if image.get("bytes") is not None else image.get("path")
        if isinstance(image, (bytes, bytearray)):
            with Image.open(io.BytesIO(image)) as img:
                return img.size
        if isinstance(image, (str, Path)):
            with Image.open(image) as img:
                return img.size
    except (OSError, ValueError) as err:
        raise ValueError(f"{where}: image does not open ({err})") from err
    raise ValueError(f"{where}: image does not open (unsupported image type {type(image).__name__})")


class PromptEncoder:
    """Turns (uid, text with ``<image>`` placeholders, images) into a ``PromptInput``.

    ``tokenizer``: any HF tokenizer; ``image_processor``: a Qwen2-VL-style image processor
    (``patch_size``, ``merge_size``; returns ``pixel_values`` [P, C] and ``image_grid_thw``
    [I, 3]) or None for text-only models. ``use_chat_template`` wraps the text as one user turn
    (plus ``system_prompt`` when given) with the generation prompt appended; it needs a
    tokenizer with a chat template. ``max_prompt_length`` (tokens, after image expansion) makes
    a longer prompt an error instead of a silent truncation. ``min_pixels`` / ``max_pixels``
    (both or neither) resize every image as qwen-vl-utils does before the image processor; without
    them the image processor's own settings decide (the tiny stand-ins' fixed size).
    """

    def __init__(
        self,
        tokenizer: Any,
        image_processor: Any | None = None,
        *,
        use_chat_template: bool = True,
        system_prompt: str | None = None,
        max_prompt_length: int | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
    ) -> None:
        if (min_pixels is None) != (max_pixels is None):
            raise ValueError(f"PromptEncoder: give both min_pixels and max_pixels or neither "
                             f"(got {min_pixels}, {max_pixels})")
        if min_pixels is not None and not 0 < min_pixels <= max_pixels:  # type: ignore[operator]
            raise ValueError(f"PromptEncoder: need 0 < min_pixels <= max_pixels, got {min_pixels}, {max_pixels}")
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels
        if use_chat_template and not getattr(tokenizer, "chat_template", None):
            raise ValueError("PromptEncoder: use_chat_template=True but the tokenizer has no chat_template")
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.use_chat_template = use_chat_template
        self.system_prompt = system_prompt
        self.max_prompt_length = max_prompt_length
        self.image_token_id: int | None = None
        if image_processor is not None:
            ids = tokenizer.convert_tokens_to_ids([VISION_START, IMAGE_PAD, VISION_END])
            if any(i is None or i == tokenizer.unk_token_id for i in ids):
                raise ValueError(f"PromptEncoder: tokenizer lacks one of {VISION_START}, {IMAGE_PAD}, {VISION_END}")
            self.image_token_id = ids[1]

    @classmethod
    def from_processor(cls, tokenizer_or_processor: Any, **kwargs: Any) -> "PromptEncoder":
        """From ``load_policy``'s second value: a tokenizer, an HF processor or VLProcessorParts."""
        if hasattr(tokenizer_or_processor, "tokenizer"):
            return cls(tokenizer_or_processor.tokenizer,
                       getattr(tokenizer_or_processor, "image_processor", None), **kwargs)
        return cls(tokenizer_or_processor, None, **kwargs)

    def _prepare_image(self, image: Any, *, where: str) -> Image.Image:
        img = to_pil(image, where=where)
        if self.min_pixels is None:
            return img
        factor = int(self.image_processor.patch_size) * int(self.image_processor.merge_size)
        try:
            return resize_image(img, min_pixels=self.min_pixels, max_pixels=self.max_pixels, factor=factor)  # type: ignore[arg-type]
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from err

    def _process_images(self, images: list[Image.Image]) -> Any:
        """The image processor's output; with min/max pixels set, its resize gets the same bounds
        (it then keeps the already-resized size)."""
        if self.min_pixels is None:
            return self.image_processor(images=images, return_tensors="pt")
        size = {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels}
        return self.image_processor(images=images, return_tensors="pt", size=size)

    def format_text(self, text: str) -> str:
        """The prompt string before image expansion (chat template applied when enabled)."""
        if not self.use_chat_template:
            return text
        messages = []
        if self.system_prompt is not None:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": text})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def image_grid(self, width: int, height: int) -> tuple[int, int, int]:
        """The (t, h, w) patch grid the image processor gives an image of this size, after the
        qwen-vl-utils resize when min/max pixels are set: the same two resize rules, on sizes only."""
        ip = self.image_processor
        patch, merge = int(ip.patch_size), int(ip.merge_size)
        if self.min_pixels is not None:
            height, width = smart_resize(height, width, min_pixels=self.min_pixels, max_pixels=self.max_pixels,  # type: ignore[arg-type]
                                         factor=patch * merge)
            bounds = (self.min_pixels, self.max_pixels)
        else:
            bounds = (ip.size["shortest_edge"], ip.size["longest_edge"])
        if getattr(ip, "do_resize", True):
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as processor_resize

            height, width = processor_resize(height, width, factor=patch * merge, min_pixels=bounds[0], max_pixels=bounds[1])
        return 1, height // patch, width // patch

    def tokenize(self, uid: str, text: str, images: Sequence[Any]) -> PromptTokens:
        """Token ids with image tokens expanded, and image grids, from the images' sizes only."""
        n_placeholders = text.count(IMAGE_PLACEHOLDER)
        if n_placeholders != len(images):
            raise ValueError(
                f"uid={uid}: problem has {n_placeholders} {IMAGE_PLACEHOLDER} placeholders but {len(images)} images"
            )
        if images and self.image_processor is None:
            raise ValueError(f"uid={uid}: prompt has {len(images)} images but the model has no image processor")
        prompt = self.format_text(text)
        grid: torch.Tensor | None = None
        if images:
            grids = []
            for i, im in enumerate(images):
                where = f"uid={uid} image {i}"
                w, h = image_size(im, where=where)
                try:
                    grids.append(self.image_grid(w, h))
                except ValueError as err:  # smart_resize's aspect-ratio limit
                    raise ValueError(f"{where}: {err}") from err
            grid = torch.tensor(grids, dtype=torch.long)  # [I, 3]
            merge = int(self.image_processor.merge_size)
            counts = (grid.prod(dim=-1) // (merge * merge)).tolist()
            pieces = prompt.split(IMAGE_PLACEHOLDER)
            prompt = pieces[0]
            for k, tail in zip(counts, pieces[1:]):
                prompt += VISION_START + IMAGE_PAD * int(k) + VISION_END + tail
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if self.max_prompt_length is not None and len(ids) > self.max_prompt_length:
            raise ValueError(f"uid={uid}: prompt is {len(ids)} tokens, max_prompt_length={self.max_prompt_length}")
        if grid is not None:
            n_img_tokens = sum(1 for i in ids if i == self.image_token_id)
            expected = int(sum(counts))
            if n_img_tokens != expected:  # e.g. a placeholder the chat template dropped
                raise ValueError(f"uid={uid}: {n_img_tokens} image tokens after tokenization, expected {expected}")
        return PromptTokens(uid=uid, prompt_ids=list(ids), image_refs=list(images), image_grid_thw=grid)

    def materialize(self, tokens: PromptTokens) -> PromptInput:
        """The full prompt of one batch: resized PIL images and, for VL, ``model_inputs``
        ``pixel_values`` [P, C], ``image_grid_thw`` [I, 3], ``mm_token_type_ids`` [L] (1 on image
        tokens, else 0)."""
        uid = tokens.uid
        pil = [self._prepare_image(im, where=f"uid={uid} image {i}") for i, im in enumerate(tokens.image_refs)]
        model_inputs: dict[str, torch.Tensor] = {}
        if pil:
            out = self._process_images(pil)
            grid = out["image_grid_thw"]  # [I, 3]: temporal, height, width patches
            if tokens.image_grid_thw is None or not torch.equal(grid.to(torch.long), tokens.image_grid_thw):
                raise ValueError(f"uid={uid}: the image processor gave grids {grid.tolist()}, the prompt was "
                                 f"tokenized for {None if tokens.image_grid_thw is None else tokens.image_grid_thw.tolist()}")
            model_inputs["pixel_values"] = out["pixel_values"]
            model_inputs["image_grid_thw"] = grid
            id_tensor = torch.tensor(tokens.prompt_ids, dtype=torch.long)
            model_inputs["mm_token_type_ids"] = (id_tensor == self.image_token_id).to(torch.int32)
        return PromptInput(uid=uid, prompt_ids=list(tokens.prompt_ids), images=pil, model_inputs=model_inputs)

    def encode(self, uid: str, text: str, images: Sequence[Any]) -> PromptInput:
        """Encode one prompt: ``tokenize`` then ``materialize``."""
        return self.materialize(self.tokenize(uid, text, images))
