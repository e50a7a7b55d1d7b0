"""The canonical record every dataset is turned into (docs/architecture.md, "Data record").

``{"uid", "problem", "images": [..], "answer", "choices"?, "source", "meta"}`` with exactly one
``<image>`` placeholder in ``problem`` per image.

Validation lives here so that ``data_prep`` (writing) and ``fastrl.data.loaders`` (reading) apply
the same rules and raise the same error, naming the file, the row, the field and the uid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

IMAGE_PLACEHOLDER = "<image>"

# Anything that looks like an image tag but is not the canonical placeholder: MathVision's
# ``<image1>``, ``<img>``, ``<Image>``, and model-specific tokens such as Qwen's
# ``<|image_pad|>`` / ``<|vision_start|>`` that must never appear in raw problem text.
_TAG_LIKE = re.compile(r"<\s*/?\s*(?:image|img)[^<>]{0,20}>|<\|(?:image|vision)[a-z_]*\|>", re.IGNORECASE)

REQUIRED_FIELDS: tuple[str, ...] = ("uid", "problem", "answer", "source", "images", "meta")
ALL_FIELDS: tuple[str, ...] = ("uid", "problem", "images", "answer", "choices", "source", "meta")


@dataclass
class Record:
    uid: str
    problem: str
    answer: str
    source: str
    images: list[Any] = field(default_factory=list)  # PIL images, paths or encoded bytes
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # The record's integer row in the training set (set when a run loads its train files; not
    # stored in files): the release's ``question_id``, which orders MDAP's questions.
    row_id: int | None = field(default=None, compare=False)

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


class RecordError(ValueError):
    """A canonical row that breaks the schema. The message names file, row, field and uid."""

    def __init__(self, message: str, *, file: str | None, row: int | None, field: str, uid: str | None):
        self.file = file
        self.row = row
        self.field = field
        self.uid = uid
        self.reason = message
        where = f"file {file!r}, " if file is not None else ""
        where += f"row {row}, " if row is not None else ""
        super().__init__(f"{where}field {field!r} (uid={uid!r}): {message}")


# ``meta.question_type`` values that mark a multiple-choice row (MathVista writes ``multi_choice``,
# MathVerse ``multi-choice``); MathVision marks options drawn in the image with ``options_in_image``.
MULTIPLE_CHOICE_TYPES = frozenset({"multi_choice", "multi-choice", "multiple_choice", "multiple-choice"})


def is_multiple_choice(choices: list[str] | None, meta: dict[str, Any] | None) -> bool:
    """Whether a row asks for an option letter: it lists ``choices``, or its options are shown only
    in the image (``meta.options_in_image``, or a multiple-choice ``meta.question_type``). Every
    other row is free-form (MathVision's numeric questions, MathVista's ``free_form`` rows)."""
    if choices:
        return True
    meta = meta or {}
    return bool(meta.get("options_in_image")) or meta.get("question_type") in MULTIPLE_CHOICE_TYPES


def unknown_placeholders(problem: str) -> list[str]:
    """Image-like tags in ``problem`` other than the canonical ``<image>``."""
    return [m.group(0) for m in _TAG_LIKE.finditer(problem) if m.group(0) != IMAGE_PLACEHOLDER]


def count_placeholders(problem: str) -> int:
    return problem.count(IMAGE_PLACEHOLDER)


def validate_fields(
    rec: Record, *, file: str | None = None, row: int | None = None
) -> None:
    """Check types, non-empty answer, choices and the placeholder/image count of one record.

    Does not open images (the loader and writer do that, so the error can name the image index).
    Raises ``RecordError``.
    """
    uid = rec.uid if isinstance(rec.uid, str) else None

    def fail(fld: str, msg: str) -> None:
        raise RecordError(msg, file=file, row=row, field=fld, uid=uid)

    if not isinstance(rec.uid, str) or not rec.uid.strip():
        fail("uid", f"must be a non-empty string, got {rec.uid!r}")
    for name in ("problem", "answer", "source"):
        value = getattr(rec, name)
        if value is None:
            fail(name, "is missing")
        if not isinstance(value, str):
            fail(name, f"must be a string, got {type(value).__name__}")
        if not value.strip():
            fail(name, "is empty")
    if not isinstance(rec.images, list):
        fail("images", f"must be a list, got {type(rec.images).__name__}")
    if rec.choices is not None:
        if not isinstance(rec.choices, list) or not all(isinstance(c, str) for c in rec.choices):
            fail("choices", f"must be null or a list of strings, got {rec.choices!r}")
        if len(rec.choices) < 2:
            fail("choices", f"a multiple-choice row needs at least 2 options, got {rec.choices!r}")
    if not isinstance(rec.meta, dict):
        fail("meta", f"must be a dict, got {type(rec.meta).__name__}")
    bad_tags = unknown_placeholders(rec.problem)
    if bad_tags:
        fail("problem", f"unknown image placeholder(s) {bad_tags}; only {IMAGE_PLACEHOLDER!r} is allowed")
    n_tags = count_placeholders(rec.problem)
    if n_tags != len(rec.images):
        fail(
            "problem",
            f"has {n_tags} {IMAGE_PLACEHOLDER!r} placeholder(s) but the row has {len(rec.images)} image(s)",
        )
