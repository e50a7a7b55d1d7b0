"""The rollout-engine seam: what every engine takes and returns.

Engines (``hf``, ``vllm``) turn encoded prompts into sampled responses. Groups are ragged: ``n``
may differ per prompt (ARS per-prompt mode), so responses carry the index of their prompt and
are never reshaped as ``[num_prompts, n]``.

``PromptInput`` (what engines take) is defined in ``fastrl.models.inputs`` and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence, runtime_checkable

import torch

from fastrl.models.inputs import PromptInput

__all__ = ["PromptInput", "Response", "RolloutEngine", "SamplingConfig"]


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
