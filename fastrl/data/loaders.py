"""Load and write canonical record files (parquet or jsonl), validating every row.

Parquet layout (what ``write_records`` produces): ``uid: string, problem: string,
images: list<binary>, answer: string, choices: list<string> (nullable), source: string,
meta: string`` where ``meta`` is a JSON object (heterogeneous dicts do not fit one arrow struct).
jsonl rows have the same keys, ``meta`` a JSON object and ``images`` a list of paths relative to
the jsonl file's directory.

Nothing is dropped silently: a bad row raises ``RecordError`` naming file, row, field and uid, or,
with ``skip_bad_rows=True``, is skipped, logged and reported in ``LoadReport.skipped``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from fastrl.data.images import decode_image, encode_image
from fastrl.data.schema import ALL_FIELDS, REQUIRED_FIELDS, Record, RecordError, validate_fields

log = logging.getLogger(__name__)


@dataclass
class LoadReport:
    records: list[Record]
    skipped: list[RecordError] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # rows[i]: the file row records[i] came from

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)


def _iter_raw_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | RecordError]]:
    """(row index, raw dict) per row; a jsonl line that is not a JSON object yields an error."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid / ArrowIOError: a truncated or empty file
            raise RecordError(f"is not a readable parquet file: {e}", file=str(path), row=None, field="<file>", uid=None) from e
        missing = [c for c in REQUIRED_FIELDS if c not in table.column_names]
        if missing:
            raise RecordError(
                f"parquet file lacks column(s) {missing}; has {table.column_names}",
                file=str(path), row=None, field=missing[0], uid=None,
            )
        for i, row in enumerate(table.to_pylist()):
            yield i, row
    elif suffix in (".jsonl", ".json"):
        with path.open("rb") as f:  # decoded line by line, so a bad byte names its line
            for i, raw_line in enumerate(f):
                try:
                    line = raw_line.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield i, RecordError(
                        f"line {i + 1} is not UTF-8 text: byte {raw_line[e.start:e.start + 1]!r} at column {e.start + 1} "
                        f"({e.reason}); re-encode the file as UTF-8", file=str(path), row=i, field="<row>", uid=None)
                    continue
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    yield i, RecordError(f"line is not valid JSON: {e}", file=str(path), row=i, field="<row>", uid=None)
                    continue
                if not isinstance(obj, dict):
                    yield i, RecordError("line is not a JSON object", file=str(path), row=i, field="<row>", uid=None)
                    continue
                yield i, obj
    else:
        raise ValueError(f"{path}: unsupported record file type {suffix!r} (use .parquet or .jsonl)")


def _row_to_record(raw: dict[str, Any], *, path: Path, row: int, decode: bool) -> Record:
    uid = raw.get("uid")
    uid_s = uid if isinstance(uid, str) else None
    unknown = sorted(set(raw) - set(ALL_FIELDS))
    if unknown:
        raise RecordError(f"unknown field(s) {unknown}; allowed {list(ALL_FIELDS)}", file=str(path), row=row, field=unknown[0], uid=uid_s)
    for name in REQUIRED_FIELDS:
        if name not in raw:
            raise RecordError("is missing", file=str(path), row=row, field=name, uid=uid_s)
    meta = raw["meta"]
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError as e:
            raise RecordError(f"is not valid JSON: {e}", file=str(path), row=row, field="meta", uid=uid_s) from e
    elif meta is None:
        meta = {}
    images = raw["images"]
    if images is None:
        images = []
    rec = Record(
        uid=raw["uid"],
        problem=raw["problem"],
        answer=raw["answer"],
        source=raw["source"],
        images=list(images) if isinstance(images, (list, tuple)) else images,
        choices=list(raw["choices"]) if isinstance(raw.get("choices"), (list, tuple)) else raw.get("choices"),
        meta=meta,
    )
    validate_fields(rec, file=str(path), row=row)
    opened = []
    for j, img in enumerate(rec.images):
        try:
            opened.append(decode_image(img, path.parent))
        except Exception as e:  # any decoder/IO failure is a bad row, reported with its index
            raise RecordError(
                f"image {j} does not open: {type(e).__name__}: {e}", file=str(path), row=row, field="images", uid=rec.uid
            ) from e
    if decode:
        rec.images = opened
    return rec


