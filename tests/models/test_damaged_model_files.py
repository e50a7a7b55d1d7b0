"""A damaged model directory is one line naming the file (issue 24, defect 6): a truncated
``model.safetensors`` gave safetensors' traceback naming no file, a missing ``tokenizer.json`` a
hint to install sentencepiece."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fastrl.cli import main
from fastrl.models.loaders import ModelFileError, damaged_safetensors, load_policy
from tests.mini.conftest import one_torch_thread, text_model_dir  # noqa: F401  (fixtures)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_truncated_safetensors_file_is_named(tmp_path: Path, text_model_dir: Path) -> None:
    model = _copy(text_model_dir, tmp_path / "model")
    weights = model / "model.safetensors"
    size = weights.stat().st_size
    assert damaged_safetensors(model) is None
    os.truncate(weights, size // 2)
    with pytest.raises(ModelFileError) as err:
        load_policy(model)
    msg = str(err.value)
    assert msg.startswith(f"{weights}: truncated: {size // 2} of {size} bytes") and "\n" not in msg


@pytest.mark.parametrize("keep", [4, 100])
def test_a_header_cut_short_is_named(tmp_path: Path, text_model_dir: Path, keep: int) -> None:
    model = _copy(text_model_dir, tmp_path / "model")
    os.truncate(model / "model.safetensors", keep)
    assert damaged_safetensors(model)[0] == model / "model.safetensors"
    assert damaged_safetensors(model)[1].startswith("truncated")


def test_fastrl_eval_on_a_truncated_model_is_one_line(tmp_path: Path, text_model_dir: Path, capsys) -> None:
    model = _copy(text_model_dir, tmp_path / "model")
    os.truncate(model / "model.safetensors", 1000)
    rc = main(["eval", "--model", str(model), "--benchmark", "mini-math", "--limit", "1", "--max-new-tokens", "2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fastrl")]
    assert rc == 2 and len(err) == 1 and str(model / "model.safetensors") in err[0], err


def test_a_missing_tokenizer_json_is_named(tmp_path: Path, text_model_dir: Path) -> None:
    model = _copy(text_model_dir, tmp_path / "model")
    (model / "tokenizer.json").unlink()
    with pytest.raises(ModelFileError) as err:
        load_policy(model)
    msg = str(err.value)
    assert msg.startswith(f"{model / 'tokenizer.json'}: missing") and "sentencepiece" not in msg and "\n" not in msg
