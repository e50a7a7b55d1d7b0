"""``PromptInput``: one encoded prompt, as the prompt encoder makes it and as batching, forward
passes and rollout engines take it.

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