def load_records_report(path: str | Path, *, skip_bad_rows: bool = False, decode_images: bool = True) -> LoadReport:
    """Load a canonical parquet/jsonl file; see ``load_records``. Returns records and skipped rows."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"record file {path} does not exist")
    records: list[Record] = []
    rows: list[int] = []
    skipped: list[RecordError] = []
    seen: dict[str, int] = {}
    for i, raw in _iter_raw_rows(path):
        try:
            if isinstance(raw, RecordError):
                raise raw
            rec = _row_to_record(raw, path=path, row=i, decode=decode_images)
            if rec.uid in seen:
                raise RecordError(f"duplicate uid (first seen at row {seen[rec.uid]})", file=str(path), row=i, field="uid", uid=rec.uid)
            seen[rec.uid] = i
            records.append(rec)
            rows.append(i)
        except RecordError as e:
            if not skip_bad_rows:
                raise
            skipped.append(e)
    if skipped:
        log.warning("%s: skipped %d bad row(s) of %d; first: %s", path, len(skipped), len(skipped) + len(records), skipped[0])
    return LoadReport(records=records, skipped=skipped, rows=rows)


def load_records(path: str | Path, *, skip_bad_rows: bool = False, decode_images: bool = True) -> list[Record]:
    """Records of a canonical ``.parquet`` or ``.jsonl`` file with images as RGB PIL images.

    Every row is validated (types, non-empty answer, images that open, exactly one ``<image>``
    per image, no other image tags, unique uids). A bad row raises ``RecordError`` naming file,
    row, field and uid; with ``skip_bad_rows=True`` it is skipped and the count logged (use
    ``load_records_report`` to get the skipped rows back).
    """
    return load_records_report(path, skip_bad_rows=skip_bad_rows, decode_images=decode_images).records


def _validated_for_write(records: Iterable[Record], path: Path) -> list[Record]:
    out = []
    seen: dict[str, int] = {}
    for i, rec in enumerate(records):
        validate_fields(rec, file=str(path), row=i)
        if rec.uid in seen:
            raise RecordError(f"duplicate uid (first seen at row {seen[rec.uid]})", file=str(path), row=i, field="uid", uid=rec.uid)
        seen[rec.uid] = i
        for j, img in enumerate(rec.images):
            try:
                decode_image(img)
            except Exception as e:
                raise RecordError(f"image {j} does not open: {type(e).__name__}: {e}", file=str(path), row=i, field="images", uid=rec.uid) from e
        out.append(rec)
    return out


def write_records(records: Iterable[Record], path: str | Path) -> int:
    """Validate every record, then write them to ``.parquet`` (images as bytes) or ``.jsonl``
    (images as PNG/JPEG files in ``<stem>_images/`` next to it, referenced by relative path).
    Returns the number of rows written. Writes to a temporary name first, then renames."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recs = _validated_for_write(records, path)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([
            ("uid", pa.string()), ("problem", pa.string()), ("images", pa.list_(pa.binary())),
            ("answer", pa.string()), ("choices", pa.list_(pa.string())), ("source", pa.string()),
            ("meta", pa.string()),
        ])
        rows = [{
            "uid": r.uid, "problem": r.problem, "images": [encode_image(im) for im in r.images],
            "answer": r.answer, "choices": r.choices, "source": r.source,
            "meta": json.dumps(r.meta, ensure_ascii=False, sort_keys=True),
        } for r in recs]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    elif path.suffix.lower() == ".jsonl":
        img_dir = path.with_name(path.stem + "_images")
        img_dir.mkdir(exist_ok=True)
        with tmp.open("w", encoding="utf-8") as f:
            for i, r in enumerate(recs):
                rel = []
                for j, im in enumerate(r.images):
                    data = encode_image(im)
                    ext = ".jpg" if data[:3] == b"\xff\xd8\xff" else ".png"
                    name = f"{i:07d}_{j}{ext}"
                    (img_dir / name).write_bytes(data)
                    rel.append(f"{img_dir.name}/{name}")
                row = {"uid": r.uid, "problem": r.problem, "images": rel, "answer": r.answer,
                       "choices": r.choices, "source": r.source, "meta": r.meta}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"{path}: unsupported record file type {path.suffix!r} (use .parquet or .jsonl)")
    tmp.replace(path)
    return len(recs)
