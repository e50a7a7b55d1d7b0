"""The accuracy probe's runner: one smoke run, its log where it ran, nothing moved aside."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.accuracy.probe import run_one, summarize

COMMON = ["--scale", "smoke", "trainer.total_steps=1", "trainer.val_every=0", "trainer.progress=false"]


def test_run_one_keeps_its_log_and_leaves_no_replaced_folder(tmp_path: Path) -> None:
    msg = run_one(tmp_path, "grpo", {"config": "methods/grpo.yaml"}, COMMON, seed=1)
    run_dir = tmp_path / "grpo" / "seed1"
    assert "FAILED" not in msg, (run_dir / "train.log").read_text()[-2000:]
    assert (run_dir / "summary.json").is_file()
    assert "step" in (run_dir / "train.log").read_text()  # the trainer's output, not an empty file
    assert sorted(p.name for p in (tmp_path / "grpo").iterdir()) == ["seed1"]
    assert summarize(run_dir) is not None
    assert run_one(tmp_path, "grpo", {"config": "methods/grpo.yaml"}, COMMON, seed=1).endswith("done before")
    assert json.loads((run_dir / "summary.json").read_text())
