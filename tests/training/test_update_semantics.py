"""Update semantics (docs/algorithms.md): every table x method at paper scale takes its optimizer steps
per rollout step from the scale and method files alone (no per-table overrides), and the mini and
smoke scales keep the paper's 4:1 mini-batch ratio."""

from __future__ import annotations

import pytest
import torch

from experiments.spec import build_runs
from fastrl.config import load_config
from fastrl.training.update import plan_minibatches

TABLES = ("table1", "table2", "table3", "table4", "table5", "table7", "table8", "fig3")
FASTRL_FAMILY = {"fastrl", "fastrl_dapo", "fastrl_gspo", "fastrl_no_mdap", "fastrl_no_ars", "fastrl_greedy_mdap",
                 "fastrl_retention_ars", "fastrl_release_script", "random_p0.25", "random_p0.5", "random_p0.75",
                 "advantage_only", "tau0.2", "tau0.4", "tau0.6", "tau0.8", "tau1.0"}


def optimizer_steps(cfg, kept: int) -> int:
    t = cfg.trainer
    return len(plan_minibatches(kept, mode=t.update_mode, updates_per_step=t.updates_per_step,
                                mini_batch_size=t.effective_mini_batch, world=1, generator=torch.Generator()))


@pytest.mark.parametrize("table", TABLES)
def test_paper_scale_optimizer_steps(tmp_path, table):
    runs = build_runs(table, "paper", [1], tmp_path)
    assert runs
    for r in runs:
        cfg = load_config(r.config, list(r.overrides), scale="paper")
        assert cfg.trainer.update_mode == "fixed_minibatch", (table, r.variant)
        full = cfg.trainer.prompts_per_step * cfg.rollout.n
        assert full == 2048, (table, r.variant)
        if r.variant in FASTRL_FAMILY:
            assert cfg.trainer.effective_mini_batch == 128, (table, r.variant)
            for kept in (128, 640, 1024, 2048):  # MDAP refills the kept count to a multiple of 128
                assert optimizer_steps(cfg, kept) == kept // 128, (table, r.variant, kept)
        else:
            assert r.variant in {"grpo", "dapo", "gspo", "cppo", "greso"}, r.variant
            assert cfg.trainer.effective_mini_batch == 512, (table, r.variant)
            assert optimizer_steps(cfg, 2048) == 4, (table, r.variant)
            if r.variant == "cppo":
                assert optimizer_steps(cfg, 1024) == 2  # CPPO keeps 4 of 8 per question


@pytest.mark.parametrize("scale, per_step", [("mini", 128), ("smoke", 16)])
def test_mini_and_smoke_keep_the_papers_ratio(scale, per_step):
    grpo = load_config("methods/grpo.yaml", scale=scale)
    fast = load_config("methods/fastrl.yaml", scale=scale)
    assert grpo.trainer.prompts_per_step * grpo.rollout.n == per_step
    assert optimizer_steps(grpo, per_step) == 4
    assert grpo.trainer.effective_mini_batch == 4 * fast.trainer.effective_mini_batch


def test_visual_mini_slots_keep_the_papers_ratio(tmp_path):
    for r in build_runs("table1", "mini", [1], tmp_path):
        cfg = load_config(r.config, list(r.overrides), scale="mini")
        full = cfg.trainer.prompts_per_step * cfg.rollout.n
        if r.variant.startswith("fastrl"):
            assert cfg.trainer.effective_mini_batch * 16 == full, r.variant
        else:
            assert optimizer_steps(cfg, full) == 4, r.variant


def test_fixed_updates_stays_available_for_the_lag_figure(tmp_path):
    lag = next(r for r in build_runs("lag", "mini", [1], tmp_path) if r.variant == "fastrl_lag16")
    cfg = load_config(lag.config, list(lag.overrides), scale="mini")
    assert cfg.trainer.update_mode == "fixed_updates" and optimizer_steps(cfg, 48) == 16
