"""MathVision (MATH-V) → canonical parquet. Hub: ``MathLLMs/MathVision`` (test 3,040; testmini 304).
Local: the MATH-V repository layout (``testmini.jsonl`` + ``images/<id>.jpg``), as in
``data/mathvision_testmini`` (the offline run uses these 304 real rows).

Trap: questions use ``<image1>``, ``<image2>`` … tags, but each row has ONE image (MATH-V composes
the figure and any option pictures into it). The first tag becomes the single canonical
``<image>``; the others are removed (recorded in ``meta.image_tags``); a question with no tag gets
``<image>`` prepended. Options: when they are only the letters A-E (the options are drawn in the
image) the row keeps ``choices = None`` and the letter answer; when they are texts, ``choices``
holds them and ``answer`` is the option text (letter in ``meta.answer_letter``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import (
    REAL_SAMPLE, DatasetSpec, OfflineRun, hf_image, letter_to_option, load_hub_rows, main_for, read_table_rows,
    require, str_answer,
)
from fastrl.data.schema import IMAGE_PLACEHOLDER, Record

SPEC = DatasetSpec(name="mathvision", title="MathVision", hub_id="MathLLMs/MathVision", splits=("testmini", "test"))
_TAG = re.compile(r"<image\d*>")


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    if from_local is None:
        yield from load_hub_rows(SPEC.hub_id, split)
        return
    for cand in (from_local / f"{split}.jsonl", from_local / "data" / f"{split}.jsonl"):
        if cand.exists():
            for row in read_table_rows(cand):
                yield {**row, "__file__": str(cand)}
            return
    from data_prep.common import load_local_split

    yield from load_local_split(from_local, split)


def canonical_question(question: str) -> tuple[str, list[str]]:
    """Question with exactly one ``<image>`` (where the first ``<imageK>`` was) and the original tags."""
    tags = _TAG.findall(question)
    if not tags:
        return IMAGE_PLACEHOLDER + question.strip(), []
    first = _TAG.search(question)
    assert first is not None
    head, tail = question[: first.start()], _TAG.sub("", question[first.end():])
    text = head + IMAGE_PLACEHOLDER + tail
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text, tags


def _image(row: dict[str, Any]) -> Any:
    if row.get("decoded_image") is not None:
        return row["decoded_image"]
    rel = Path(str(require(row, "image")))
    base = Path(row["__file__"]).parent if "__file__" in row else None
    if base is not None:
        for d in (base, base.parent):
            if (d / rel).exists():
                return str(d / rel)
        raise FileNotFoundError(f"image {rel} not found next to {row['__file__']} or its parent")
    return hf_image(row["image"])


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    problem, tags = canonical_question(str(require(row, "question")))
    options = [str(o).strip() for o in (row.get("options") or [])]
    answer = str_answer(row.get("answer"))
    uid = f"mathvision-{split}-{require(row, 'id')}"
    meta: dict[str, Any] = {"id": str(row["id"]), "level": row.get("level"), "subject": row.get("subject"),
                            "image_tags": tags, "split": split}
    choices: list[str] | None = None
    if options and options != list("ABCDE"[: len(options)]):
        choices = options
        meta["answer_letter"] = answer
        answer = letter_to_option(answer, choices, uid)
    elif options or re.fullmatch(r"[A-E]", answer):
        # options only in the image: letters listed, or (one testmini row, id 59) not even listed
        meta["options_in_image"] = True
    return Record(uid=uid, problem=problem, images=[_image(row)], answer=answer, choices=choices,
                  source=SPEC.title, meta=meta)


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    return [OfflineRun("testmini", shared / "mathvision_testmini", REAL_SAMPLE, "MathVision testmini (304 rows + images) in data/")]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.mathvision"))
