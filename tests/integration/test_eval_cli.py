"""`fastrl eval` end to end on the real offline samples (MATH-500, AIME 2024, MathVision testmini)
with tiny models built from config: files -> canonical parquet -> prompts -> generation -> reward
-> accuracy / avg@k / pass@k JSON and markdown. Scores are near zero; the path is what is tested."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_prep.common import shared_data_dir
from fastrl.cli import main
from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir

REPO = Path(__file__).resolve().parents[2]
SHARED = shared_data_dir()


def _prepare(name: str, local: Path, split: str, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", f"data_prep.{name}", "--from-local", str(local), "--split", split,
                    "--out", str(out), "--limit", "6"], cwd=REPO, check=True, capture_output=True)
    return out / f"{name}_{split}.parquet"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    return {
        "math500": _prepare("math12k", SHARED / "math500", "test", out),
        "aime2024": _prepare("aime", SHARED / "aime", "2024", out),
        "mathvision": _prepare("mathvision", SHARED / "mathvision_testmini", "testmini", out),
    }


def test_eval_text_benchmarks_with_pass_at_k(prepared, tmp_path):
    model = build_tiny_model_dir(TinyModelSpec(kind="qwen2", num_layers=1), tmp_path / "model", seed=0)
    out = tmp_path / "eval"
    rc = main(["eval", "--model", str(model), "--benchmark", f"math500={prepared['math500']}",
               "--benchmark", f"aime2024={prepared['aime2024']}", "--sampling", "paper", "--k", "4",
               "--max-new-tokens", "8", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "eval.json").read_text())
    for bench in ("math500", "aime2024"):
        m = res["benchmarks"][bench]
        assert m["n_problems"] == 6 and 0.0 <= m["pass@4"] <= 1.0 and 0.0 <= m["avg@4"] <= m["pass@4"]
    assert "math500" in (out / "eval.md").read_text()


def test_eval_mathvision_through_the_vl_model(prepared, tmp_path):
    model = build_tiny_model_dir(TinyModelSpec(kind="qwen2_5_vl", num_layers=1), tmp_path / "vl", seed=0)
    out = tmp_path / "eval"
    rc = main(["eval", "--model", str(model), "--benchmark", f"mathvision={prepared['mathvision']}",
               "--reward", "mc", "--max-new-tokens", "8", "--out", str(out)])
    assert rc == 0
    m = json.loads((out / "eval.json").read_text())["benchmarks"]["mathvision"]
    assert m["n_problems"] == 6 and 0.0 <= m["accuracy"] <= 1.0
