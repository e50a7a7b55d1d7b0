"""Collectors on synthetic logs: paper rows present, measured rows computed right."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments import collect as C
from experiments.grid import Context
from experiments.logs import is_finished, summarize, val_curve
from experiments.run import target_module
from tests.experiments.synthetic import write_run


def ctx_for(tmp_path: Path, seeds=(1, 2)) -> Context:
    return Context(scale="smoke", seeds=list(seeds), runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                   launcher="inprocess")


def run_dir(ctx: Context, target: str, setting: str, variant: str, seed: int) -> Path:
    return ctx.runs_root / target / ctx.scale / setting / variant / f"seed{seed}"


def by(rows, **kw):
    out = [r for r in rows if all(r[k] == v for k, v in kw.items())]
    assert len(out) == 1, (kw, out)
    return out[0]


def test_summary_of_a_run(tmp_path):
    d = write_run(tmp_path / "r", step_times=[1.0, 2.0, 3.0], acc_before=0.2, acc_after=0.6, ood={"total": 0.3},
                  n=[8, 8, 6], kept_fraction=[1.0, 0.5, 0.5], val={2: 0.4})
    s = summarize(d)
    assert s.steps == 3 and s.train_time_s == 6.0 and s.acc_before == 0.2 and s.acc_after == 0.6
    assert s.ood == {"total": 0.3} and math.isclose(s.avg_acc, 0.45)
    assert math.isclose(s.kept_fraction, (32 + 16 + 12) / (32 + 32 + 24))
    assert math.isclose(s.mean_n, 22 / 3) and s.tokens_generated == 880
    assert val_curve([json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]) == [(0, 0.2), (2, 0.4), (3, 0.6)]


def test_how_often_n_moved_is_counted_per_run_and_shown_in_table1_and_table2(tmp_path):
    """ARS that never acts makes the ARS comparisons empty: each run says how often n moved."""
    ns = [8, 8, 7, 7, 8, 6]
    s = summarize(write_run(tmp_path / "r", step_times=[1.0] * len(ns), n=ns))
    assert s.n_changes == sum(a != b for a, b in zip(ns, ns[1:]))
    assert summarize(write_run(tmp_path / "flat", step_times=[1.0] * 3, n=[8] * 3)).n_changes == 0
    assert C.run_metrics(s)["n_changes"] == s.n_changes
    for target in ("table1", "table2"):
        assert "n_changes" in target_module(target).metrics, target


def test_an_unfinished_run_is_not_summarized(tmp_path):
    d = write_run(tmp_path / "r", step_times=[1.0], finished=False)
    assert not is_finished(d)
    with pytest.raises(ValueError, match="not finished"):
        summarize(d)


def test_table1_rows(tmp_path):
    T = target_module("table1")

    ctx = ctx_for(tmp_path)
    setting = "geometry3k-vl_7b"
    grpo = {1: ([2.0, 2.0], 0.40, 0.20), 2: ([3.0, 3.0], 0.50, 0.30)}
    fast = {1: ([1.0, 1.0], 0.46, 0.22), 2: ([1.0, 2.0], 0.52, 0.34)}
    for seed in (1, 2):
        for variant, table in (("grpo", grpo), ("fastrl", fast)):
            t, acc, ood = table[seed]
            write_run(run_dir(ctx, "table1", setting, variant, seed), step_times=t, acc_after=acc, ood={"total": ood})
    write_run(run_dir(ctx, "table1", setting, "cppo", 1), step_times=[1.0, 1.0], acc_after=0.3, ood={"total": 0.1})
    write_run(run_dir(ctx, "table1", setting, "cppo", 2), step_times=[1.0], finished=False)
    csv_path, md_path = T.collect(ctx)
    rows = C.read_rows(csv_path)
    # the paper's numbers are there, as paper rows
    assert by(rows, source="paper", method="fastrl", metric="speedup_vs_grpo_max", dataset="Geometry3K")["value"] == "2.14"
    m = dict(source="measured", dataset="Geometry3K", model="Qwen2.5-VL-7B-Instruct")
    acc = by(rows, **m, method="fastrl", metric="in_domain_acc")
    assert math.isclose(float(acc["value"]), 49.0) and math.isclose(float(acc["std"]), float(np.std([46, 52], ddof=1)))
    assert acc["seeds"] == "1 2" and acc["n_seeds"] == "2" and acc["scale"] == "smoke"
    assert str(run_dir(ctx, "table1", setting, "fastrl", 1)) in acc["run_dirs"]
    sp = by(rows, **m, method="fastrl", metric="speedup_vs_grpo")
    assert math.isclose(float(sp["value"]), np.mean([4 / 2, 6 / 3]))  # paired by seed
    assert math.isclose(float(by(rows, **m, method="grpo", metric="speedup_vs_grpo")["value"]), 1.0)
    avg = by(rows, **m, method="fastrl", metric="avg_acc")
    assert math.isclose(float(avg["value"]), np.mean([(46 + 22) / 2, (52 + 34) / 2]))
    gain = by(rows, **m, method="fastrl", metric="avg_acc_gain")
    assert math.isclose(float(gain["value"]), float(avg["value"]) - np.mean([(40 + 20) / 2, (50 + 30) / 2]))
    assert by(rows, **m, method="fastrl", metric="ood/total")["unit"] == "%"
    best = by(rows, source="measured", method="fastrl", metric="speedup_vs_grpo_max", dataset="Geometry3K")
    assert best["model"] == "" and math.isclose(float(best["value"]), float(sp["value"]))
    # cppo: only seed 1 finished; no std, and the note says so
    c = by(rows, **m, method="cppo", metric="in_domain_acc")
    assert c["n_seeds"] == "1" and c["std"] == "" and "seeds [2] not finished" in c["note"]
    md = md_path.read_text()
    assert "| paper |" in md and "| measured |" in md and C.MISSING in md and "49.00 ± 4.24" in md


def test_table2_delta_and_table3_rename(tmp_path):
    T2 = target_module("table2")
    T3 = target_module("table3")

    ctx = ctx_for(tmp_path, seeds=(1,))
    s = "geoqa8k-vl_7b"
    write_run(run_dir(ctx, "table1", s, "grpo", 1), step_times=[4.0], acc_after=0.4, ood={"default": 0.2})
    write_run(run_dir(ctx, "table1", s, "fastrl", 1), step_times=[2.0], acc_after=0.5, ood={"default": 0.3})
    write_run(run_dir(ctx, "table2", s, "fastrl_no_mdap", 1), step_times=[3.0], acc_after=0.45, ood={"default": 0.25})
    rows = C.read_rows(T2.collect(ctx)[0])
    d = by(rows, source="measured", method="fastrl_no_mdap", metric="avg_acc_delta_vs_fastrl")
    assert math.isclose(float(d["value"]), 35.0 - 40.0)
    assert by(rows, source="paper", method="fastrl_no_mdap", metric="avg_acc_delta_vs_fastrl",
              dataset="GeoQA8K-R1V")["value"] == "-1.21"
    assert math.isclose(float(by(rows, source="measured", method="fastrl_no_mdap", metric="speedup_vs_grpo")["value"]), 4 / 3)
    m = "math12k-llama_8b"
    write_run(run_dir(ctx, "table3", m, "grpo", 1), step_times=[1.0], acc_after=0.5, ood={"long": 0.1})
    rows = C.read_rows(T3.collect(ctx)[0])
    assert math.isclose(float(by(rows, source="measured", method="grpo", metric="aime_avg")["value"]), 10.0)
    assert by(rows, source="paper", method="grpo", metric="aime_avg")["value"] == "7.5"


def test_table4_reads_the_k16_evaluations(tmp_path):
    from experiments.table4 import target as T4

    ctx = ctx_for(tmp_path, seeds=(1,))
    s = "geometry3k-vl_7b"
    for variant, (a, p) in {"grpo": (0.30, 0.60), "fastrl": (0.35, 0.70)}.items():
        d = write_run(run_dir(ctx, "table1", s, variant, 1), step_times=[1.0])
        for bench in ("mini-geo:default", "mini-geo:total"):
            out = d / "eval_k16" / bench.replace(":", "_")
            out.mkdir(parents=True)
            (out / "eval.json").write_text(json.dumps({"benchmarks": {bench: {"accuracy": a, "avg@16": a, "pass@16": p}}}))
    rows = C.read_rows(T4.collect(ctx)[0])
    f = dict(source="measured", method="fastrl")
    assert math.isclose(float(by(rows, **f, metric="avg_at_16")["value"]), 35.0)
    assert math.isclose(float(by(rows, **f, metric="pass@16/mini-geo:total")["value"]), 70.0)
    assert math.isclose(float(by(rows, **f, metric="avg_at_16_gain_vs_grpo")["value"]), 5.0)


def test_lag_speedup_to_grpo_peak(tmp_path):
    from experiments.lag import target as L

    ctx = ctx_for(tmp_path, seeds=(1,))
    s = "geometry3k-vl_7b"
    # GRPO peaks at 0.5 at step 4 (after 8 s); FastRL reaches 0.5 at step 2 (after 2 s)
    write_run(run_dir(ctx, "lag", s, "grpo_lag4", 1), step_times=[2.0] * 4, acc_before=0.1, val={2: 0.3, 4: 0.5},
              acc_after=0.5, entropy=[1.0, 1.2, 1.5, 2.0])
    write_run(run_dir(ctx, "lag", s, "fastrl_lag4", 1), step_times=[1.0] * 4, acc_before=0.1, val={2: 0.5},
              acc_after=0.45, entropy=[1.0, 1.0, 0.9, 0.9])
    rows = C.read_rows(L.collect(ctx)[0])
    f = dict(source="measured", method="fastrl_lag4")
    assert math.isclose(float(by(rows, **f, metric="speedup_to_grpo_peak")["value"]), 8.0 / 2.0)
    assert math.isclose(float(by(rows, **f, metric="speedup_vs_grpo")["value"]), 2.0)
    assert math.isclose(float(by(rows, **f, metric="peak_acc")["value"]), 50.0)
    assert math.isclose(float(by(rows, source="measured", method="grpo_lag4", metric="entropy_max")["value"]), 2.0)
    assert by(rows, source="paper", method="fastrl_lag4", metric="speedup_vs_grpo")["value"] == "2.9"
    # paired against GRPO at the same lag; one seed: a mean, no interval
    d = by(rows, **f, metric="d_final_acc_vs_grpo")
    assert math.isclose(float(d["value"]), -5.0) and d["ci95_low"] == "n/a" and "grpo_lag4" in d["note"]
    assert math.isclose(float(by(rows, **f, metric="speedup_vs_grpo_ci95")["value"]), 2.0)


def test_table8_rows_from_mini_box_runs(tmp_path):
    """Table 8 at smoke: mini-box stands in for RefCOCO; mean IoU is the accuracy, no skip notice."""
    T8 = target_module("table8")

    ctx = ctx_for(tmp_path, seeds=(1,))
    setting = "refcoco-qwen35_9b"
    write_run(run_dir(ctx, "table8", setting, "grpo", 1), step_times=[2.0, 2.0], acc_after=0.30)
    write_run(run_dir(ctx, "table8", setting, "fastrl", 1), step_times=[1.0, 1.0], acc_after=0.32,
              kept_fraction=[0.5, 0.5])
    csv_path, md_path = T8.collect(ctx)
    rows = C.read_rows(csv_path)
    m = dict(source="measured", dataset="RefCOCO (grounding)")
    assert math.isclose(float(by(rows, **m, method="fastrl", metric="in_domain_acc")["value"]), 32.0)
    assert math.isclose(float(by(rows, **m, method="fastrl", metric="speedup_vs_grpo")["value"]), 2.0)
    assert math.isclose(float(by(rows, **m, method="fastrl", metric="kept_fraction")["value"]), 0.5)
    assert by(rows, source="paper", method="fastrl", metric="speedup_vs_grpo")["value"] == "1.76"
    md = md_path.read_text()
    assert "Not measured" not in md and "mini-box" in md


def test_mean_std():
    assert C.mean_std([1.0]) == (1.0, None)
    m, s = C.mean_std([1.0, 3.0])
    assert m == 2.0 and math.isclose(s, math.sqrt(2))
    with pytest.raises(ValueError):
        C.mean_std([])


def test_table1_paired_differences_with_t_intervals(tmp_path):
    """Paired by seed against GRPO, with 95 % t-intervals computed by hand (df = 2, t = 4.302653)."""
    T = target_module("table1")
    from experiments.stats import row_verdict

    t2 = 4.302653
    ctx = ctx_for(tmp_path, seeds=(1, 2, 3))
    setting = "geoqa8k-vl_3b"
    grpo = {1: ([4.0], 0.40, 0.20), 2: ([6.0], 0.50, 0.30), 3: ([5.0], 0.45, 0.25)}
    fast = {1: ([2.0], 0.41, 0.22), 2: ([2.0], 0.52, 0.30), 3: ([2.5], 0.48, 0.28)}
    for variant, table in (("grpo", grpo), ("fastrl", fast)):
        for seed, (t, acc, ood) in table.items():
            write_run(run_dir(ctx, "table1", setting, variant, seed), step_times=t, acc_after=acc, ood={"default": ood})
    write_run(run_dir(ctx, "table1", setting, "cppo", 1), step_times=[1.0], acc_after=0.3, ood={"default": 0.1})
    csv_path, md_path = T.collect(ctx)
    rows = C.read_rows(csv_path)
    m = dict(source="measured", dataset="GeoQA8K-R1V", model="Qwen2.5-VL-3B-Instruct")

    # in-domain: differences 1, 2, 3 points -> mean 2, s = 1, half width t * 1 / sqrt(3)
    d = by(rows, **m, method="fastrl", metric="d_in_domain_acc_vs_grpo")
    half = t2 / math.sqrt(3)
    assert math.isclose(float(d["value"]), 2.0) and math.isclose(float(d["std"]), 1.0)
    assert abs(float(d["ci95_low"]) - (2 - half)) < 1e-5 and abs(float(d["ci95_high"]) - (2 + half)) < 1e-5
    assert d["unit"] == "points" and d["n_seeds"] == "3" and d["seeds"] == "1 2 3"
    assert row_verdict(d, "+") == "inconclusive"
    # average (in-domain + OOD) / 2: differences 1.5, 1.0, 3.0 -> mean 11/6, s^2 = 13/12
    a = by(rows, **m, method="fastrl", metric="d_avg_acc_vs_grpo")
    half = t2 * math.sqrt(13 / 12) / math.sqrt(3)
    assert math.isclose(float(a["value"]), 11 / 6)
    assert abs(float(a["ci95_low"]) - (11 / 6 - half)) < 1e-5 and abs(float(a["ci95_high"]) - (11 / 6 + half)) < 1e-5
    o = by(rows, **m, method="fastrl", metric="d_ood_avg_vs_grpo")
    assert math.isclose(float(o["value"]), 5 / 3)
    # speedup: ratios 2, 3, 2 -> mean 7/3, s = 1/sqrt(3), half = t / 3: [0.899, 3.768] includes 1
    s = by(rows, **m, method="fastrl", metric="speedup_vs_grpo_ci95")
    assert math.isclose(float(s["value"]), 7 / 3)
    assert math.isclose(float(s["value"]), float(by(rows, **m, method="fastrl", metric="speedup_vs_grpo")["value"]))
    assert abs(float(s["ci95_low"]) - (7 / 3 - t2 / 3)) < 1e-5 and abs(float(s["ci95_high"]) - (7 / 3 + t2 / 3)) < 1e-5
    assert s["unit"] == "x" and row_verdict(s, "+") == "inconclusive"
    # GRPO is not compared with itself; a single paired seed has a mean but no interval
    assert not [r for r in rows if r["method"] == "grpo" and r["metric"].startswith("d_")]
    c = by(rows, **m, method="cppo", metric="d_in_domain_acc_vs_grpo")
    assert math.isclose(float(c["value"]), -10.0) and c["ci95_low"] == "n/a" and c["ci95_high"] == "n/a"
    assert c["n_seeds"] == "1" and "seeds [2, 3] not paired" in c["note"]
    # ordinary rows carry no interval
    assert by(rows, **m, method="fastrl", metric="avg_acc")["ci95_low"] == ""
    md = md_path.read_text()
    assert "d_in_domain_acc_vs_grpo (points)" in md and "speedup_vs_grpo_ci95" in md
    assert "+2.0 [-0.5, +4.5]" in md and "2.33 [0.90, 3.77]x" in md and "-10.0 [n/a]" in md
    assert "95 % Student-t interval" in md


def test_table2_is_paired_against_grpo_and_fastrl(tmp_path):
    T2 = target_module("table2")

    ctx = ctx_for(tmp_path, seeds=(1, 2))
    s = "geometry3k-vl_7b"
    for seed, (g, f, n) in {1: (0.40, 0.50, 0.45), 2: (0.44, 0.52, 0.47)}.items():
        write_run(run_dir(ctx, "table1", s, "grpo", seed), step_times=[4.0], acc_after=g, ood={"total": 0.2})
        write_run(run_dir(ctx, "table1", s, "fastrl", seed), step_times=[2.0], acc_after=f, ood={"total": 0.2})
        write_run(run_dir(ctx, "table2", s, "fastrl_no_mdap", seed), step_times=[3.0], acc_after=n, ood={"total": 0.2})
    rows = C.read_rows(T2.collect(ctx)[0])
    f = dict(source="measured", method="fastrl_no_mdap")
    vs_fastrl = by(rows, **f, metric="d_in_domain_acc_vs_fastrl")
    assert math.isclose(float(vs_fastrl["value"]), -5.0) and math.isclose(float(vs_fastrl["ci95_low"]), -5.0)
    assert math.isclose(float(by(rows, **f, metric="d_in_domain_acc_vs_grpo")["value"]), 4.0)
    # the speedup interval only against the table's baseline
    assert by(rows, **f, metric="speedup_vs_grpo_ci95") and not [r for r in rows if r["metric"] == "speedup_vs_fastrl_ci95"]


def test_a_run_without_validation_is_named_not_a_key_error(tmp_path):
    import json

    import pytest

    from experiments.logs import summarize

    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "timing_s/step": 1.0}) + "\n"
                                            + json.dumps({"step": 1, "phase": "val_final"}) + "\n")
    with pytest.raises(ValueError, match="no validation set"):
        summarize(tmp_path)


def test_table1_shows_what_rl_moved_over_the_warm_start_with_an_interval(tmp_path):
    """Room to learn (DESIGN §8) is GRPO's in-domain gain over the warm start, per seed with a 95 %
    t-interval: gains 10, 20, 30 points -> mean 20, s = 10, half width t(2) * 10 / sqrt(3)."""
    T = target_module("table1")
    assert "in_domain_gain" in T.metrics
    ctx = ctx_for(tmp_path, seeds=(1, 2, 3))
    for seed, (before, after) in {1: (0.30, 0.40), 2: (0.30, 0.50), 3: (0.35, 0.65)}.items():
        write_run(run_dir(ctx, "table1", "geometry3k-vl_3b", "grpo", seed), step_times=[1.0], acc_before=before,
                  acc_after=after, ood={"total": 0.1})
    write_run(run_dir(ctx, "table1", "geometry3k-vl_3b", "fastrl", 1), step_times=[1.0], acc_before=0.30,
              acc_after=0.45, ood={"total": 0.1})  # one seed: a mean, no interval
    csv_path, md_path = T.collect(ctx)
    rows = C.read_rows(csv_path)
    g = by(rows, source="measured", method="grpo", metric="in_domain_gain")
    half = 4.302653 * 10 / math.sqrt(3)
    assert math.isclose(float(g["value"]), 20.0) and math.isclose(float(g["std"]), 10.0)
    assert abs(float(g["ci95_low"]) - (20 - half)) < 1e-5 and abs(float(g["ci95_high"]) - (20 + half)) < 1e-5
    assert g["unit"] == "points" and g["seeds"] == "1 2 3"
    f = by(rows, source="measured", method="fastrl", metric="in_domain_gain")
    assert math.isclose(float(f["value"]), 15.0) and f["ci95_low"] == "n/a"
    assert "in_domain_gain (points)" in md_path.read_text() and "+20.0 [-4.8, +44.8]" in md_path.read_text()


def test_stand_in_list_names_only_per_setting_rows() -> None:
    """A per-dataset summary row (no model, e.g. FastRL's max speedup) listed a stand-in line with an
    empty model and some run's tiny model beside it."""
    common = dict(target="table1", source="measured", method="fastrl", dataset="Geometry3K", scale="mini",
                  seeds="1 2", data_used="mini-geo (default)")
    rows = [C.Row(**common, model="Qwen2.5-VL-3B-Instruct", metric="avg_acc", value=90.0,
                  model_used="tiny Qwen2.5-VL (2 layers, hidden 128)"),
            C.Row(**common, model="", metric="speedup_vs_grpo_max", value=1.5,
                  model_used="tiny Qwen2.5-VL (3 layers, hidden 192)")]
    md = C.markdown("Table 1", rows, ["avg_acc", "speedup_vs_grpo_max"])
    stand_ins = [line for line in md.splitlines() if line.startswith("- Geometry3K →")]
    assert stand_ins == ["- Geometry3K → mini-geo (default); Qwen2.5-VL-3B-Instruct → tiny Qwen2.5-VL (2 layers, hidden 128)"]


def test_run_averages_do_not_depend_on_the_order_of_the_ood_benchmarks():
    """A live run lists OOD benchmarks in config order, its metadata in name order; Table 8's
    live-collected avg_acc std differed from its rebuild in the 15th digit until both summed by name."""
    from experiments.logs import RunSummary

    def run(ood: dict[str, float]) -> RunSummary:
        return RunSummary(run_dir=Path("r"), steps=1, train_time_s=1.0, acc_before=None, acc_after=0.7838, ood=ood,
                          tokens_generated=0.0, tokens_trained=0.0, kept_fraction=1.0, mean_n=8.0)

    # mean(0.7838, 0.4766, 0.3033) != mean(0.7838, 0.3033, 0.4766) in the last digit
    config_order, name_order = run({"small": 0.4766, "green": 0.3033}), run({"green": 0.3033, "small": 0.4766})
    assert config_order.avg_acc == name_order.avg_acc
    assert config_order.ood_avg == name_order.ood_avg
