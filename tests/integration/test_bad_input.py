"""Bad configs and bad data stop a run early with errors that say what and where."""

from __future__ import annotations

import json

import pytest

from fastrl.cli import main
from fastrl.config import load_config
from fastrl.training.setup import DataError, load_datasets


def test_cli_reports_config_errors_with_exit_code_2(capsys):
    assert main(["train", "methods/fastrl.yaml", "--scale", "smoke", "algorithm.mdap.tua=0.5"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'algorithm.mdap.tua'" in err and "algorithm.mdap.tau" in err


def test_files_task_without_files_is_an_error():
    cfg = load_config("methods/grpo.yaml", ["data.task=files", "model.source=path", "model.path=any/model"], scale="smoke")
    with pytest.raises(DataError, match="data.train_files"):
        load_datasets(cfg)


def test_bad_row_names_file_row_and_field(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"uid": "a", "problem": "1 + 1 ?", "images": [], "answer": "2", "source": "t", "meta": {}},
            {"uid": "b", "problem": "2 + 2 ?", "images": [], "answer": "", "source": "t", "meta": {}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config("methods/grpo.yaml", ["data.task=files", "model.source=path", "model.path=any/model", f"data.train_files=[{path}]"], scale="smoke")
    with pytest.raises(ValueError) as err:
        load_datasets(cfg)
    msg = str(err.value)
    assert str(path) in msg and "answer" in msg and ("row 2" in msg or "row 1" in msg)


def test_missing_data_file_is_named(tmp_path):
    missing = tmp_path / "nope.parquet"
    cfg = load_config("methods/grpo.yaml", ["data.task=files", "model.source=path", "model.path=any/model", f"data.train_files=[{missing}]"], scale="smoke")
    with pytest.raises((FileNotFoundError, ValueError), match="nope.parquet"):
        load_datasets(cfg)
