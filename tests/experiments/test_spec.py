"""Table configs -> runs: counts, shared run directories, valid configs at every scale."""

from __future__ import annotations


import pytest
import yaml

from experiments.grid import Context
from experiments.run import registered, target_module
from experiments.runner import RunError, unique
from experiments.spec import TABLES_DIR, SpecError, build_runs, load_table, parse_seeds, sweep_variants, table_variants
from fastrl.config import load_config, to_dict

GRID_TARGETS = ("table1", "table2", "table3", "table4", "table5", "table7", "table8", "lag", "fig3", "lr_sweep")


def test_table1_is_the_full_grid(tmp_path):
    runs = build_runs("table1", "mini", [1, 2, 3], tmp_path)
    assert len(runs) == 8 * 2 * 2 * 3
    assert len({r.run_dir for r in runs}) == len(runs)
    r = next(r for r in runs if r.variant == "fastrl" and r.dataset == "geoqa8k" and r.model == "vl_7b" and r.seed == 2)
    assert r.run_dir == tmp_path / "table1" / "mini" / "geoqa8k-vl_7b" / "fastrl" / "seed2"
    assert "trainer.seed=2" in r.overrides and f"trainer.run_dir={r.run_dir}" in r.overrides
    assert "data.variant=total" in r.overrides and "model.tiny.hidden_size=192" in r.overrides


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
    unique([s for name in registered() for s in target_module(name).specs(ctx)])  # raises on a conflict


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
    assert "trainer.total_steps=25" in runs[0].overrides  # 25 epochs x floor(300 / 256): drop_last
    with pytest.raises(SpecError, match="geometry3k_train.parquet"):
        build_runs("table1", "paper", [1], tmp_path / "runs", resolve_paper_steps=True)
    pd.DataFrame({"x": range(255)}).to_parquet(tmp_path / "data" / "prepared" / "math12k_train.parquet")
    with pytest.raises(SpecError, match="255 rows, less than one rollout batch of 256"):
        build_runs("table3", "paper", [1], tmp_path / "runs", resolve_paper_steps=True)


def test_paper_yaml_steps_agree_with_the_spec_on_geometry3k(tmp_path):
    """paper.yaml's total_steps is what experiments.spec computes for Geometry3K's 2,101 train rows
    (the release: 25 epochs x len(train_dataloader) with drop_last=True = 25 x 8)."""
    import pandas as pd

    from experiments.spec import paper_total_steps

    path = tmp_path / "geometry3k_train.parquet"
    pd.DataFrame({"x": range(2101)}).to_parquet(path)
    cfg = load_config("methods/grpo.yaml", [], scale="paper")
    assert cfg.trainer.total_steps == paper_total_steps([str(path)], 25, cfg.trainer.prompts_per_step) == 200


def test_table7_runs_the_points_of_the_sweep_file(tmp_path):
    """One spelling of the tau sweep: `fastrl sweep` and Table 7 read configs/tables/tau_sweep.yaml,
    and each point is the sweep's base with that tau as an override (no per-point config files)."""
    sweep_file = yaml.safe_load((TABLES_DIR / "tau_sweep.yaml").read_text())
    ((key, taus),) = sweep_file["sweep"].items()
    variants = table_variants("table7")
    assert [v["name"] for v in variants] == ["grpo", *(f"tau{t}" for t in taus)]
    for tau, v in zip(taus, variants[1:]):
        assert v == {"name": f"tau{tau}", "config": sweep_file["base"], "overrides": [f"{key}={tau}"],
                     "labels": {"tau": tau}}
    assert not (TABLES_DIR / "table7").exists()
    r = next(r for r in build_runs("table7", "mini", [3], tmp_path) if r.variant == "tau0.6" and r.dataset == "geoqa8k")
    assert r.identity()["config"] == "methods/fastrl.yaml" and r.labels["tau"] == 0.6
    assert [o for o in r.overrides if o.startswith("algorithm.mdap.")] == ["algorithm.mdap.tau=0.6"]
    assert r.run_dir == tmp_path / "table7" / "mini" / "geoqa8k-vl_7b" / "tau0.6" / "seed3"


def test_a_sweep_entry_is_one_variant_per_value(tmp_path):
    where = tmp_path / "t.yaml"
    inline = {"key": "algorithm.mdap.tau", "values": [0.5, 1.0], "base": "methods/fastrl.yaml", "name": "tau{value}",
              "label": "tau", "overrides": ["trainer.optim.lr=1e-6"]}
    assert sweep_variants(inline, where) == [
        {"name": "tau0.5", "config": "methods/fastrl.yaml", "overrides": ["trainer.optim.lr=1e-6", "algorithm.mdap.tau=0.5"],
         "labels": {"tau": 0.5}},
        {"name": "tau1.0", "config": "methods/fastrl.yaml", "overrides": ["trainer.optim.lr=1e-6", "algorithm.mdap.tau=1.0"],
         "labels": {"tau": 1.0}},
    ]
    from_file = sweep_variants({"file": "tables/tau_sweep.yaml", "name": "t{value}"}, where)
    assert [v["overrides"] for v in from_file][0] == ["algorithm.mdap.tau=0.2"] and len(from_file) == 5
    with pytest.raises(SpecError, match="unknown keys"):
        sweep_variants({**inline, "valuse": [1]}, where)
    with pytest.raises(SpecError, match="name"):
        sweep_variants({**inline, "name": "tau"}, where)
    with pytest.raises(SpecError, match="either"):
        sweep_variants({**inline, "file": "tables/tau_sweep.yaml"}, where)
    with pytest.raises(SpecError, match="non-empty"):
        sweep_variants({**inline, "values": []}, where)


def test_data_tables_say_what_they_show():
    """Every target run by experiments.table_target names its description and metrics; derived rows
    are of a known kind."""
    data_targets = [name for name, target in registered().items() if target.hook is None]
    assert data_targets == ["lr_sweep", "table1", "table2", "table3", "table5", "table7", "table8"]
    for name in data_targets:
        assert registered()[name].description and target_module(name).metrics, name
    assert "max_over_models" in [d["kind"] for d in load_table("table1")["derived"]]
    assert "best" in [d["kind"] for d in load_table("lr_sweep")["derived"]]


def test_a_derived_row_of_unknown_kind_is_an_error(monkeypatch):
    from experiments import table_target

    table = {**load_table("table1"), "derived": [{"kind": "ratio", "name": "x", "metric": "avg_acc"}]}
    monkeypatch.setattr(table_target, "load_table", lambda target: table)
    with pytest.raises(SpecError, match="kind must be one of"):
        target_module("table1")


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
    b = type(a)(**{**a.__dict__, "overrides": (*a.overrides, "trainer.optim.lr=1")})
    with pytest.raises(RunError, match="different commands"):
        unique([a, b])


def test_reproduce_order_is_the_registered_order():
    names = list(registered())
    assert names[0] == "table6" and names[-1] == "figures"  # data statistics first, figures last
    assert names.index("table1") < names.index("table4")  # Table 4 evaluates Table 1's policies
