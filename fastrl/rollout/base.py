"""The rollout-engine seam: what every engine takes and returns.

Engines (``hf``, ``vllm``) turn encoded prompts into sampled responses. Groups are ragged: ``n``
may differ per prompt (ARS per-prompt mode), so responses carry the index of their prompt and
are never reshaped as ``[num_prompts, n]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

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
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 64
    seed: int | None = None


@dataclass
class Response:
    """One sampled response. ``logprobs[t]`` is the engine's log-prob of ``response_ids[t]``."""

    prompt_index: int
    response_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"


@runtime_checkable
class RolloutEngine(Protocol):
    name: str

    def generate(
        self,
        prompts: Sequence[PromptInput],
        n: int | Sequence[int],
        sampling: SamplingConfig,
    ) -> list[Response]:
        """Sample ``n`` (or ``n[i]`` for prompt i) responses per prompt, prompt-major order."""
        ...

    def sync_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights (HF parameter names) into the engine."""
        ...
