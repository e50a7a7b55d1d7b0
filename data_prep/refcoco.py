"""RefCOCO-style grounding → canonical parquet (box answers, for the continuous IoU reward).
Hub: ``lmms-lab/RefCOCO`` (val 8,811; test 5,000; testA 1,975; testB 1,810). Columns:
question_id, image, question, answer (referring expressions), segmentation, bbox ([x, y, w, h]),
iscrowd, file_name.

One record per row, using its first referring expression (all are kept in ``meta.refs``). The
answer is ``"[x1, y1, x2, y2]"`` in pixels of the original image (converted from COCO's
``[x, y, w, h]``); the model side rescales if its processor resizes the image.
No offline sample exists: ``make data`` runs on generated rows with this schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from data_prep.common import GENERATED_ROWS, DatasetSpec, OfflineRun, hf_image, load_hub_rows, load_local_split, main_for, require
from fastrl.data.schema import IMAGE_PLACEHOLDER, Record

SPEC = DatasetSpec(name="refcoco", title="RefCOCO (grounding)", hub_id="lmms-lab/RefCOCO", splits=("val", "testA", "testB", "test"))


def load_rows(split: str, from_local: Path | None) -> Iterator[dict[str, Any]]:
    return load_hub_rows(SPEC.hub_id, split) if from_local is None else load_local_split(from_local, split)


def format_box(x1: float, y1: float, x2: float, y2: float) -> str:
    return "[" + ", ".join(f"{v:.1f}".rstrip("0").rstrip(".") for v in (x1, y1, x2, y2)) + "]"


def to_record(row: dict[str, Any], split: str, index: int) -> Record:
    refs = [str(r).strip() for r in require(row, "answer") if str(r).strip()]
    if not refs:
        raise ValueError("no referring expression in 'answer'")
    bbox = [float(v) for v in require(row, "bbox")]
    if len(bbox) != 4 or bbox[2] <= 0 or bbox[3] <= 0:
        raise ValueError(f"bbox {bbox} is not a positive [x, y, w, h]")
    x, y, w, h = bbox
    base = Path(row["__file__"]).parent if "__file__" in row else None
    qid = str(require(row, "question_id"))
    problem = f'{IMAGE_PLACEHOLDER}Locate the object described as "{refs[0]}" and give its bounding box.'
    return Record(uid=f"refcoco-{split}-{qid}", problem=problem, images=[hf_image(require(row, "image"), base)],
                  answer=format_box(x, y, x + w, y + h), source="RefCOCO",
                  meta={"question_id": qid, "refs": refs, "bbox_xywh": bbox, "file_name": row.get("file_name"), "split": split})


def offline_runs(shared: Path, scratch: Path) -> list[OfflineRun]:
    from data_prep.hub_samples import write_refcoco

    write_refcoco(scratch, "val")
    return [OfflineRun("val", scratch, GENERATED_ROWS, "6 generated rows with the lmms-lab/RefCOCO schema")]


def main(argv: Sequence[str] | None = None) -> None:
    main_for(SPEC, __import__(__name__, fromlist=["x"]), argv)


if __name__ == "__main__":
    import sys

    from data_prep.common import run_main

    sys.exit(run_main(main, "python -m data_prep.refcoco"))
