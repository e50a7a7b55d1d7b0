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
    steps = [r for r in rows if "timing_s/step" in r]
    assert len(steps) == 2 and summary["steps"] == 2
    for r in steps:
        for s in STAGES:
            assert f"timing_s/{s}" in r
        assert r["tokens/generated"] > 0 and 0 < r["tokens/trained"] <= r["tokens/generated"]
        assert 0 < r["prune/kept_fraction"] <= 1
        assert r["prune/kept"] % 2 == 0  # aligned to world size x micro-batch (1 x 2 at smoke scale)
    assert 0.0 <= summary["acc_after"] <= 1.0
    assert (tmp_path / method / "config.yaml").exists()
    if method in ("fastrl", "fastrl_dapo", "fastrl_gspo", "fastrl_no_ars"):
        assert any(r["prune/kept_fraction"] < 1 for r in steps)  # MDAP pruned something
    else:
        assert all(r["prune/kept_fraction"] == 1 for r in steps) or method == "cppo"


def test_reference_model_only_when_kl_is_on(tmp_path):
    cfg = load_config("methods/dapo.yaml", [f"trainer.run_dir={tmp_path}"], scale="smoke")
    assert cfg.algorithm.kl_coef == 0
    trainer = Trainer(cfg)
    assert trainer.policy.reference is None


def test_ars_changes_n_from_pruning_history(tmp_path):
    _, rows = _run(tmp_path, "fastrl", "trainer.total_steps=3", "algorithm.mdap.tau=1.0")
    ns = [r["rollout/n"] for r in rows if "rollout/n" in r]
    assert ns[0] == 4 and any("ars/n_next" in r for r in rows)
