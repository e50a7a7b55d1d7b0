"""A rollout engine written outside the package, with its own config section (docs/algorithms.md,
"Adding an engine, a model source or a task"): the HF engine with every training rollout cut to
``rollout.capped.max_tokens`` tokens.

    PYTHONPATH=docs/examples fastrl train methods/grpo.yaml --scale smoke --import capped_engine \\
        rollout.engine=capped rollout.capped.max_tokens=4
    PYTHONPATH=docs/examples fastrl eval --import capped_engine --engine capped --model runs/x --benchmark mini-math

``tests/integration/test_plugin_seams.py`` trains and evaluates it from a temp dir.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from fastrl.algorithms.registry import register
from fastrl.engines import ROLLOUT_ENGINES


@dataclass
class CappedEngineConfig:
    """``rollout.capped``: its defaults and checks live here, and nowhere else."""

    max_tokens: int = 8  # rollout.capped.max_tokens: the longest response it samples
    batch_size: int = 64  # rollout.capped.batch_size: sequences per generate call

    def check(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens = {self.max_tokens} must be >= 1")


class CappedEngine:
    """Any engine, with ``generate``'s response budget capped; everything else is the inner engine's."""

    name = "capped"

    def __init__(self, inner: Any, max_tokens: int) -> None:
        self.inner = inner
        self.max_tokens = max_tokens
        self.shares_trainer_weights = inner.shares_trainer_weights

    def generate(self, prompts: Sequence[Any], n: int | Sequence[int], sampling: Any) -> list[Any]:
        budget = min(sampling.max_new_tokens, self.max_tokens)
        return self.inner.generate(prompts, n, dataclasses.replace(sampling, max_new_tokens=budget))

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        self.inner.update_weights(named_tensors)

    def logprobs_of(self, prompts: Sequence[Any], response_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        return self.inner.logprobs_of(prompts, response_ids)

    def sleep(self) -> None:
        self.inner.sleep()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        self.inner.wake_up(tags)

    def close(self) -> None:
        self.inner.close()


@register(ROLLOUT_ENGINES, "capped", section="capped", config=CappedEngineConfig)
def build_capped_engine(config: CappedEngineConfig, spec: Any, context: Any) -> CappedEngine:
    """The factory: called with this engine's own section (``rollout.capped``), the policy spec and
    the engine context (model, tokenizer, pad id, stop tokens)."""
    from fastrl.rollout.hf import HFRolloutEngine

    inner = HFRolloutEngine(context.model, context.tokenizer, eos_token_ids=context.stop_token_ids,
                            pad_token_id=context.pad_token_id, batch_size=config.batch_size)
    return CappedEngine(inner, config.max_tokens)
