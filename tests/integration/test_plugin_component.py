"""A pruner with its own hyper-parameter, in a module outside the package, trains through
``fastrl train --import`` without editing any file of fastrl (issue 18, item 2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from fastrl.config import CONFIG_ROOT

REPO = CONFIG_ROOT.parent
EXAMPLE = REPO / "docs" / "examples" / "keep_top_pruner.py"  # the worked example of docs/algorithms.md


def _train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    shutil.copy(EXAMPLE, plugins / "my_keep_top.py")  # a module only this temp dir holds
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(REPO)]), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "fastrl.cli", "train", "methods/grpo.yaml", "--import", "my_keep_top",
           "--scale", "smoke", "algorithm.pruner=keep_top", *overrides, "trainer.progress=false",
           f"trainer.run_dir={tmp_path / 'run'}"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_an_outside_pruner_trains_with_its_own_hyperparameter(tmp_path):
    proc = _train(tmp_path, "algorithm.keep_top.fraction=0.25", "trainer.total_steps=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "prune/kept_fraction" in r)
    # smoke: 4 prompts x n 4; fraction 0.25 keeps 1 of 4 per question (0.5, the default, would keep 2)
    assert step["prune/kept_before_refill"] == 4 and step["prune/kept_fraction"] == 0.25
    # the pruner's own metrics() reach metrics.jsonl (its lowest kept reward: one of 0, 0.5, 1, 1.5)
    assert step["keep_top/lowest_kept_reward"] in (0.0, 0.5, 1.0, 1.5)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["imports"] == ["my_keep_top"] and saved["algorithm"]["keep_top"] == {"fraction": 0.25}


def test_an_unknown_key_of_the_plugin_section_is_one_line(tmp_path):
    proc = _train(tmp_path, "algorithm.keep_top.fractoin=0.25")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "fastrl: error: unknown key 'algorithm.keep_top.fractoin'; did you mean 'algorithm.keep_top.fraction'? "
        "Keys of algorithm.keep_top: fraction")
    proc = _train(tmp_path, "algorithm.keep_top.fraction=2")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "fastrl: error: algorithm.keep_top.fraction = 2.0 must lie in (0, 1]"
    assert not (tmp_path / "run").exists()
