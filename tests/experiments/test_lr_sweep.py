"""The GRPO learning-rate sweep (`make lr-sweep`) and the tuned rate every table runs at."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest

import experiments.spec as S
from experiments import collect as C
from experiments.grid import Context, lr_header
from experiments.run import target_module
from tests.experiments.synthetic import write_run

RATES = ("1.25e-5", "2.5e-5", "5e-5", "1e-4", "2e-4", "4e-4")
# the tables that run at a tuned rate: Table 1's settings (and the tables sharing them), Table 3's and Table 8's
SWEPT_TABLES = ("table1", "table3", "table8")
SWEEP_SETTINGS = {(s["dataset"], s["model"]) for t in SWEPT_TABLES for s in S.load_table(t)["settings"]}
N_POINTS = len(SWEEP_SETTINGS) * len(RATES)


def _with_tuned(monkeypatch, rates: dict[str, float]) -> None:
    slots = copy.deepcopy(S.load_slots())
    slots["lr"] = {"mini": rates}
    monkeypatch.setattr(S, "load_slots", lambda path=S.SLOTS_FILE: slots)


def test_the_sweep_plans_every_rate_times_3_seeds_in_every_tuned_tables_setting(tmp_path):
    specs = S.build_runs("lr_sweep", "mini", S.default_seeds("mini"), tmp_path)
    assert {(s.dataset, s.model) for s in specs} == SWEEP_SETTINGS
    assert len(specs) == N_POINTS * 3 >= 90
    assert {s.seed for s in specs} == set(S.default_seeds("mini")[:3])
    assert {s.config for s in specs} == {"methods/grpo.yaml"}
    assert sorted({S.spec_lr(s) for s in specs}) == sorted(float(r) for r in RATES)
    assert {s.variant for s in specs} == {f"lr{r}" for r in RATES}


def test_the_dry_run_lists_the_runs_with_an_estimate(tmp_path, capsys):
    from experiments import run as R

    assert R.main(["lr-sweep", "--scale", "mini", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    n = int(re.search(r"^== lr_sweep at scale mini: (\d+) runs", out, re.M).group(1))  # type: ignore[union-attr]
    assert n == N_POINTS * 3 and "estimate:" in out


def test_a_tuned_rate_is_applied_to_every_method_of_its_setting_only(tmp_path, monkeypatch):
    _with_tuned(monkeypatch, {})  # every setting at the scale's rate (slots.yaml's own rates are data)
    before = {(s.setting, s.variant, s.seed): s.overrides for s in S.build_runs("table1", "mini", [1], tmp_path)}
    _with_tuned(monkeypatch, {"geometry3k-vl_3b": 5e-5, "geoqa8k-vl_7b": 1e-4})
    after = S.build_runs("table1", "mini", [1], tmp_path)
    for s in after:
        if s.setting == "geometry3k-vl_3b":
            assert S.spec_lr(s) == 5e-5 and "trainer.optim.lr=5e-05" in s.overrides, s.variant
            # before the variant's own overrides, so a method (or a sweep) can still set its rate
            assert s.overrides.index("trainer.optim.lr=5e-05") < s.overrides.index(f"trainer.seed={s.seed}")
        else:  # 1e-4 is the scale's rate: no override, the command (and the run) it had before
            assert s.overrides == before[(s.setting, s.variant, s.seed)] and S.spec_lr(s) == 1e-4
    # the sweep's points do not depend on the rate being tuned
    sweep = {s.run_dir: s.overrides for s in S.build_runs("lr_sweep", "mini", [1], tmp_path)}
    monkeypatch.undo()
    assert sweep == {s.run_dir: s.overrides for s in S.build_runs("lr_sweep", "mini", [1], tmp_path)}


@pytest.mark.parametrize("bad", [0, -1e-4, "fast", float("inf")])
def test_a_bad_tuned_rate_names_the_slot(tmp_path, monkeypatch, bad):
    _with_tuned(monkeypatch, {"geometry3k-vl_3b": bad})
    with pytest.raises(S.SpecError, match=r"lr\.mini\.geometry3k-vl_3b"):
        S.build_runs("table1", "mini", [1], tmp_path)


def test_the_header_says_the_rate_used(tmp_path, monkeypatch):
    _with_tuned(monkeypatch, {})  # every setting at the scale's rate
    uniform = lr_header(S.build_runs("table1", "mini", [1], tmp_path))
    assert "trainer.optim.lr" in uniform and "0.0001 for every method in every setting" in uniform
    _with_tuned(monkeypatch, {"geometry3k-vl_3b": 5e-5})
    per_setting = lr_header(S.build_runs("table1", "mini", [1], tmp_path))
    assert "Geometry3K · Qwen2.5-VL-3B-Instruct 5e-05" in per_setting
    assert "GeoQA8K-R1V · Qwen2.5-VL-7B-Instruct 0.0001" in per_setting
    sweep = lr_header(S.build_runs("lr_sweep", "mini", [1], tmp_path))
    assert all(f"lr{r} {float(r):g}" in sweep for r in RATES), sweep


def test_committed_tables_carry_the_rate_in_their_header():
    for name in ("table1", "table2", "table3", "table7"):
        md = (C.GENERATED_ROOT / "mini" / f"{name}.md").read_text().splitlines()
        assert md[2].startswith("**Learning rate** (`trainer.optim.lr`"), name


def test_the_sweep_table_pairs_each_rate_with_1e4_and_names_the_best(tmp_path):
    ctx = Context(scale="smoke", seeds=[1, 2], runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                  launcher="inprocess")
    accs = {"lr1.25e-5": (0.25, 0.30), "lr2.5e-5": (0.30, 0.34), "lr5e-5": (0.50, 0.56), "lr1e-4": (0.40, 0.42), "lr2e-4": (0.20, 0.22), "lr4e-4": (0.10, 0.12)}
    specs = S.build_runs("lr_sweep", "smoke", [1, 2], ctx.runs_root)
    for s in specs:
        write_run(s.run_dir, step_times=[1.0], acc_after=accs[s.variant][s.seed - 1], ood={"total": 0.1})
    csv_path, md_path = target_module("lr-sweep").collect(ctx)
    rows = C.read_rows(csv_path)
    best = [r for r in rows if r["metric"] == "best_in_domain_acc"]
    assert len(best) == len(SWEEP_SETTINGS) and {r["method"] for r in best} == {"lr5e-5"}
    d = [r for r in rows if r["metric"] == "d_in_domain_acc_vs_lr1e-4" and r["method"] == "lr5e-5"]
    assert len(d) == len(SWEEP_SETTINGS)
    assert all(math.isclose(float(r["value"]), 100 * ((0.50 - 0.40) + (0.56 - 0.42)) / 2) for r in d)
    assert all(r["ci95_low"] not in ("", "n/a") for r in d)
    md = md_path.read_text()
    assert "d_in_domain_acc_vs_lr1e-4" in md and "best_in_domain_acc" in md and "per method, lr1.25e-5" in md


def test_only_the_first_seeds_asked_run_in_a_table_with_max_seeds(tmp_path):
    assert {s.seed for s in S.build_runs("lr_sweep", "mini", [7, 8, 9, 10], Path(tmp_path))} == {7, 8, 9}


def test_the_sweep_plans_nothing_at_paper_scale(tmp_path):
    """Its rates are mini's; the paper's runs keep the published 1e-6."""
    assert S.build_runs("lr_sweep", "paper", [1], tmp_path) == []
    assert S.build_runs("lr_sweep", "smoke", [1], tmp_path)


def test_the_tables_run_at_the_committed_sweeps_best_rate_per_setting(tmp_path):
    """slots.yaml's `lr` block is what the committed lr_sweep table names as best, setting by setting."""
    rows = C.read_rows(C.GENERATED_ROOT / "mini" / "lr_sweep.csv")
    best = {(r["dataset"], r["model"]): float(r["method"].removeprefix("lr"))
            for r in rows if r["metric"] == "best_in_domain_acc" and r["source"] == "measured"}
    assert len(best) == len(SWEEP_SETTINGS)
    used = {(s.labels["dataset_title"], s.labels["model_title"]): S.spec_lr(s)
            for t in SWEPT_TABLES for s in S.build_runs(t, "mini", [1], tmp_path) if s.variant == "grpo"}
    assert used == best
