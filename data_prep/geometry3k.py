"""Geometry3K → canonical parquet. Hub: ``hiyouga/geometry3k`` (train 2,101; test 601 — the
paper's validation set; validation 300 unused). Also reads InterGPS's raw layout
(``<id>/data.json`` + ``img_diagram.png``), as in ``data/geometry3k_examples``.

Trap: the canonical ``answer`` is the *option value* (``"80"``), not the letter (``"D"``). The hub
already stores the value (with the letter in ``ground_truth``); InterGPS stores the letter, which is
mapped through ``choices``. The letter is kept in ``meta.answer_letter``. Problem text for InterGPS
rows: ``annotat_text`` (the LaTeX version), else ``problem_text``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import (
    REAL_SAMPLE, DatasetSpec, OfflineRun, hf_image, letter_to_option, load_hub_rows,
    load_local_split, main_for, require, str_answer, with_leading_image,
)
from fastrl.data.schema import Record

SPEC = DatasetSpec(name="geometry3k", title="Geometry3K", hub_id="hiyouga/geometry3k", splits=("train", "test"))
_INTERGPS_SPLIT = {"train": "train", "test": "test", "validation": "val", "val": "val"}


def _intergps_dirs(root: Path, split: str) -> list[Path] | None:
    """Example folders of an InterGPS tree for ``split``, or None if ``root`` is not one."""
    sub = root / _INTERGPS_SPLIT.get(split, split)
    base = sub if sub.is_dir() else root
    dirs = sorted((d for d in base.iterdir() if d.is_dir() and (d / "data.json").exists()), key=lambda d: (len(d.name), d.name))
    return dirs or None


def load_intergps(root: Path, split: str) -> Iterator[dict[str, Any]]:
    dirs = _intergps_dirs(root, split)
    if dirs is None:
        raise FileNotFoundError(f"no InterGPS example folders (<id>/data.json) under {root}")
    want = _INTERGPS_SPLIT.get(split, split)
    for d in dirs:
        data = json.loads((d / "data.json").read_text(encoding="utf-8"))
        if "data_type" in data and data["data_type"] != want and not (root / want).is_dir():
            continue  # a flat folder holding several splits: keep this split's examples
        img = d / "img_diagram.png"
        if not img.exists():
            raise FileNotFoundError(f"{d}: img_diagram.png is missing")
        yield {**data, "__format__": "intergps", "__file__": str(d / "data.json"), "__image__": str(img)}


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    if from_local is None:
        return load_hub_rows(SPEC.hub_id, split)
    if _intergps_dirs(from_local, split) is not None:
        return load_intergps(from_local, split)
    return load_local_split(from_local, split)


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    if row.get("__format__") == "intergps":
        choices = [str(c).strip() for c in require(row, "choices")]
        letter = str_answer(row.get("answer"))
        text = (row.get("annotat_text") or "").strip() or str_answer(row.get("problem_text"), "problem_text")
        uid = f"geometry3k-{split}-{row['id']}"
        return Record(
            uid=uid, problem=with_leading_image(text), images=[row["__image__"]],
            answer=letter_to_option(letter, choices, uid), choices=choices, source=SPEC.title,
            meta={"id": row["id"], "answer_letter": letter, "problem_type_graph": row.get("problem_type_graph"),
                  "problem_type_goal": row.get("problem_type_goal"), "split": split, "format": "intergps"},
        )
    base = Path(row["__file__"]).parent if "__file__" in row else None
    images = [hf_image(im, base) for im in require(row, "images")]
    choices = [str(c).strip() for c in row["choices"]] if row.get("choices") else None
    answer = str_answer(row.get("answer"))
    letter = row.get("ground_truth")
    uid = f"geometry3k-{split}-{row.get('id', index)}"
    if choices and letter:
        expected = letter_to_option(str(letter), choices, uid)
        if answer in "ABCD" and len(answer) == 1 and answer not in choices:
            answer = expected  # a letter where the value belongs
        if answer != expected:
            raise ValueError(f"{uid}: answer {answer!r} is not option {letter!r} = {expected!r} of {choices}")
    problem = str(require(row, "problem"))
    if "<image>" not in problem:
        problem = with_leading_image(problem, len(images))
    return Record(uid=uid, problem=problem, images=images, answer=answer, choices=choices, source=SPEC.title,
                  meta={"id": row.get("id", index), "answer_letter": letter, "split": split, "format": "hub"})


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    return [OfflineRun("train", shared / "geometry3k_examples", REAL_SAMPLE,
                       "the 10 InterGPS Geometry3K examples (ids 11-20, all train) in data/")]


def hub_schema_sample(scratch: Path) -> Path:
    """Generated rows with the hub schema (used by the tests for the hub-format path)."""
    from data_prep.hub_samples import write_geometry3k

    write_geometry3k(scratch, "train")
    return scratch


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.geometry3k"))
