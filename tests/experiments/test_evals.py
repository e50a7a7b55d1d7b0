"""experiments.evals: a run's evaluations go to one ``fastrl eval`` process (issue 17, item 5)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import experiments.evals as E
from experiments.grid import Context
from experiments.spec import OODBenchmark, RunSpec
from experiments.table4 import target as table4
from fastrl.cli import build_parser

from tests.experiments.synthetic import write_run


def _run(root: Path, name: str, *, scale: str = "mini", files: bool = False, ood=()) -> RunSpec:
    run_dir = root / name
    write_run(run_dir, step_times=[1.0, 1.0])
    data = ({"task": "files", "val_files": ["data/geo3k_val.parquet"], "template": "fastrl_math", "reward": "math"}
            if files else {"task": "mini-geo", "variant": "default", "ood_variants": ["total"],
                           "template": "fastrl_math", "reward": "math"})
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"data": data, "rollout": {"max_new_tokens": 40},
                                                       "trainer": {"torch_threads": 1}}))
    return RunSpec(target="table4", group="table1", scale=scale, dataset="geometry3k", model="vl_7b", variant=name,
                   seed=1, config="methods/grpo.yaml", overrides=(), run_dir=run_dir, ood=tuple(ood))


def test_a_runs_benchmarks_form_one_group_whose_argv_fastrl_eval_accepts(tmp_path):
    spec = _run(tmp_path, "grpo")
    jobs = E.eval_jobs(spec, k=16, subdir="eval_k16", include_in_domain=True)
    [group] = E.eval_groups(jobs)
    assert [j.name for j in group.jobs] == ["mini-geo:default", "mini-geo:total"]
    argv = group.argv()
    args = build_parser().parse_args(argv)
    assert args.benchmark == ["mini-geo:default", "mini-geo:total"] and args.out_per_benchmark
    assert Path(args.out) == spec.run_dir / "eval_k16" and args.k == 16 and args.sampling == "paper"
    assert args.batch_size == E.EVAL_BATCH_SIZE and args.threads == 1
    assert args.benchmark_template == [] and args.benchmark_reward == []
    # a finished benchmark is not evaluated again; nothing pending: no group
    (jobs[0].out_dir).mkdir(parents=True)
    (jobs[0].out_dir / "eval.json").write_text("{}")
    [rest] = E.eval_groups(jobs)
    assert [j.name for j in rest.jobs] == ["mini-geo:total"]
    (jobs[1].out_dir).mkdir(parents=True)
    (jobs[1].out_dir / "eval.json").write_text("{}")
    assert E.eval_groups(jobs) == []


def test_benchmarks_with_their_own_template_and_reward_share_the_process(tmp_path):
    ood = (OODBenchmark("MathVista", "data/mathvista.parquet", "fastrl_mc", "mc"),
           OODBenchmark("AIME", "data/aime.parquet", "fastrl_math", "math"))
    spec = _run(tmp_path, "grpo", scale="paper", files=True, ood=ood)
    [group] = E.eval_groups(E.eval_jobs(spec, k=1, subdir="eval", include_in_domain=True))
    args = build_parser().parse_args(group.argv())
    assert args.benchmark == ["geo3k_val=data/geo3k_val.parquet", "MathVista=data/mathvista.parquet",
                              "AIME=data/aime.parquet"]
    assert args.template == "fastrl_math" and args.reward == "math" and args.engine == "vllm"
    assert args.benchmark_template == ["MathVista=fastrl_mc"] and args.benchmark_reward == ["MathVista=mc"]


def test_table4_post_runs_one_process_per_run(tmp_path, monkeypatch):
    runs = [_run(tmp_path, v) for v in ("grpo", "fastrl", "dapo")]
    unfinished = _run(tmp_path, "cppo")
    (unfinished.run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    calls: list[list[str]] = []

    def fake_run(cmd, *a, **kw):
        calls.append(cmd)
        args = build_parser().parse_args(cmd[3:])  # [python, -m, fastrl.cli, eval, ...]
        for b in args.benchmark:
            out = Path(args.out) / E.safe_name(b)
            out.mkdir(parents=True)
            (out / "eval.json").write_text(json.dumps({"benchmarks": {b: {"avg@16": 0.5, "pass@16": 0.9}}}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(E.subprocess, "run", fake_run)
    ctx = Context(scale="mini", seeds=[1], runs_root=tmp_path, out_dir=tmp_path / "out", launcher="subprocess")
    table4.post(ctx, [*runs, unfinished])
    assert len(calls) == len(runs)
    assert [Path(c[c.index("--model") + 1]) for c in calls] == [r.run_dir for r in runs]
    table4.post(ctx, runs)  # everything evaluated: nothing runs again
    assert len(calls) == len(runs)


def test_an_out_dir_that_one_process_would_not_write_is_refused(tmp_path):
    spec = _run(tmp_path, "grpo")
    job = E.eval_jobs(spec, k=16, subdir="eval_k16", include_in_domain=True)[0]
    moved = E.EvalJob(**{**job.__dict__, "out_dir": job.out_dir.parent / "elsewhere"})
    with pytest.raises(ValueError, match="is written to"):
        E.eval_groups([moved])


def _fake_eval(calls: list[list[str]], *, barrier=None, fail_model: Path | None = None):
    """Stands in for ``subprocess.run([python, -m, fastrl.cli, eval, ...])``: writes each benchmark's eval.json."""
    def fake_run(cmd, *a, stdout=None, **kw):
        calls.append(cmd)
        args = build_parser().parse_args(cmd[3:])
        if stdout is not None:
            stdout.write(f"evaluating {args.model}\n")
        if barrier is not None:
            barrier.wait()  # returns only when `barrier.parties` processes are running at once
        if fail_model is not None and Path(args.model) == fail_model:
            return subprocess.CompletedProcess(cmd, 3)
        for b in args.benchmark:
            out = Path(args.out) / E.safe_name(b.split("=")[0])  # name=path: written under its name
            out.mkdir(parents=True)
            (out / "eval.json").write_text(json.dumps({"benchmarks": {b: {"avg@16": 0.5, "pass@16": 0.9}}}))
        return subprocess.CompletedProcess(cmd, 0)
    return fake_run


