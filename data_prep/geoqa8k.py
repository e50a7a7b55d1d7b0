"""GeoQA8K-R1V → canonical parquet. Hub: ``leonardPKU/GEOQA_R1V_Train_8K`` (train, ~8K).
Columns: image, problem, solution, where the solution carries the answer as
``<answer>…</answer>`` (taken as the canonical answer; a bare solution string is used as is).
Answers carry units and degrees ("145°", "4cm"): score with the ``geoqa`` reward.
No offline sample exists: ``make data`` runs on generated rows with this schema.

The hub has only a train split. ``val`` (``geoqa8k_val.parquet``, the validation set that
configs/tables/slots.yaml names) is every ``VAL_EVERY``-th row of it (source rows 0, 20, 40, ...:
5 %), and ``train`` is the rest, so the two never share a problem. uids keep the source row
(``geoqa8k-train-<row>`` in both files), so a row is the same record wherever it lands.
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

SPEC = DatasetSpec(name="geoqa8k", title="GeoQA8K-R1V", hub_id="leonardPKU/GEOQA_R1V_Train_8K",
                   splits=("train", "val"))
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
SOURCE_SPLIT = "train"  # the only split on the hub; train and val are carved from it
VAL_EVERY = 20  # source rows 0, 20, 40, ... are the validation set


def in_split(split: str, source_row: int) -> bool:
    """Whether source row ``source_row`` of the hub's train split belongs to ``split``."""
    if split not in SPEC.splits:
        raise ValueError(f"geoqa8k has splits {SPEC.splits} (both carved from the hub's train split), not {split!r}")
    return (source_row % VAL_EVERY == 0) == (split == "val")


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    """The source rows of ``split``, each tagged with its row in the hub's train split."""
    rows = load_hub_rows(SPEC.hub_id, SOURCE_SPLIT) if from_local is None else load_local_split(from_local, SOURCE_SPLIT)
    for i, row in enumerate(rows):
        if in_split(split, i):
            yield {**row, "__source_row__": i}


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    index = int(row.get("__source_row__", index))
    solution = str(require(row, "solution"))
    m = _ANSWER.search(solution)
    answer = str_answer(m.group(1) if m else solution, "solution")
    base = Path(row["__file__"]).parent if "__file__" in row else None
    image = hf_image(require(row, "image"), base)
    problem = str(require(row, "problem")).strip()
    if IMAGE_PLACEHOLDER not in problem:
        problem = with_leading_image(problem)
    return Record(uid=f"geoqa8k-{SOURCE_SPLIT}-{index}", problem=problem, images=[image], answer=answer,
                  source=SPEC.title, meta={"index": index, "split": split})


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    from data_prep.hub_samples import write_geoqa8k

    write_geoqa8k(scratch, SOURCE_SPLIT)
    return [OfflineRun(split, scratch, GENERATED_ROWS, f"{split}: of 8 generated rows with the GEOQA_R1V_Train_8K schema "
                       f"(every {VAL_EVERY}th row is val)") for split in SPEC.splits]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.geoqa8k"))
