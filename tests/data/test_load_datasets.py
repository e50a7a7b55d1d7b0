"""A run's datasets are checked as a whole before training (issue 16, defects 4, 6 and 12): uids
unique across files, no empty file, bytes that are not UTF-8 and ground truths the reward can
never grade are errors naming the file and row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastrl.config import load_config
from fastrl.data.loaders import load_records
from fastrl.data.schema import RecordError
from fastrl.training.setup import DataError, load_datasets


def _row(uid: str, problem: str = "1 + 1 ?", answer: str = "2") -> dict:
    return {"uid": uid, "problem": problem, "images": [], "answer": answer, "source": "t", "meta": {}}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(train: list[Path], val: list[Path] = (), ood: list[Path] = (), reward: str = "math"):
    def paths(ps):
        return "[" + ",".join(str(p) for p in ps) + "]"

    return load_config("methods/grpo.yaml", [
        "data.task=files", "model.source=path", "model.path=any/model", f"data.train_files={paths(train)}", f"data.val_files={paths(val)}",
        f"data.ood_variants={paths(ood)}", f"data.reward={reward}"], scale="smoke")


def test_duplicate_uid_across_train_files_names_both_files_and_rows(tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", [_row("x"), _row("shared", "what is A?", "1")])
    b = _jsonl(tmp_path / "b.jsonl", [_row("shared", "what is B?", "2")])
    with pytest.raises(DataError) as err:
        load_datasets(_cfg([a, b]))
    msg = str(err.value)
    assert "'shared'" in msg and f"{a}' row 1" in msg and f"{b}' row 0" in msg and "data.train_files" in msg


def test_duplicate_uid_across_val_files_is_refused(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", [_row("t")])
    v1, v2 = _jsonl(tmp_path / "v1.jsonl", [_row("v")]), _jsonl(tmp_path / "v2.jsonl", [_row("v", "other")])
    with pytest.raises(DataError, match=r"data.val_files: uid 'v' is in .*v1.jsonl' row 0 and in .*v2.jsonl' row 0"):
        load_datasets(_cfg([train], [v1, v2]))


def test_one_uid_for_two_different_records_across_splits_is_refused(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", [_row("u", "train prompt", "1")])
    same = _jsonl(tmp_path / "same.jsonl", [_row("u", "train prompt", "1")])
    other = _jsonl(tmp_path / "other.jsonl", [_row("u", "a different prompt", "7")])
    assert len(load_datasets(_cfg([train], [same]))[1]) == 1  # the same record in both: one prompt, fine
    with pytest.raises(DataError, match=r"uid 'u' names different records in train .*train.jsonl' row 0.* and val"):
        load_datasets(_cfg([train], [other]))


def test_two_ood_files_with_one_name_are_refused(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", [_row("t")])
    (tmp_path / "x").mkdir()
    o1, o2 = _jsonl(tmp_path / "bench.jsonl", [_row("o")]), _jsonl(tmp_path / "x" / "bench.jsonl", [_row("p")])
    with pytest.raises(DataError, match="same benchmark name 'bench'"):
        load_datasets(_cfg([train], ood=[o1, o2]))


@pytest.mark.parametrize("kind", ["zero-byte jsonl", "blank-line jsonl", "zero-row parquet"])
@pytest.mark.parametrize("split", ["train", "val"])
def test_an_empty_file_is_an_error_naming_it(tmp_path, kind, split):
    good = _jsonl(tmp_path / "good.jsonl", [_row("g")])
    if kind == "zero-row parquet":
        empty = tmp_path / "empty.parquet"
        schema = pa.schema([(k, pa.string()) for k in ("uid", "problem", "answer", "source", "meta")]
                           + [("images", pa.list_(pa.binary()))])
        pq.write_table(pa.Table.from_pylist([], schema=schema), empty)
    else:
        empty = tmp_path / "empty.jsonl"
        empty.write_text("" if kind == "zero-byte jsonl" else "\n\n")
    cfg = _cfg([good, empty]) if split == "train" else _cfg([good], [empty])
    with pytest.raises(DataError, match=rf"data.{split}_files: '{empty}' has no records"):
        load_datasets(cfg)


def test_a_zero_byte_parquet_file_is_named(tmp_path):
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    with pytest.raises(RecordError, match=r"empty.parquet.*not a readable parquet file"):
        load_records(empty)


def test_a_byte_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    lines = [json.dumps(_row("a")), json.dumps(_row("b", "caf\u00e9 ?"), ensure_ascii=False), json.dumps(_row("c"))]
    path.write_bytes("\n".join(lines).encode("utf-8").replace("caf\u00e9".encode("utf-8"), b"caf\xe9") + b"\n")
    with pytest.raises(RecordError) as err:
        load_records(path)
    msg = str(err.value)
    assert "latin1.jsonl" in msg and "row 1" in msg and "line 2 is not UTF-8" in msg and "0xe9" in msg.replace("\\x", "0x")


@pytest.mark.parametrize("answer, why", [
    ("[nan, 0, 10, 10]", "NaN"), ("[0, 0, NaN, 10]", "NaN"), ("no box here", "no \\[x1, y1, x2, y2\\] box"),
    ("[10, 0, 0, 10]", "is empty"), ("[0, 0, inf, 10]", "infinite"),
])
def test_a_grounding_ground_truth_without_a_usable_box_is_refused_at_load(tmp_path, answer, why):
    train = _jsonl(tmp_path / "boxes.jsonl", [_row("ok", "where?", "[0, 0, 10, 10]"), _row("bad", "where?", answer)])
    with pytest.raises(RecordError, match=rf"boxes.jsonl', row 1, field 'answer' \(uid='bad'\): .*{why}"):
        load_datasets(_cfg([train], reward="grounding_iou"))
    assert len(load_datasets(_cfg([train], reward="math"))[0]) == 2  # other rewards grade any text
