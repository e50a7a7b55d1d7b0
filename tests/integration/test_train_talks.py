"""A smoke run through the command line talks (issue 27): its config at the start, a line per
step, one closing line saying where things are; with trainer.loggers=[jsonl,wandb] (offline) the
wandb run holds the same steps as metrics.jsonl."""

from __future__ import annotations

import json
import logging

import pytest

from fastrl.cli import main
from fastrl.training.metrics import WANDB_ID_FILE, read_metrics


@pytest.fixture(autouse=True)
def _restore_fastrl_logger():
    logger = logging.getLogger("fastrl")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_a_smoke_run_prints_its_config_steps_and_where_it_wrote(tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    from tests.training.test_loggers import _history

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    assert main(["train", "methods/fastrl.yaml", "--scale", "smoke", f"trainer.run_dir={run}",
                 "trainer.loggers=[jsonl,wandb]"]) == 0
    out, err = capsys.readouterr()
    assert "method fastrl: " in err and f"run_dir {run} (loggers: jsonl, wandb" in err
    assert "step 1/2  reward " in err and "step 2/2  reward " in err  # smoke scale too
    assert out.count("\n") == 1 and "fastrl done: 2 steps" in out and f"metrics {run / 'metrics.jsonl'}" in out
    assert f"policy {run / 'final'}" in out
    rows = read_metrics(run)
    run_id = (run / WANDB_ID_FILE).read_text().strip()
    (wandb_file,) = (run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    history = _history(wandb_file)
    assert [h["train/step"] for h in history] == [r["step"] for r in rows]
    step_rows = [r for r in rows if "timing_s/step" in r]
    assert [h["reward/mean"] for h in history if "timing_s/step" in h] == [r["reward/mean"] for r in step_rows]
    assert json.loads((run / "summary.json").read_text())["steps"] == 2
