"""The rollout-engine seam: what every engine takes and returns.

Engines (``hf``, ``vllm``; the names are ``fastrl.engines.ROLLOUT_ENGINES``) turn encoded
prompts into sampled responses. :class:`RolloutEngine` holds everything the trainer calls; nothing
outside ``fastrl/rollout/`` asks which engine it has. Groups are ragged: ``n``
may differ per prompt (ARS per-prompt mode), so responses carry the index of their prompt and
are never reshaped as ``[num_prompts, n]``.

``PromptInput`` (what engines take) is defined in ``fastrl.models.inputs`` and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import torch

from fastrl.models.inputs import PromptInput

__all__ = ["EngineContext", "PromptInput", "Response", "RolloutEngine", "SamplingConfig", "stop_token_ids"]


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


@dataclass(frozen=True)
class EngineContext:
    """What every engine factory (``fastrl.engines``) gets beside the policy spec, resolved once by
    the policy kit: the HF model (``hf`` samples from it; ``vllm`` loads its own copy), its text
    tokenizer, the pad id and the stop tokens (:func:`stop_token_ids`)."""

    model: torch.nn.Module
    tokenizer: Any
    pad_token_id: int
    stop_token_ids: list[int]


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer, ``fastrl eval`` and the benchmarks call on an engine.

    Order in a training step (``fastrl.training.pipeline``): ``generate`` (the rollout), ``sleep``
    (release memory for the update), the update, ``wake_up(("weights",))``, ``update_weights``,
    ``wake_up(("kv_cache",))``, then the post-sync check (``generate`` + the trainer's forward,
    ``fastrl.rollout.logprob_check``). Engines with ``shares_trainer_weights`` skip the update and
    the check: they sample from the trainer's own module.
    """

    name: str
    # True: the engine samples from the trainer's module itself (hf, colocated), so a weight update
    # has nothing to copy and there is no separate copy to check.
    shares_trainer_weights: bool
    # Optional, not part of the protocol: ``progress`` (Callable[[int], None] | None), which
    # evaluation sets and then resets to None; the engine calls it with the number of responses each
    # time some finish (a progress bar). An engine without the attribute shows none.

    def generate(
        self,
        prompts: Sequence[PromptInput],
        n: int | Sequence[int],
        sampling: SamplingConfig,
    ) -> list[Response]:
        """Sample ``n`` (or ``n[i]`` for prompt i) responses per prompt, prompt-major order.

        Every rank of a multi-rank run calls it at the same point, possibly with no prompts
        (engines that run collectives, e.g. hf under ZeRO-3, take part then without sampling)."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights (HF parameter names), consumed lazily one tensor at a time."""
        ...

    def logprobs_of(self, prompts: Sequence[PromptInput], response_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """The engine's log-prob of each token of ``response_ids[i]`` continuing ``prompts[i]``."""
        ...

    def sleep(self) -> None:
        """Release what the engine holds between rollouts (a no-op where it holds nothing or cannot)."""
        ...

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Undo :meth:`sleep` for ``tags`` (``"weights"``, ``"kv_cache"``; None: everything)."""
        ...

    def close(self) -> None:
        """Free the engine's memory; the engine is unusable after."""
        ...


def stop_token_ids(tokenizer_eos: int | Sequence[int] | None, generation_eos: int | Sequence[int] | None) -> list[int]:
    """The one stop set of every engine: the tokenizer's EOS and ``generation_config.json``'s
    ``eos_token_id`` (an int or a list), deduplicated in that order.

    HF ``generate`` given only the tokenizer's EOS runs past a Llama-3.1 ``<|eot_id|>`` turn end;
    vLLM stops on both by itself. Both engines get this set, so they stop on the same tokens.
    """
    ids: list[int] = []
    for value in (tokenizer_eos, generation_eos):
        for tok in ([value] if isinstance(value, int) else list(value or [])):
            if int(tok) not in ids:
                ids.append(int(tok))
    if not ids:
        raise ValueError("no stop token: the tokenizer has no eos_token_id and generation_config.json none either")
    return ids
