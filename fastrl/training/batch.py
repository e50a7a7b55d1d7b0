"""The rollout batch: one flat, ragged list of responses keyed by question uid.

Groups are never reshaped as ``[num_prompts, n]``: after GRESO selection, DAPO filtering, ARS and
pruning, each question has its own number of responses. Every per-response field is a list or a
1-D tensor of the same length N; ``select`` keeps them aligned.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Sequence

import torch

from fastrl.data.schema import Record
from fastrl.rollout.base import PromptInput


@dataclass
class RolloutBatch:
    prompts: list[PromptInput]  # one per response (shared objects, not copies)
    uids: list[str]  # question uid per response
    response_ids: list[list[int]]
    texts: list[str]
    engine_logprobs: list[list[float]]
    finish_reasons: list[str]
    records: list[Record]  # the question each response answers (answer, choices, ...)
    rewards: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [N] overall reward
    accuracies: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [N] 0/1
    advantages: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [N]

    def __len__(self) -> int:
        return len(self.uids)

    def select(self, indices: Sequence[int] | torch.Tensor) -> "RolloutBatch":
        idx = [int(i) for i in indices]
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                out[f.name] = value[idx] if value.numel() else value
            else:
                out[f.name] = [value[i] for i in idx]
        return RolloutBatch(**out)

    @staticmethod
    def concat(batches: Sequence["RolloutBatch"]) -> "RolloutBatch":
        out: dict[str, Any] = {}
        for f in fields(RolloutBatch):
            values = [getattr(b, f.name) for b in batches]
            if isinstance(values[0], torch.Tensor):
                out[f.name] = torch.cat(values) if values else torch.zeros(0)
            else:
                out[f.name] = [x for v in values for x in v]
        return RolloutBatch(**out)

    def group_indices(self) -> dict[str, list[int]]:
        """Response indices per question uid, in batch order."""
        groups: dict[str, list[int]] = {}
        for i, uid in enumerate(self.uids):
            groups.setdefault(uid, []).append(i)
        return groups

    def num_response_tokens(self) -> int:
        return sum(len(r) for r in self.response_ids)
