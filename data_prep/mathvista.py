"""MathVista testmini → canonical parquet. Hub: ``AI4Math/MathVista`` split ``testmini`` (1,000;
the ``test`` split has no public answers). Columns: pid, question, image (path), decoded_image,
choices, unit, precision, answer, question_type, answer_type, metadata, query.

Trap: questions have no image placeholder: ``<image>`` is prepended. Multiple-choice rows keep
``choices`` and the answer as the option text (as MathVista stores it). No offline sample exists:
``make data`` runs on generated rows with this schema (``data_prep/hub_samples.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import (
    GENERATED_ROWS, DatasetSpec, OfflineRun, hf_image, load_hub_rows, load_local_split, main_for, require,
    str_answer, with_leading_image,
)
from fastrl.data.schema import Record

SPEC = DatasetSpec(name="mathvista", title="MathVista", hub_id="AI4Math/MathVista", splits=("testmini",))


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    return load_hub_rows(SPEC.hub_id, split) if from_local is None else load_local_split(from_local, split)


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    base = Path(row["__file__"]).parent.parent if "__file__" in row else None
    image = row.get("decoded_image") if row.get("decoded_image") is not None else hf_image(require(row, "image"), base)
    qtype = str(require(row, "question_type"))
    choices = [str(c).strip() for c in row["choices"]] if row.get("choices") else None
    answer = str_answer(row.get("answer"))
    if qtype == "multi_choice":
        if not choices:
            raise ValueError("multi_choice row without choices")
        if answer not in choices:
            raise ValueError(f"answer {answer!r} is not one of the choices {choices}")
    else:
        choices = None
    meta = {"pid": str(require(row, "pid")), "question_type": qtype, "answer_type": row.get("answer_type"),
            "unit": row.get("unit"), "precision": row.get("precision"), "metadata": row.get("metadata"),
            "query": row.get("query"), "split": split}
    return Record(uid=f"mathvista-{split}-{meta['pid']}", problem=with_leading_image(str(require(row, "question"))),
                  images=[image], answer=answer, choices=choices, source=SPEC.title, meta=meta)


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    from data_prep.hub_samples import write_mathvista

    write_mathvista(scratch, "testmini")
    return [OfflineRun("testmini", scratch, GENERATED_ROWS, "8 generated rows with the AI4Math/MathVista schema")]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.mathvista"))
