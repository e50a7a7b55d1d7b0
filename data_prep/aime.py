"""AIME 2024 and 2025 → canonical parquet (text only; integer answers 0-999).

Splits ``2024`` and ``2025``. Hub ids (our choice of public copies, columns read flexibly:
problem/Problem/question, answer/Answer): ``Maxwell-Jia/AIME_2024`` (train split) and
``opencompass/AIME2025`` (configs AIME2025-I and AIME2025-II, test split). Local: MathRuler's
``aime_<year>.jsonl`` files, as in ``data/aime`` (the offline run uses these, real rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import REAL_SAMPLE, DatasetSpec, OfflineRun, load_hub_rows, main_for, read_table_rows, str_answer
from fastrl.data.schema import Record

SPEC = DatasetSpec(name="aime", title="AIME", hub_id="Maxwell-Jia/AIME_2024 + opencompass/AIME2025", splits=("2024", "2025"))
_HUB = {"2024": [("Maxwell-Jia/AIME_2024", None, "train")],
        "2025": [("opencompass/AIME2025", "AIME2025-I", "test"), ("opencompass/AIME2025", "AIME2025-II", "test")]}


def _first(row: dict[str, Any], keys: Sequence[str]) -> Any:
    for k in keys:
        if row.get(k) not in (None, ""):
            return row[k]
    raise ValueError(f"none of the fields {list(keys)} is present (row has {sorted(k for k in row if not k.startswith('__'))})")


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    if split not in _HUB:
        raise ValueError(f"unknown AIME split {split!r}; valid: {sorted(_HUB)}")
    if from_local is None:
        for hub_id, config, hub_split in _HUB[split]:
            yield from load_hub_rows(hub_id, hub_split, config)
        return
    path = from_local / f"aime_{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (expected MathRuler's aime_<year>.jsonl layout)")
    for row in read_table_rows(path):
        yield {**row, "__file__": str(path)}


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    answer = str_answer(_first(row, ("answer", "Answer")))
    if not answer.lstrip("0").isdigit() and answer != "0":
        raise ValueError(f"AIME answer {answer!r} is not an integer")
    rid = row.get("id", row.get("ID", index))
    return Record(uid=f"aime{split}-{rid}", problem=str(_first(row, ("problem", "Problem", "question"))).strip(),
                  images=[], answer=answer, source=f"AIME {split}", meta={"id": rid, "year": split, "url": row.get("url")})


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    return [OfflineRun(y, shared / "aime", REAL_SAMPLE, f"AIME {y} (30 rows) in data/") for y in ("2024", "2025")]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.aime"))
