"""Canonical files: round trip, and every kind of bad row gives a clear error (or a counted skip)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from fastrl.data.loaders import load_records, load_records_report, write_records
from fastrl.data.schema import Record, RecordError


def _png(color: str = "red", mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (8, 6), color).save(buf, format="PNG")
    return buf.getvalue()


def _records() -> list[Record]:
    return [
        Record(uid="a", problem="<image>Find x.", answer="3", source="t", images=[_png()], meta={"k": 1}),
        Record(uid="b", problem="What is 1+1?", answer="2", source="t", choices=["1", "2"]),
        Record(uid="c", problem="<image> left, <image> right", answer="B", source="t", images=[_png("blue"), _png()]),
    ]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_round_trip(tmp_path: Path, suffix: str):
    path = tmp_path / f"recs{suffix}"
    assert write_records(_records(), path) == 3
    recs = load_records(path)
    assert [r.uid for r in recs] == ["a", "b", "c"]
    assert recs[0].meta == {"k": 1} and recs[1].choices == ["1", "2"] and recs[0].choices is None
    assert all(isinstance(im, Image.Image) and im.mode == "RGB" for r in recs for im in r.images)
    assert recs[2].images[0].getpixel((0, 0)) == (0, 0, 255)


def test_transparent_png_becomes_white(tmp_path: Path):
    rec = Record(uid="t", problem="<image>", answer="1", source="s", images=[_png((0, 0, 0, 0), "RGBA")])
    write_records([rec], tmp_path / "x.parquet")
    assert load_records(tmp_path / "x.parquet")[0].images[0].getpixel((0, 0)) == (255, 255, 255)


def _write_raw(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _row(**kw) -> dict:
    base = {"uid": "u0", "problem": "<image>q", "images": ["img.png"], "answer": "1", "choices": None, "source": "s", "meta": {}}
    base.update(kw)
    return base


@pytest.mark.parametrize("row, field, message", [
    (_row(answer=None), "answer", "is missing"),
    (_row(answer="  "), "answer", "is empty"),
    (_row(answer=3), "answer", "must be a string"),
    (_row(problem="<image1>q"), "problem", "unknown image placeholder"),
    (_row(problem="q"), "problem", "has 0 '<image>' placeholder"),
    (_row(problem="<image><image>q"), "problem", "2 '<image>' placeholder"),
    (_row(images=["missing.png"]), "images", "image 0 does not open"),
    (_row(images=["notimage.png"]), "images", "image 0 does not open"),
    (_row(choices=["only one"]), "choices", "at least 2"),
    (_row(meta="{not json"), "meta", "not valid JSON"),
    (_row(extra=1), "extra", "unknown field"),
])
def test_bad_rows_name_file_row_field(tmp_path: Path, row: dict, field: str, message: str):
    (tmp_path / "img.png").write_bytes(_png())
    (tmp_path / "notimage.png").write_bytes(b"this is not a png")
    good = _row(uid="ok")
    path = _write_raw(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(RecordError) as exc:
        load_records(path)
    err = exc.value
    assert err.file == str(path) and err.row == 1 and err.field == field
    assert message in str(err) and "bad.jsonl" in str(err) and "row 1" in str(err)


def test_skip_bad_rows_counts_them(tmp_path: Path):
    (tmp_path / "img.png").write_bytes(_png())
    rows = [_row(uid="a"), _row(uid="b", answer=None), _row(uid="c", problem="<image1>x"), _row(uid="d")]
    path = _write_raw(tmp_path / "mixed.jsonl", rows)
    report = load_records_report(path, skip_bad_rows=True)
    assert [r.uid for r in report.records] == ["a", "d"]
    assert report.n_skipped == 2 and {e.uid for e in report.skipped} == {"b", "c"}
    assert len(load_records(path, skip_bad_rows=True)) == 2


def test_duplicate_uid_and_bad_json_line(tmp_path: Path):
    (tmp_path / "img.png").write_bytes(_png())
    path = _write_raw(tmp_path / "dup.jsonl", [_row(uid="x"), _row(uid="x")])
    with pytest.raises(RecordError, match="duplicate uid"):
        load_records(path)
    bad = tmp_path / "broken.jsonl"
    bad.write_text(json.dumps(_row()) + "\n{oops\n")
    with pytest.raises(RecordError, match="row 1.*not valid JSON"):
        load_records(bad)


def test_parquet_missing_column_and_wrong_type(tmp_path: Path):
    path = tmp_path / "nocol.parquet"
    pq.write_table(pa.Table.from_pylist([{"uid": "a", "problem": "q", "images": [], "source": "s", "meta": "{}"}]), path)
    with pytest.raises(RecordError, match="lacks column.*answer"):
        load_records(path)
    path2 = _write_raw(tmp_path / "int.parquet", [{"uid": "a", "problem": "q", "images": [], "answer": 5, "source": "s", "meta": "{}"}])
    with pytest.raises(RecordError, match="field 'answer'.*must be a string"):
        load_records(path2)


def test_writer_validates_too(tmp_path: Path):
    with pytest.raises(RecordError, match="unknown image placeholder"):
        write_records([Record(uid="a", problem="<image1>", answer="1", source="s", images=[_png()])], tmp_path / "w.parquet")
    with pytest.raises(RecordError, match="does not open"):
        write_records([Record(uid="a", problem="<image>", answer="1", source="s", images=[b"junk"])], tmp_path / "w.parquet")
    assert not (tmp_path / "w.parquet").exists()
