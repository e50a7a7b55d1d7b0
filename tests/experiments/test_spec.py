"""Table configs -> runs: counts, shared run directories, valid configs at every scale."""

from __future__ import annotations


import pytest
import yaml

from experiments.run import REPRODUCE_ORDER, TARGETS, target_module
from experiments.grid import Context
from experiments.runner import RunError, unique
from experiments.spec import TABLES_DIR, SpecError, build_runs, parse_seeds
from fastrl.config import load_config

GRID_TARGETS = ("table1", "table2", "table3", "table4", "table5", "table7", "table8", "lag", "fig3")


def test_table1_is_the_full_grid(tmp_path):
    runs = build_runs("table1", "mini", [1, 2, 3], tmp_path)
    assert len(runs) == 8 * 2 * 2 * 3
    assert len({r.run_dir for r in runs}) == len(runs)
    r = next(r for r in runs if r.variant == "fastrl" and r.dataset == "geoqa8k" and r.model == "vl_7b" and r.seed == 2)
    assert r.run_dir == tmp_path / "table1" / "mini" / "geoqa8k-vl_7b" / "fastrl" / "seed2"
    assert "trainer.seed=2" in r.overrides and f"trainer.run_dir={r.run_dir}" in r.overrides
    assert "data.variant=total" in r.overrides and "model.hidden_size=192" in r.overrides


def test_shared_runs_are_the_same_command(tmp_path):
    t1 = {r.run_dir: r for r in build_runs("table1", "mini", [1], tmp_path)}
    t2 = [r for r in build_runs("table2", "mini", [1], tmp_path) if r.variant in ("grpo", "fastrl")]
    assert t2 and all(r.run_dir in t1 and t1[r.run_dir].identity() == r.identity() for r in t2)
    others = [r for r in build_runs("table2", "mini", [1], tmp_path) if r.variant == "fastrl_no_ars"]
    assert others[0].run_dir.parts[-5] == "table2"


@pytest.mark.parametrize("scale", ["smoke", "mini", "paper"])
def test_every_target_agrees_on_shared_runs(tmp_path, scale):
    ctx = Context(scale=scale, seeds=[1], runs_root=tmp_path, out_dir=tmp_path, launcher="inprocess",
                  resolve_paper_steps=False)
    unique([s for name in TARGETS for s in target_module(name).specs(ctx)])  # raises on a conflict


@pytest.mark.parametrize("scale", ["smoke", "mini", "paper"])
def test_every_run_config_is_valid(tmp_path, scale):
    """Every override of every run is a key of the schema with a valid value (load_config checks)."""
    seen = set()
    for target in GRID_TARGETS:
        for r in build_runs(target, scale, [1], tmp_path):
            key = (r.config, r.overrides[:-2])
            if key in seen:
                continue
            seen.add(key)
            cfg = load_config(r.config, list(r.overrides), scale=scale)
            assert cfg.trainer.run_dir == str(r.run_dir) and cfg.trainer.seed == 1


def test_variant_overrides_reach_the_config(tmp_path):
    r = next(r for r in build_runs("table5", "mini", [1], tmp_path) if r.variant == "random_p0.75")
    cfg = load_config(r.config, list(r.overrides), scale="mini")
    assert cfg.algorithm.pruner == "random" and cfg.algorithm.random.prune_rate == 0.75
    assert cfg.algorithm.rollout_scaler == "ars"
    lag = next(r for r in build_runs("lag", "mini", [1], tmp_path) if r.variant == "fastrl_lag16")
    cfg = load_config(lag.config, list(lag.overrides), scale="mini")
    assert cfg.trainer.updates_per_step == 16 and cfg.trainer.update_mode == "fixed_updates"
    g = next(r for r in build_runs("table8", "paper", [1], tmp_path) if r.variant == "fastrl")
    cfg = load_config(g.config, list(g.overrides), scale="paper")
    assert cfg.algorithm.mdap.rule == "release" and cfg.data.reward == "grounding_iou"


def test_paper_scale_uses_the_papers_models_and_batches(tmp_path):
    runs = build_runs("table1", "paper", [1], tmp_path)
    cfg = load_config(runs[0].config, list(runs[0].overrides), scale="paper")
    assert cfg.rollout.engine == "vllm" and cfg.trainer.zero_stage == 3 and cfg.trainer.prompts_per_step == 256
    models = {load_config(r.config, list(r.overrides), scale="paper").model.path for r in runs}
    assert models == {"Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"}
    fast = next(r for r in runs if r.variant == "fastrl")
    assert load_config(fast.config, list(fast.overrides), scale="paper").trainer.effective_mini_batch == 128
    assert all(r.gpus == 4 for r in runs)


def test_paper_steps_come_from_the_prepared_data(tmp_path, monkeypatch):
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "prepared").mkdir(parents=True)
    pd.DataFrame({"x": range(300)}).to_parquet(tmp_path / "data" / "prepared" / "math12k_train.parquet")
    runs = build_runs("table3", "paper", [1], tmp_path / "runs", resolve_paper_steps=True)
    assert "trainer.total_steps=50" in runs[0].overrides  # 25 epochs x ceil(300 / 256)
    with pytest.raises(SpecError, match="geometry3k_train.parquet"):
        build_runs("table1", "paper", [1], tmp_path / "runs", resolve_paper_steps=True)


def test_tau_configs_match_the_sweep_file():
    sweep = yaml.safe_load((TABLES_DIR / "tau_sweep.yaml").read_text())["sweep"]["algorithm.mdap.tau"]
    for tau in sweep:
        cfg = load_config(f"tables/table7/tau_{tau}.yaml", [], scale="smoke")
        assert cfg.algorithm.mdap.tau == tau and cfg.algorithm.pruner == "mdap"
    assert sorted(p.stem for p in (TABLES_DIR / "table7").glob("*.yaml")) == [f"tau_{t}" for t in sweep]


def test_seeds():
    assert parse_seeds("", "mini") == [1, 2, 3, 4, 5] and parse_seeds(None, "paper") == [1]
    assert parse_seeds("4, 5 6", "mini") == [4, 5, 6]
    with pytest.raises(SpecError, match="repeated"):
        parse_seeds("1 1", "mini")
    with pytest.raises(SpecError, match="integers"):
        parse_seeds("one", "mini")


def test_unknown_slot_and_conflicting_share_are_errors(tmp_path, monkeypatch):
    from experiments import spec as S

    bad = tmp_path / "bad.yaml"
    bad.write_text("target: bad\ntitle: x\nsettings: [{dataset: nope, model: vl_3b}]\nvariants: [{name: a, config: methods/grpo.yaml}]\n")
    monkeypatch.setattr(S, "table_config_path", lambda t: bad)
    with pytest.raises(SpecError, match="no dataset slot 'nope'"):
        build_runs("bad", "mini", [1], tmp_path)
    monkeypatch.undo()
    a = build_runs("table1", "mini", [1], tmp_path)[0]
    b = type(a)(**{**a.__dict__, "overrides": (*a.overrides, "trainer.lr=1")})
    with pytest.raises(RunError, match="different commands"):
        unique([a, b])


def test_reproduce_covers_every_target():
    assert set(REPRODUCE_ORDER) == set(TARGETS)
