"""An engine and a task written outside the package, each with its own config section, train
through ``--import`` (``train``, ``sweep``) and evaluate (``eval --import``) without editing any file
of fastrl (issue 29: one registered-section contract for every seam).

The modules are copied into a temp dir under other names, so nothing but that dir and
``--import`` can make them known; the runs are smoke-sized (seconds)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fastrl.config import CONFIG_ROOT

REPO = CONFIG_ROOT.parent
EXAMPLES = REPO / "docs" / "examples"  # the worked examples of docs/algorithms.md


def _fastrl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "capped_engine.py", plugins / "my_capped_engine.py")
    shutil.copy(EXAMPLES / "sum_task.py", plugins / "my_sum_task.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(REPO)]), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "fastrl.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir

    return build_tiny_model_dir(TinyModelSpec(kind="qwen2", num_layers=1), tmp_path_factory.mktemp("model"), seed=0)


SMOKE = ("--scale", "smoke", "trainer.total_steps=1", "trainer.progress=false")


def test_an_outside_engine_trains_with_its_own_section_and_evaluates(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _fastrl(tmp_path, "train", "methods/grpo.yaml", "--import", "my_capped_engine", *SMOKE,
                   "rollout.engine=capped", "rollout.capped.max_tokens=3", f"trainer.run_dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    step = next(r for r in _metrics(run) if "tokens/generated" in r)
    # smoke: 4 prompts x n 4 responses, each capped at 3 tokens (rollout.max_new_tokens is 32)
    assert 0 < step["tokens/generated"] <= 16 * 3
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["imports"] == ["my_capped_engine"] and saved["rollout"]["capped"] == {"max_tokens": 3, "batch_size": 64}
    assert "hf" in saved["rollout"]  # the built-in sections stay, so a run dir reads under either engine

    proc = _fastrl(tmp_path, "eval", "--import", "my_capped_engine", "--engine", "capped", "--model", str(run),
                   "--benchmark", "mini-math", "--limit", "4", "--max-new-tokens", "16", "--out", str(tmp_path / "ev"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert "mini-math" in json.dumps(result)


def test_the_engine_section_is_checked_and_unknown_without_the_import(tmp_path: Path) -> None:
    proc = _fastrl(tmp_path, "train", "methods/grpo.yaml", "--import", "my_capped_engine", *SMOKE,
                   "rollout.engine=capped", "rollout.capped.max_tokens=0", f"trainer.run_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "fastrl: error: rollout.capped.max_tokens = 0 must be >= 1"
    proc = _fastrl(tmp_path, "train", "methods/grpo.yaml", *SMOKE, "rollout.engine=capped",
                   f"trainer.run_dir={tmp_path / 'r'}")
    assert proc.returncode == 2 and "rollout.engine = 'capped' is not one of hf, vllm" in proc.stderr
    proc = _fastrl(tmp_path, "eval", "--engine", "capped", "--model", str(tmp_path), "--benchmark", "mini-math")
    assert proc.returncode == 2 and "unknown rollout engine 'capped'; valid: hf, vllm" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_an_outside_task_trains_with_its_own_section_and_sweeps(tmp_path: Path, tiny_model: Path) -> None:
    run = tmp_path / "run"
    model = ("model.source=path", f"model.path={tiny_model}")
    proc = _fastrl(tmp_path, "train", "methods/grpo.yaml", "--import", "my_sum_task", *SMOKE, *model,
                   "data.task=sum", "data.sum.max_operand=9", f"trainer.run_dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _metrics(run)
    assert any("tokens/generated" in r for r in rows)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["imports"] == ["my_sum_task"] and saved["data"]["sum"] == {"max_operand": 9}
    # the same run resumes as finished (its identity reads the plug-in's section back)
    again = _fastrl(tmp_path, "train", "methods/grpo.yaml", "--import", "my_sum_task", *SMOKE, *model,
                    "data.task=sum", "data.sum.max_operand=9", f"trainer.run_dir={run}")
    assert again.returncode == 0 and "finished" in again.stdout, again.stderr[-2000:]

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": "methods/grpo.yaml", "sweep": {"data.sum.max_operand": [7]}}))
    proc = _fastrl(tmp_path, "sweep", str(sweep), "--import", "my_sum_task", *SMOKE, *model, "data.task=sum",
                   f"trainer.run_dir={tmp_path / 'sw'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    point = tmp_path / "sw" / "sweep" / "data.sum.max_operand=7"
    assert yaml.safe_load((point / "config.yaml").read_text())["data"]["sum"] == {"max_operand": 7}


def test_the_task_section_is_checked_and_the_tiny_source_refuses_it(tmp_path: Path) -> None:
    proc = _fastrl(tmp_path, "train", "methods/grpo.yaml", "--import", "my_sum_task", *SMOKE, "data.task=sum",
                   "data.sum.max_operand=0", "model.source=path", "model.path=x", f"trainer.run_dir={tmp_path / 'r'}")
    assert proc.returncode == 2 and proc.stderr.strip() == "fastrl: error: data.sum.max_operand = 0 must be >= 1"
    proc = _fastrl(tmp_path, "train", "methods/grpo.yaml", "--import", "my_sum_task", *SMOKE, "data.task=sum",
                   f"trainer.run_dir={tmp_path / 'r'}")
    assert proc.returncode == 2 and "data.task = sum needs model.source = path" in proc.stderr
    assert not (tmp_path / "r").exists()
