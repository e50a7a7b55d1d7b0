"""Every data_prep script on its offline inputs (the real samples in data/ or hub-schema rows)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from data_prep import aime, all as prep_all, common, geoqa8k, geometry3k, math12k, mathverse, mathvision, mathvista, refcoco, wemath
from data_prep.common import GENERATED_ROWS, REAL_SAMPLE, prepare_split
from fastrl.data.loaders import load_records

DATA = common.shared_data_dir()


def _offline(mod, tmp_path: Path) -> dict[str, tuple[list, object]]:
    out = {}
    for run in mod.offline_runs(DATA, tmp_path / "scratch" / mod.SPEC.name):
        res = prepare_split(mod.SPEC, mod, run.split, tmp_path, from_local=run.local_dir, input_kind=run.input_kind)
        out[run.split] = (load_records(res.out_path), res)
    return out


def test_geometry3k_intergps_letter_mapped_to_value(tmp_path: Path):
    recs, res = _offline(geometry3k, tmp_path)["train"]
    assert res.input_kind == REAL_SAMPLE and len(recs) == 10
    by_id = {r.meta["id"]: r for r in recs}
    raw = json.loads((DATA / "geometry3k_examples" / "11" / "data.json").read_text())
    assert raw["answer"] == "D" and by_id[11].answer == raw["choices"][3] == "80"
    for r in recs:
        assert r.answer == r.choices["ABCD".index(r.meta["answer_letter"])]
        assert r.problem.count("<image>") == 1 and len(r.images) == 1
    stats = json.loads((tmp_path / "geometry3k_train.stats.json").read_text())
    assert stats["rows"] == 10 and stats["images"] == 10 and "offline" in stats["note"]


def test_geometry3k_hub_schema_rows(tmp_path: Path):
    local = geometry3k.hub_schema_sample(tmp_path / "hub")
    recs = [geometry3k.to_record(r, "train", i) for i, r in enumerate(geometry3k.load_rows("train", local))]
    assert all(r.answer == r.choices["ABCD".index(r.meta["answer_letter"])] for r in recs)
    bad = dict(next(iter(geometry3k.load_rows("train", local))))
    bad["answer"] = bad["choices"][0] if bad["ground_truth"] != "A" else bad["choices"][1]
    with pytest.raises(ValueError, match="is not option"):
        geometry3k.to_record(bad, "train", 0)


def test_math_and_aime_real_samples(tmp_path: Path):
    recs, _ = _offline(math12k, tmp_path)["test"]
    assert len(recs) == 500 and all(not r.images for r in recs)
    assert recs[0].uid == "math-test-test/precalculus/807.json"
    out = _offline(aime, tmp_path)
    assert len(out["2024"][0]) == 30 and len(out["2025"][0]) == 30
    assert all(r.answer.isdigit() for r in out["2024"][0] + out["2025"][0])


def test_math12k_hub_schema_rows(tmp_path: Path):
    local = math12k.hub_schema_sample(tmp_path / "hub")
    recs = [math12k.to_record(r, "train", i) for i, r in enumerate(math12k.load_rows("train", local))]
    assert recs[-1].answer == "\\frac{1}{2}"


def test_mathvision_image_tags_become_one_placeholder(tmp_path: Path):
    recs, _ = _offline(mathvision, tmp_path)["testmini"]
    assert len(recs) == 304 and sum(len(r.images) for r in recs) == 304
    for r in recs:
        assert r.problem.count("<image>") == 1 and not re.search(r"<image\d", r.problem)
        if r.choices:
            assert r.answer in r.choices and r.meta["answer_letter"] in "ABCDE"
    multi = [r for r in recs if len(r.meta["image_tags"]) > 1]
    assert multi, "the sample has questions with several <imageK> tags"


def test_mathvision_canonical_question():
    assert mathvision.canonical_question("A <image1> b <image2> c")[0] == "A <image> b  c"
    assert mathvision.canonical_question("no tag") == ("<image>no tag", [])


@pytest.mark.parametrize("mod, split, n", [
    (geoqa8k, "train", 7), (geoqa8k, "val", 1), (mathvista, "testmini", 8), (mathverse, "testmini", 10), (mathverse, "testmini_vision_only", 2),
    (mathverse, "testmini_text_only", 2), (wemath, "testmini", 6), (refcoco, "val", 6),
])
def test_generated_hub_schema_rows(tmp_path: Path, mod, split: str, n: int):
    out = _offline(mod, tmp_path)
    recs, res = out[split]
    assert res.input_kind == GENERATED_ROWS and len(recs) == n
    for r in recs:
        assert r.problem.count("<image>") == len(r.images)
        if r.choices:
            assert r.answer in r.choices


def test_specific_traps(tmp_path: Path):
    geo = _offline(geoqa8k, tmp_path)["val"][0]
    assert geo[0].answer == "145°" and geo[0].problem.startswith("<image>")
    vista = _offline(mathvista, tmp_path)["testmini"][0]
    assert all(r.problem.startswith("<image>") for r in vista)
    verse = _offline(mathverse, tmp_path)
    vo = verse["testmini_vision_only"][0]
    assert all(r.meta["problem_version"] == "Vision Only" and r.problem == "<image>" + mathverse.VISION_ONLY_PROMPT for r in vo)
    mc = [r for r in verse["testmini"][0] if r.choices]
    assert mc and all(r.answer == "5" and r.meta["answer_letter"] == "C" for r in mc)
    we = _offline(wemath, tmp_path)["testmini"][0]
    assert we[1].choices[:2] == ["2cm", "3cm"] and we[1].answer == "3cm" and we[1].meta["answer_letter"] == "B"
    ref = _offline(refcoco, tmp_path)["val"][0]
    assert ref[0].answer == "[5, 6, 35, 26]"  # [x, y, w, h] = [5, 6, 30, 20] -> corners


def test_geoqa8k_val_is_held_out_of_train(tmp_path: Path):
    """The hub has only a train split: val (geoqa8k_val.parquet, named by slots.yaml) is every
    20th source row, train the rest; together they are the source, without overlap."""
    out = _offline(geoqa8k, tmp_path)
    train, val = out["train"][0], out["val"][0]
    assert (tmp_path / "geoqa8k_val.parquet").is_file()
    assert {r.uid for r in val} == {"geoqa8k-train-0"}
    assert sorted(r.meta["index"] for r in train + val) == list(range(8))
    assert not {r.uid for r in train} & {r.uid for r in val}
    assert geoqa8k.in_split("val", 40) and geoqa8k.in_split("train", 41) and not geoqa8k.in_split("train", 40)


def test_bad_source_row_is_named(tmp_path: Path):
    row = {"image": {"bytes": b"x", "path": "a.png"}, "problem": "q", "solution": "<answer></answer>"}
    with pytest.raises(ValueError, match=r"geoqa8k split 'train' source row 0.*'solution' is empty"):
        common.convert_rows([row], geoqa8k.to_record, dataset="geoqa8k", split="train")
    with pytest.raises(ValueError, match="cannot parse options"):
        wemath.parse_options("just text")


def test_real_samples_are_the_repository_copy(monkeypatch):
    """A fresh clone needs no sibling folder: the real samples are committed under data/."""
    monkeypatch.delenv("FASTRL_SHARED_DIR", raising=False)
    assert common.shared_data_dir() == common.REPO_ROOT / "data"
    assert (common.shared_data_dir() / "math500" / "test.jsonl").is_file()


def test_shared_dir_env_override(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FASTRL_SHARED_DIR", str(tmp_path))
    assert common.shared_dir() == tmp_path
    monkeypatch.setenv("FASTRL_SHARED_DIR", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="FASTRL_SHARED_DIR"):
        common.shared_dir()


def test_all_writes_table6(tmp_path: Path):
    results = prep_all.run_all(tmp_path / "prepared", tmp_path / "tables")
    assert (tmp_path / "prepared" / ".gitignore").read_text().strip().endswith("*")
    rows = list(csv.DictReader((tmp_path / "tables" / "table6.csv").open()))
    assert len(rows) == len(results) == 13  # GeoQA8K-R1V: train and the held-out val
    assert {r["source"] for r in rows} == {"measured"}
    kinds = {r["dataset"]: r["input"] for r in rows}
    assert {(r["dataset"], r["split"]) for r in rows} >= {("GeoQA8K-R1V", "train"), ("GeoQA8K-R1V", "val")}
    assert kinds["MathVision"] == kinds["MATH"] == kinds["Geometry3K"] == kinds["AIME"] == REAL_SAMPLE
    assert kinds["MathVista"] == kinds["WeMath"] == GENERATED_ROWS
    md = (tmp_path / "tables" / "table6.md").read_text()
    assert "OFFLINE" in md and "not** of the full public datasets" in md


def test_hub_path_with_a_stubbed_load_dataset(tmp_path: Path, monkeypatch):
    """The hub code path (no --from-local), with datasets.load_dataset stubbed by hub-schema rows
    carrying real HF Image features: images are read undecoded and stored byte-identical."""
    import datasets
    import pyarrow.parquet as pq

    local = geometry3k.hub_schema_sample(tmp_path / "hub")
    rows = pq.read_table(next(local.rglob("*.parquet"))).to_pylist()
    features = datasets.Features({"images": datasets.List(datasets.Image()), "problem": datasets.Value("string"),
                                  "answer": datasets.Value("string"), "id": datasets.Value("int64"),
                                  "choices": datasets.List(datasets.Value("string")), "ground_truth": datasets.Value("string")})
    calls = []

    def fake_load_dataset(hub_id, config=None, split=None):
        calls.append((hub_id, config, split))
        return datasets.Dataset.from_list(rows, features=features)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    res = prepare_split(geometry3k.SPEC, geometry3k, "train", tmp_path / "out", from_local=None, input_kind="hub")
    assert calls == [("hiyouga/geometry3k", None, "train")]
    table = pq.read_table(res.out_path).to_pylist()
    assert [r["images"][0] for r in table] == [r["images"][0]["bytes"] for r in rows]
    assert len(load_records(res.out_path)) == len(rows)


def test_a_script_error_or_ctrl_c_is_one_line_and_an_exit_code(tmp_path: Path) -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "data_prep.math12k", "--from-local", str(tmp_path / "none"),
                          "--out", str(tmp_path / "out")], cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"python -m data_prep.math12k: error: no .parquet/.jsonl/.json file for split 'train' under {tmp_path / 'none'}"]

    def interrupted() -> None:
        raise KeyboardInterrupt

    assert common.run_main(interrupted, "prog") == 130
