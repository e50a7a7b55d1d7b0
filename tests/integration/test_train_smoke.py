"""Smoke-scale runs of every method config through the one trainer (HF engine, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastrl.config import CONFIG_ROOT, load_config
from fastrl.training.metrics import STAGES, read_metrics
from fastrl.training.pipeline import Trainer

METHODS = sorted(p.stem for p in (CONFIG_ROOT / "methods").glob("*.yaml"))


def _run(tmp_path: Path, method: str, *overrides: str) -> tuple[dict, list[dict]]:
    cfg = load_config(f"methods/{method}.yaml", [f"trainer.run_dir={tmp_path / method}", *overrides], scale="smoke")
    summary = Trainer(cfg).fit()
    return summary, read_metrics(tmp_path / method)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_at_smoke_scale(tmp_path, method):
    summary, rows = _run(tmp_path, method)
    cfg = load_config(f"methods/{method}.yaml", scale="smoke")
    steps = [r for r in rows if "timing_s/step" in r]
    assert len(steps) == 2 and summary["steps"] == 2
    for r in steps:
        for s in STAGES:
            assert f"timing_s/{s}" in r and f"cpu_s/{s}" in r
        assert 0 < r["cpu_s/step"]
        assert r["tokens/generated"] > 0 and 0 < r["tokens/trained"] <= r["tokens/generated"]
        assert 0 < r["prune/kept_fraction"] <= 1
        # refilled to a multiple of the optimizer mini-batch (or everything kept)
        assert r["prune/kept"] % cfg.trainer.effective_mini_batch == 0 or r["prune/kept_fraction"] == 1
    assert 0.0 <= summary["acc_after"] <= 1.0
    assert (tmp_path / method / "config.yaml").exists()
    if cfg.algorithm.pruner == "mdap":
        assert any(r["prune/kept_fraction"] < 1 for r in steps)  # MDAP pruned something
    else:
        assert all(r["prune/kept_fraction"] == 1 for r in steps) or method == "cppo"


def test_reference_model_only_when_kl_is_on(tmp_path):
    cfg = load_config("methods/dapo.yaml", [f"trainer.run_dir={tmp_path}"], scale="smoke")
    assert cfg.algorithm.kl_coef == 0
    trainer = Trainer(cfg)
    assert trainer.policy.reference is None


def test_ars_changes_n_from_pruning_history(tmp_path):
    _, rows = _run(tmp_path, "fastrl", "trainer.total_steps=3", "algorithm.mdap.tau=1.0",
                   "algorithm.rollout_scaler=ars_retention")
    ns = [r["rollout/n"] for r in rows if "rollout/n" in r]
    assert ns[0] == 4 and any("ars/n_next" in r for r in rows)


def test_released_ars_logs_its_statistics_every_period(tmp_path):
    _, rows = _run(tmp_path, "fastrl", "trainer.total_steps=3")
    periods = [r for r in rows if "ars/n_next" in r]
    assert len(periods) == 3  # smoke: one period per step
    assert all(k in periods[-1] for k in ("ars/f1", "ars/f2", "ars/f3", "ars/g1", "ars/progress"))
    assert periods[0]["ars/g1"] == (periods[0]["ars/f1"] + periods[0]["ars/f2"]) / 2
    assert all(r["ars/g1"] == periods[0]["ars/g1"] for r in periods)  # set once
    steps = [r for r in rows if "timing_s/step" in r]
    assert all(s["ars/f1"] == s["prune/count_mean"] and s["ars/f2"] == s["prune/count_max"] for s in steps)


def test_a_fresh_start_drops_the_log_of_a_killed_attempt(tmp_path):
    run = tmp_path / "grpo"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "val/accuracy_before": 0.5, "phase": "val"}\n'
                                       '{"step": 1, "timing_s/step": 9.0}\n')
    _, rows = _run(tmp_path, "grpo", "trainer.resume=false")
    assert sum("val/accuracy_before" in r for r in rows) == 1
    assert sum("timing_s/step" in r for r in rows) == 2 and all(r["timing_s/step"] != 9.0 for r in rows if "timing_s/step" in r)
