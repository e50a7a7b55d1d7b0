"""WeMath testmini → canonical parquet. Hub: ``We-Math/We-Math`` split ``testmini`` (1,740).
Columns: ID, split, knowledge concept, question, option ("A. …; B. …"), answer (letter),
image_path (image), key, question number, knowledge concept description.

Traps: no image placeholder (``<image>`` is prepended); options are one string, parsed into
``choices``; the answer is a letter, mapped to the option text (letter in ``meta.answer_letter``).
No offline sample exists: ``make data`` runs on generated rows with this schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import (
    GENERATED_ROWS, DatasetSpec, OfflineRun, hf_image, letter_to_option, load_hub_rows, load_local_split, main_for,
    require, str_answer, with_leading_image,
)
from fastrl.data.schema import Record

SPEC = DatasetSpec(name="wemath", title="WeMath", hub_id="We-Math/We-Math", splits=("testmini",))
_OPTION = re.compile(r"(?:^|;)\s*([A-H])\s*[.:：]\s*(.*?)\s*(?=;\s*[A-H]\s*[.:：]|$)", re.DOTALL)


def parse_options(option: Any) -> list[str]:
    if isinstance(option, (list, tuple)):
        return [str(o).strip() for o in option]
    opts = _OPTION.findall(str(option))
    letters = [m[0] for m in opts]
    if len(opts) < 2 or letters != list("ABCDEFGH"[: len(opts)]):
        raise ValueError(f"cannot parse options {option!r} (expected 'A. …; B. …')")
    return [m[1].strip() for m in opts]


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    return load_hub_rows(SPEC.hub_id, split) if from_local is None else load_local_split(from_local, split)


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    image_obj = row.get("image_path") if row.get("image_path") is not None else row.get("image")
    if isinstance(image_obj, list):
        image_obj = image_obj[0] if image_obj else None
    base = Path(row["__file__"]).parent if "__file__" in row else None
    image = hf_image(image_obj, base)
    choices = parse_options(require(row, "option"))
    rid = str(require(row, "ID"))
    uid = f"wemath-{split}-{rid}"
    letter = str_answer(row.get("answer"))
    meta = {"ID": rid, "answer_letter": letter, "key": row.get("key"), "knowledge_concept": row.get("knowledge concept"),
            "question_number": row.get("question number"), "split": split}
    return Record(uid=uid, problem=with_leading_image(str(require(row, "question"))), images=[image],
                  answer=letter_to_option(letter, choices, uid), choices=choices, source=SPEC.title, meta=meta)


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    from data_prep.hub_samples import write_wemath

    write_wemath(scratch, "testmini")
    return [OfflineRun("testmini", scratch, GENERATED_ROWS, "6 generated rows with the We-Math/We-Math schema")]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.wemath"))
