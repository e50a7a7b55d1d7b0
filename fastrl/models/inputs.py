"""``PromptInput``: one encoded prompt, as the prompt encoder makes it and as batching, forward
passes and rollout engines take it; ``PromptTokens``: the same prompt without pixel tensors, what
a trainer keeps for every record (``PromptEncoder.materialize`` turns it into a ``PromptInput``).

It lives with the models (not the engines) so that models -> rollout is the only direction between
the two subpackages; ``fastrl.rollout.base`` re-exports it for the engines' callers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class PromptInput:
    """One encoded prompt.

    ``prompt_ids`` already contains any expanded image tokens. ``images`` are the raw PIL images
    (what vLLM's ``multi_modal_data`` wants); ``model_inputs`` are the extra tensors an HF forward
    needs for this prompt alone (e.g. ``pixel_values`` [P, C], ``image_grid_thw`` [I, 3]).
    """

    uid: str
    prompt_ids: list[int]
    images: list[Any] = field(default_factory=list)
    model_inputs: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class PromptTokens:
    """A prompt's token ids (image tokens expanded) and references to its images, no pixel tensors.

    ``image_refs`` are the record's own image objects (PIL images, paths or encoded bytes), not
    copies; ``image_grid_thw`` [I, 3] is the patch grid each image will have once resized (None for
    a text prompt). Building pixel values (``PromptEncoder.materialize``) is left to the batch that
    needs them: a float32 Qwen2.5-VL image at the released ``max_pixels`` is megabytes.
    """

    uid: str
    prompt_ids: list[int]
    image_refs: list[Any] = field(default_factory=list)
    image_grid_thw: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.prompt_ids)