def test_table4_post_runs_ctx_jobs_evaluations_at_once_each_with_its_log(tmp_path, monkeypatch):
    import threading

    runs = [_run(tmp_path, v) for v in ("grpo", "fastrl", "dapo", "gspo")]
    calls: list[list[str]] = []
    monkeypatch.setattr(E.subprocess, "run", _fake_eval(calls, barrier=threading.Barrier(2, timeout=10)))
    ctx = Context(scale="mini", seeds=[1], runs_root=tmp_path, out_dir=tmp_path / "out", launcher="subprocess", jobs=2)
    table4.post(ctx, runs)  # one at a time would leave the barrier waiting: BrokenBarrierError
    assert sorted(Path(c[c.index("--model") + 1]) for c in calls) == sorted(r.run_dir for r in runs)
    for r in runs:
        assert (r.run_dir / "eval_k16" / "eval.log").read_text() == f"evaluating {r.run_dir}\n"


def test_a_failed_evaluation_leaves_the_others_done_and_is_reported_with_its_log(tmp_path, monkeypatch):
    runs = [_run(tmp_path, v) for v in ("grpo", "fastrl", "dapo")]
    calls: list[list[str]] = []
    monkeypatch.setattr(E.subprocess, "run", _fake_eval(calls, fail_model=runs[0].run_dir))
    ctx = Context(scale="mini", seeds=[1], runs_root=tmp_path, out_dir=tmp_path / "out", launcher="subprocess", jobs=2)
    with pytest.raises(RuntimeError, match=r"1 of 3 evaluations failed") as err:
        table4.post(ctx, runs)
    assert f"--model {runs[0].run_dir}" in str(err.value) and "exit 3" in str(err.value)
    assert f"evaluating {runs[0].run_dir}" in str(err.value)  # the log's last lines
    assert all((r.run_dir / "eval_k16" / "mini-geo_default" / "eval.json").is_file() for r in runs[1:])


def test_paper_ood_evals_run_one_process_per_run(tmp_path, monkeypatch):
    from experiments.grid import paper_ood_evals

    ood = (OODBenchmark("MathVista", "data/mathvista.parquet", "fastrl_mc", "mc"),
           OODBenchmark("AIME", "data/aime.parquet", "fastrl_math", "math"))
    runs = [_run(tmp_path, v, scale="paper", files=True, ood=ood) for v in ("grpo", "fastrl")]
    calls: list[list[str]] = []
    monkeypatch.setattr(E.subprocess, "run", _fake_eval(calls))
    paper_ood_evals(runs, Context(scale="paper", seeds=[1], runs_root=tmp_path, out_dir=tmp_path / "o",
                                  launcher="deepspeed"))
    assert [build_parser().parse_args(c[3:]).benchmark for c in calls] == \
        [["MathVista=data/mathvista.parquet", "AIME=data/aime.parquet"]] * 2
    assert all((r.run_dir / "eval" / "AIME" / "eval.json").is_file() for r in runs)


def test_side_by_side_evaluations_print_their_progress_and_eta(tmp_path, monkeypatch, capsys):
    runs = [_run(tmp_path, v) for v in ("grpo", "fastrl", "dapo")]
    monkeypatch.setattr(E.subprocess, "run", _fake_eval([]))
    ctx = Context(scale="mini", seeds=[1], runs_root=tmp_path, out_dir=tmp_path / "out", launcher="subprocess", jobs=2)
    table4.post(ctx, runs)
    done = [ln for ln in capsys.readouterr().out.splitlines() if " done in " in ln]
    assert len(done) == 3 and done[-1].endswith("(3/3 finished, ETA 0 s)")
    assert all(re.search(r"\(\d/3 finished, ETA \d+ s\)$", ln) for ln in done)


def test_smoke_evaluations_are_sized_for_smoke(tmp_path):
    """A smoke Table 4 evaluated 200 problems x 16 per benchmark (45-60 s per run, `make table4
    SCALE=smoke` past 600 s): at smoke a benchmark is the run's own data.num_val problems."""
    for scale, limit in (("smoke", 16), ("mini", 0)):
        spec = _run(tmp_path / scale, "grpo", scale=scale)
        cfg = yaml.safe_load((spec.run_dir / "config.yaml").read_text())
        cfg["data"]["num_val"] = 16
        (spec.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
        [group] = E.eval_groups(E.eval_jobs(spec, k=16, subdir="eval_k16", include_in_domain=True))
        assert build_parser().parse_args(group.argv()).limit == limit
        assert all(build_parser().parse_args(j.argv()).limit == limit for j in group.jobs)
