"""The prompt-length limit: rows whose prompt (chat template + image tokens) is over
``max_prompt_length`` tokens are dropped and counted, or are an error naming the first.

EasyR1 (whose data pipeline the paper uses) filters such prompts when it loads a dataset
(``filter_overlong_prompts``, max_prompt_length 2,048 in its configs). Without a limit a single
over-long prompt reaches the engine: vLLM rejects the whole batch when one prompt does not fit
``max_model_len``, and one exceeding the KV budget silently shortens every response after it.
At the released ``max_pixels`` 11 of MathVision testmini's 304 images alone need > 2,048 tokens.

The caller measures lengths with the real prompt encoding (``PromptEncoder.tokenize``, which
builds no pixel tensors) and says where the rows come from (a file or benchmark name).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class PromptTooLongError(ValueError):
    """A row's prompt is over the limit under the ``error`` policy; the message names file, row, uid."""


@dataclass(frozen=True)
class PromptLimit:
    """``max_prompt_length`` tokens and the ``policy`` for rows over it (``filter`` | ``error``).
    ``length_key`` / ``policy_key`` are the settings' names as the user writes them (config keys
    or CLI flags), for the messages."""

    max_prompt_length: int
    policy: str = "filter"
    length_key: str = "data.max_prompt_length"
    policy_key: str = "data.prompt_length_policy"

    def __post_init__(self) -> None:
        if self.policy not in ("filter", "error"):
            raise ValueError(f"{self.policy_key} = {self.policy!r} is not one of filter, error")
        if self.max_prompt_length < 1:
            raise ValueError(f"{self.length_key} = {self.max_prompt_length} must be >= 1 (tokens)")

    def keep(self, rows: Sequence[T], lengths: Sequence[int], uids: Sequence[str], *, where: str) -> list[int]:
        """Indices of the rows within the limit. ``filter`` logs how many of ``where``'s rows were
        dropped; ``error`` raises on the first row over it."""
        if not len(rows) == len(lengths) == len(uids):
            raise ValueError(f"{where}: {len(rows)} rows, {len(lengths)} lengths, {len(uids)} uids")
        over = [i for i, n in enumerate(lengths) if n > self.max_prompt_length]
        if over and self.policy == "error":
            i = over[0]
            raise PromptTooLongError(
                f"{where}, row {i} (uid={uids[i]!r}): the prompt is {lengths[i]} tokens, over "
                f"{self.length_key}={self.max_prompt_length} ({len(over)} of {len(rows)} rows are); raise "
                f"{self.length_key}, lower the image resolution (max_pixels), or set {self.policy_key}=filter "
                f"to drop such rows")
        if over:
            log.warning("%s: dropped %d of %d rows whose prompt is over %s=%d tokens (longest %d; first uid %r)",
                        where, len(over), len(rows), self.length_key, self.max_prompt_length,
                        max(lengths[i] for i in over), uids[over[0]])
        dropped = set(over)
        return [i for i in range(len(rows)) if i not in dropped]
