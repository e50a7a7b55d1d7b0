"""MATH → canonical parquet (text only, no images). Hub: ``hiyouga/math12k`` (train 12,000;
test 500 = MATH-500). Offline: the real MATH-500 sample (``data/math500/test.jsonl``,
MathRuler's copy, fields problem/solution/answer/subject/level/unique_id)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import REAL_SAMPLE, DatasetSpec, OfflineRun, load_hub_rows, load_local_split, main_for, require, str_answer
from fastrl.data.schema import IMAGE_PLACEHOLDER, Record

SPEC = DatasetSpec(name="math12k", title="MATH", hub_id="hiyouga/math12k", splits=("train", "test"))


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    return load_hub_rows(SPEC.hub_id, split) if from_local is None else load_local_split(from_local, split)


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    problem = str(require(row, "problem")).strip()
    if IMAGE_PLACEHOLDER in problem:
        raise ValueError(f"text-only MATH problem contains {IMAGE_PLACEHOLDER!r}")
    uid = f"math-{split}-{row['unique_id']}" if row.get("unique_id") else f"math-{split}-{index}"
    meta = {k: row[k] for k in ("subject", "level", "unique_id") if row.get(k) is not None}
    return Record(uid=uid, problem=problem, images=[], answer=str_answer(row.get("answer")), source=SPEC.title,
                  meta={**meta, "split": split})


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    return [OfflineRun("test", shared / "math500", REAL_SAMPLE, "MATH-500 (500 rows) in data/")]


def hub_schema_sample(scratch: Path) -> Path:
    from data_prep.hub_samples import write_math12k

    write_math12k(scratch, "train")
    return scratch


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.math12k"))
