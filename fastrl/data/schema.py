"""The canonical record every dataset is turned into (DESIGN.md §6).

``{"uid", "problem", "images": [..], "answer", "choices"?, "source", "meta"}`` with exactly one
``<image>`` placeholder in ``problem`` per image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

IMAGE_PLACEHOLDER = "<image>"


@dataclass
class Record:
    uid: str
    problem: str
    answer: str
    source: str
    images: list[Any] = field(default_factory=list)  # PIL images, paths or encoded bytes
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "problem": self.problem,
            "images": list(self.images),
            "answer": self.answer,
            "choices": self.choices,
            "source": self.source,
            "meta": dict(self.meta),
        }
