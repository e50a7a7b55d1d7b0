"""GeoQA8K-R1V → canonical parquet. Hub: ``leonardPKU/GEOQA_R1V_Train_8K`` (train, ~8K).
Columns: image, problem, solution, where the solution carries the answer as
``<answer>…</answer>`` (taken as the canonical answer; a bare solution string is used as is).
Answers carry units and degrees ("145°", "4cm"): score with the ``geoqa`` reward.
No offline sample exists: ``make data`` runs on generated rows with this schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import (
    GENERATED_ROWS, DatasetSpec, OfflineRun, hf_image, load_hub_rows, load_local_split, main_for, require,
    str_answer, with_leading_image,
)
from fastrl.data.schema import IMAGE_PLACEHOLDER, Record

SPEC = DatasetSpec(name="geoqa8k", title="GeoQA8K-R1V", hub_id="leonardPKU/GEOQA_R1V_Train_8K", splits=("train",))
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    return load_hub_rows(SPEC.hub_id, split) if from_local is None else load_local_split(from_local, split)


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    solution = str(require(row, "solution"))
    m = _ANSWER.search(solution)
    answer = str_answer(m.group(1) if m else solution, "solution")
    base = Path(row["__file__"]).parent if "__file__" in row else None
    image = hf_image(require(row, "image"), base)
    problem = str(require(row, "problem")).strip()
    if IMAGE_PLACEHOLDER not in problem:
        problem = with_leading_image(problem)
    return Record(uid=f"geoqa8k-{split}-{index}", problem=problem, images=[image], answer=answer, source=SPEC.title,
                  meta={"index": index, "split": split})


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    from data_prep.hub_samples import write_geoqa8k

    write_geoqa8k(scratch, "train")
    return [OfflineRun("train", scratch, GENERATED_ROWS, "8 generated rows with the GEOQA_R1V_Train_8K schema")]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.geoqa8k"))
