"""MathVerse testmini → canonical parquet. Hub: ``AI4Math/MathVerse`` configs ``testmini``
(3,940 rows: 788 problems × Text Dominant, Text Lite, Vision Intensive, Vision Dominant, Vision
Only) and ``testmini_text_only`` (788, no image).

Splits written: ``testmini`` (all five image versions), ``testmini_vision_only`` (the Vision Only
subset: the question is only in the image) and ``testmini_text_only``.

Traps: no image placeholder (``<image>`` is prepended); Vision Only rows have an empty question
(an instruction to read it from the image is used); multiple-choice options sit inside the question
text ("Choices:\\nA:…"), parsed into ``choices`` when present (answer → option text, letter in
``meta.answer_letter``); otherwise the letter answer stays. No offline sample exists: ``make data``
runs on generated rows with this schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import (
    GENERATED_ROWS, DatasetSpec, OfflineRun, hf_image, letter_to_option, load_hub_rows, load_local_split, main_for,
    require, str_answer, with_leading_image,
)
from fastrl.data.schema import IMAGE_PLACEHOLDER, Record

SPEC = DatasetSpec(name="mathverse", title="MathVerse", hub_id="AI4Math/MathVerse",
                   splits=("testmini", "testmini_vision_only", "testmini_text_only"))
VISION_ONLY_PROMPT = "The question and any options are shown in the image. Answer the question."
_CHOICE_LINE = re.compile(r"^\s*([A-H])\s*[:.：]\s*(.+?)\s*$")


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    source_split = "testmini" if split == "testmini_vision_only" else split
    if from_local is None:
        rows = load_hub_rows(SPEC.hub_id, source_split, source_split)
    else:
        rows = load_local_split(from_local, source_split)
    for row in rows:
        if split == "testmini_vision_only" and row.get("problem_version") != "Vision Only":
            continue
        yield row


def parse_choices(question: str) -> list[str] | None:
    if "Choices" not in question:
        return None
    tail = question.split("Choices", 1)[1].lstrip(":：").splitlines()
    opts = [m.group(2) for line in tail if (m := _CHOICE_LINE.match(line))]
    return opts if len(opts) >= 2 else None


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    version = str(require(row, "problem_version"))
    question = str(row.get("question") or "").strip()
    answer = str_answer(row.get("answer"))
    uid = f"mathverse-{split}-{require(row, 'sample_index')}"
    images: list[Any] = []
    if row.get("image") is not None:
        base = Path(row["__file__"]).parent if "__file__" in row else None
        images = [hf_image(row["image"], base)]
    if IMAGE_PLACEHOLDER in question:
        raise ValueError(f"question unexpectedly contains {IMAGE_PLACEHOLDER!r}")
    text = question or VISION_ONLY_PROMPT
    if not images and not question:
        raise ValueError("row has neither an image nor a question")
    problem = with_leading_image(text, len(images)) if images else text
    meta = {"sample_index": str(row["sample_index"]), "problem_index": str(row.get("problem_index")),
            "problem_version": version, "question_type": row.get("question_type"), "metadata": row.get("metadata"),
            "split": split}
    choices = parse_choices(question) if row.get("question_type") == "multi-choice" else None
    if choices:
        meta["answer_letter"] = answer
        answer = letter_to_option(answer, choices, uid)
    return Record(uid=uid, problem=problem, images=images, answer=answer, choices=choices, source=SPEC.title, meta=meta)


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    from data_prep.hub_samples import write_mathverse

    write_mathverse(scratch)
    d = "generated rows with the AI4Math/MathVerse schema"
    return [OfflineRun("testmini", scratch, GENERATED_ROWS, f"10 {d} (2 problems × 5 versions)"),
            OfflineRun("testmini_vision_only", scratch, GENERATED_ROWS, f"the Vision Only subset of those"),
            OfflineRun("testmini_text_only", scratch, GENERATED_ROWS, f"2 text-only {d}")]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.mathverse"))
