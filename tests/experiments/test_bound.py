"""The token bound: what a method's run would take if each stage of GRPO's same-seed run scaled
with the tokens it processes (fastrl.training.token_bound, experiments.collect.bound_rows), on known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments import collect as C
from experiments import export as E
from experiments.grid import Context, paired_order
from experiments.logs import summarize
from experiments.run import target_module
from experiments.stats import t_interval
from fastrl.training.token_bound import token_bound
from tests.experiments.synthetic import write_run


def test_token_bound_scales_each_stage_by_the_tokens_it_sees():
    ref = {"gen": 6.0, "reward": 1.0, "adv": 0.0, "prune": 0.0, "old_log_prob": 1.0, "ref": 1.0,
           "update_actor": 4.0, "update_weights": 0.0, "step": 14.0}  # 1 s untimed
    # half the tokens generated, a quarter trained: (6 + 1) / 2 + (1 + 1 + 4) / 4 + 1
    assert math.isclose(token_bound(ref, (1000.0, 1000.0), (500.0, 250.0)), 6.0)
    # the same token counts: the bound is the reference's own time
    assert math.isclose(token_bound(ref, (1000.0, 800.0), (1000.0, 800.0)), 14.0)
    with pytest.raises(ValueError, match="positive"):
        token_bound(ref, (0.0, 1.0), (1.0, 1.0))


def ctx_for(tmp_path, seeds=(1, 2)) -> Context:
    return Context(scale="smoke", seeds=list(seeds), runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                   launcher="inprocess")


def by(rows, **kw):
    out = [r for r in rows if all(r[k] == v for k, v in kw.items())]
    assert len(out) == 1, (kw, out)
    return out[0]


def test_table1_has_the_bound_paired_by_seed(tmp_path):
    """GRPO: gen 60 % and update 30 % of each step, 10 % untimed; FastRL trains a quarter of the
    tokens it generates (the same as GRPO's), so its bound per seed is
    0.6 T + 0.3 T / 4 + 0.1 T with T = GRPO's time of that seed."""
    ctx = ctx_for(tmp_path)
    setting = "geometry3k-vl_7b"
    grpo_times = {1: [2.0, 2.0], 2: [3.0, 3.0]}
    fast_times = {1: [1.0, 1.5], 2: [2.0, 2.0]}
    for seed in (1, 2):
        for variant, times, kept, cpu in (("grpo", grpo_times, 1.0, 0.5), ("fastrl", fast_times, 0.25, 0.8)):
            write_run(ctx.runs_root / "table1" / "smoke" / setting / variant / f"seed{seed}", step_times=times[seed],
                      kept_fraction=[kept] * 2, ood={"total": 0.2}, cpu_per_wall=cpu)
    csv_path, md_path = target_module("table1").collect(ctx)
    rows = C.read_rows(csv_path)
    m = dict(source="measured", dataset="Geometry3K", model="Qwen2.5-VL-7B-Instruct", method="fastrl")
    bound = {k: (0.6 + 0.3 / 4 + 0.1) * sum(grpo_times[k]) for k in (1, 2)}
    eff = [bound[k] / sum(fast_times[k]) for k in (1, 2)]
    row = by(rows, **m, metric="bound_s")
    assert math.isclose(float(row["value"]), np.mean(list(bound.values()))) and row["unit"] == "s"
    e = by(rows, **m, metric="bound_efficiency")
    iv = t_interval(eff)
    assert math.isclose(float(e["value"]), iv.mean)
    assert math.isclose(float(e["ci95_low"]), iv.low) and math.isclose(float(e["ci95_high"]), iv.high)
    # CPU seconds: GRPO's 0.5 s per wall second scaled the same way, over FastRL's 0.8
    cpu = by(rows, **m, metric="bound_cpu_efficiency")
    assert math.isclose(float(cpu["value"]), np.mean([0.5 * bound[k] / (0.8 * sum(fast_times[k])) for k in (1, 2)]))
    # the baseline has no bound against itself
    assert not [r for r in rows if r["method"] == "grpo" and r["metric"].startswith("bound_")]
    md = md_path.read_text()
    assert "| bound_s (s) | bound_efficiency |" in md and f"{iv.mean:.2f} [{iv.low:.2f}, {iv.high:.2f}] |" in md
    assert "`bound_efficiency` = bound_s / measured training time" in md


def test_no_cpu_bound_without_per_stage_cpu_seconds(tmp_path):
    ctx = ctx_for(tmp_path, seeds=(1,))
    for variant, kept in (("grpo", 1.0), ("fastrl", 0.5)):
        write_run(ctx.runs_root / "table1" / "smoke" / "geoqa8k-vl_3b" / variant / "seed1", step_times=[1.0],
                  kept_fraction=[kept], ood={"default": 0.2})
    rows = C.read_rows(target_module("table1").collect(ctx)[0])
    metrics = {r["metric"] for r in rows if r["method"] == "fastrl"}
    assert {"bound_s", "bound_efficiency"} <= metrics and not {"bound_cpu_s", "bound_cpu_efficiency"} & metrics
    # one seed: a mean, no interval
    assert by(rows, source="measured", method="fastrl", metric="bound_efficiency")["ci95_low"] == "n/a"


def test_lag_has_the_bound_against_grpo_at_the_same_lag(tmp_path):
    from experiments.lag import target as L

    ctx = ctx_for(tmp_path, seeds=(1,))
    s = "geometry3k-vl_7b"
    for variant, kept in (("grpo_lag4", 1.0), ("fastrl_lag4", 0.25)):
        write_run(ctx.runs_root / "lag" / "smoke" / s / variant / "seed1", step_times=[2.0] * 2, kept_fraction=[kept] * 2,
                  val={1: 0.3})
    rows = C.read_rows(L.collect(ctx)[0])
    e = by(rows, source="measured", method="fastrl_lag4", metric="bound_efficiency")
    assert math.isclose(float(e["value"]), (0.6 + 0.3 / 4 + 0.1) * 4.0 / 4.0)


def test_per_stage_cpu_seconds_survive_the_metadata_round_trip(tmp_path):
    d = write_run(tmp_path / "r", step_times=[1.0, 3.0], cpu_per_wall=0.5)
    s = summarize(d)
    assert math.isclose(s.cpu["gen"], 0.5 * 0.6 * 4.0) and math.isclose(s.cpu["step"], 2.0)
    record = {"run_dir": str(d), "summary": {"steps": s.steps, "train_time_s": s.train_time_s, "acc_before": None,
                                             "acc_after": s.acc_after, "ood": {}, "tokens_generated": 1.0,
                                             "tokens_trained": 1.0, "kept_fraction": 1.0, "mean_n": 4.0,
                                             "timing_s": s.timing, "train_cpu_s": s.train_cpu_s, "cpu_s": s.cpu}}
    assert E.summary_from_record(record).cpu == s.cpu
    del record["summary"]["cpu_s"]  # a record written before per-stage CPU seconds were kept
    assert E.summary_from_record(record).cpu == {}


def test_paired_order_leaves_a_listed_paired_metric_where_it_is_listed():
    row = C.Row(target="t", source="measured", method="fastrl", dataset="d", model="m", metric="bound_efficiency",
                value=0.8, ci95_low=0.7, ci95_high=0.9)
    diff = C.Row(**{**row.__dict__, "metric": "d_avg_acc_vs_grpo"})
    assert paired_order([row, diff], already=["bound_efficiency"]) == ["d_avg_acc_vs_grpo"]


def test_paired_order_puts_an_unlisted_bound_last():
    row = C.Row(target="t", source="measured", method="fastrl", dataset="d", model="m", metric="bound_efficiency",
                value=0.8, ci95_low=0.7, ci95_high=0.9)
    rows = [row, *(C.Row(**{**row.__dict__, "metric": m}) for m in ("speedup_vs_grpo_ci95", "d_avg_acc_vs_grpo"))]
    assert paired_order(rows) == ["d_avg_acc_vs_grpo", "speedup_vs_grpo_ci95", "bound_efficiency"]


def _record(variant: str, seed: int, timing: dict[str, float], cpu: float, generated: float, trained: float) -> dict:
    return {"dataset": "geometry3k", "model": "vl_3b", "variant": variant, "seed": seed,
            "summary": {"timing_s": timing, "train_cpu_s": cpu, "tokens_generated": generated, "tokens_trained": trained}}


def test_stage_gaps_put_the_excess_on_its_stage():
    from experiments.bound import report, stage_gaps

    records = [_record("grpo", 1, {"gen": 6.0, "update_actor": 4.0, "step": 12.0}, 6.0, 100.0, 100.0),
               _record("fastrl", 1, {"gen": 6.0, "update_actor": 2.0, "step": 10.0}, 10.0, 100.0, 25.0),
               _record("fastrl", 2, {"gen": 1.0, "step": 1.0}, 1.0, 1.0, 1.0)]  # no GRPO seed 2: not paired
    (wall,) = stage_gaps(records, "fastrl", measure="wall")
    assert wall.seeds == [1] and wall.measured["update_actor"] == 2.0 and wall.share["update_actor"] == 1.0
    assert math.isclose(wall.share["rest"], 2.0) and math.isclose(wall.efficiency, (6 + 1 + 2) / 10)
    # cpu~: GRPO ran at 0.5 CPU s per wall second, FastRL at 1.0
    (cpu,) = stage_gaps(records, "fastrl", measure="cpu~")
    assert math.isclose(cpu.efficiency, (3 + 0.5 + 1) / 10) and cpu.cpu_per_wall == (1.0, 0.5)
    assert "update_actor   measured    2.00   token share    1.00   excess   +1.00" in report([wall], "fastrl", "grpo", "wall")


def test_the_demo_summary_has_the_bound_of_every_method_but_grpo():
    from fastrl.demo import add_token_bounds, format_table

    stages = {"gen": 6.0, "reward": 0.0, "adv": 0.0, "prune": 0.0, "old_log_prob": 1.0, "ref": 1.0,
              "update_actor": 2.0, "update_weights": 0.0, "step": 10.0}
    common = {"steps": 2, "cpu_s": 5.0, "acc_before": 0.5, "acc_after": 0.5, "acc_after_se": 0.01, "kept_fraction": 1.0,
              "n_per_step": [8, 8],
              "val_curve": []}
    methods = {"grpo": {**common, "wall_s": 10.0, "timing_s": stages, "tokens_generated": 100.0, "tokens_trained": 100.0},
               "fastrl": {**common, "wall_s": 8.0, "timing_s": stages, "tokens_generated": 100.0, "tokens_trained": 25.0}}
    add_token_bounds(methods)
    assert "bound_s" not in methods["grpo"]
    assert math.isclose(methods["fastrl"]["bound_s"], 6.0 + 4.0 / 4 + 0.0)
    assert math.isclose(methods["fastrl"]["bound_efficiency"], 7.0 / 8.0)
    assert "| token-bound efficiency (GRPO's time per token / this) | 1.00 | 0.88 |" in format_table(methods)


def test_the_stage_report_reads_the_committed_table1_metadata(capsys):
    from experiments.bound import main

    assert main(["table1", "--method", "fastrl"]) == 0
    out = capsys.readouterr().out
    assert out.count("(fastrl vs grpo, seeds [1, 2, 3, 4, 5], cpu~ seconds)") == 4 and "update_actor" in out


def test_the_update_call_table_groups_forwards_by_rows():
    import importlib.util

    from experiments.collect import REPO_ROOT

    spec = importlib.util.spec_from_file_location("update_calls", REPO_ROOT / "bench" / "update_calls.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls = [{"kind": "forward rows=4 width=80", "cpu_s": 0.010}, {"kind": "forward rows=4 width=90", "cpu_s": 0.012},
             {"kind": "optimizer_step", "cpu_s": 0.004}]
    lines = mod.table(calls).splitlines()
    assert lines[0].split() == ["forward", "rows=4", "calls", "2", "total", "0.022", "s", "per", "call", "11.00", "ms"]
    assert lines[1].startswith("optimizer_step") and "4.00 ms" in lines[1]


def test_the_stage_report_of_two_run_directories_in_cpu_seconds(tmp_path, capsys):
    from experiments.bound import main

    ref = write_run(tmp_path / "grpo", step_times=[2.0, 2.0], cpu_per_wall=0.5)
    run = write_run(tmp_path / "fastrl", step_times=[1.0, 1.0], kept_fraction=[0.25, 0.25], cpu_per_wall=1.0)
    assert main(["--runs", str(ref), str(run), "--measure", "cpu"]) == 0
    out = capsys.readouterr().out
    # GRPO's 2 CPU s: gen 1.2, update 0.6, rest 0.2 -> share 1.2 + 0.15 + 0.2; FastRL measured 2 CPU s
    assert "measured 2.0, bound 1.6, efficiency 0.78" in out
    with pytest.raises(ValueError, match="cpu~"):
        from experiments.bound import stage_gaps
        stage_gaps([_record("grpo", 1, {"step": 1.0}, 1.0, 1.0, 1.0), _record("fastrl", 1, {"step": 1.0}, 1.0, 1.0, 1.0)],
                   "fastrl", measure="cpu")
