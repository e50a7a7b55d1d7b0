"""Issue 17, item 5: every benchmark of a run evaluated in one ``fastrl eval`` process.

The one-process path must write, per benchmark, the eval.json that evaluating that benchmark alone
writes (same samples: each benchmark is its own seeded ``generate`` call), and per-benchmark
templates and rewards must reach their benchmark only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastrl import api
from fastrl.cli import main, name_value_pairs
from fastrl.data.schema import Record
from fastrl.evaluation.evaluate import PAPER_VALIDATION, evaluate, split_by_benchmark
from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
from fastrl.rollout.base import PromptInput

from tests.evaluation.test_evaluate import CannedEngine, _bench, ok


def _without_timing(result: dict) -> dict:
    """eval.json minus the generation wall-clock seconds (the only field that is not a function of the seed)."""
    out = json.loads(json.dumps(result))
    for m in out["benchmarks"].values():
        m.pop("gen_s")
    return out


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model_dir(TinyModelSpec(kind="qwen2", num_layers=1), tmp_path_factory.mktemp("m") / "m", seed=0)


def _eval_argv(model: Path, benchmarks: list[str], out: Path) -> list[str]:
    argv = ["eval", "--model", str(model), "--k", "3", "--sampling", "paper", "--max-new-tokens", "6",
            "--limit", "4", "--batch-size", "5", "--seed", "7", "--out", str(out)]
    for b in benchmarks:
        argv += ["--benchmark", b]
    return argv


def test_one_process_writes_what_separate_processes_write(tiny_model, tmp_path):
    benches = ["mini-math:default", "mini-math:long"]
    assert main([*_eval_argv(tiny_model, benches, tmp_path / "together"), "--out-per-benchmark"]) == 0
    for b in benches:
        assert main(_eval_argv(tiny_model, [b], tmp_path / "alone" / b)) == 0
        alone = json.loads((tmp_path / "alone" / b / "eval.json").read_text())
        together = json.loads((tmp_path / "together" / b.replace(":", "_") / "eval.json").read_text())
        assert list(together["benchmarks"]) == [b]
        assert _without_timing(together) == _without_timing(alone)
        assert (tmp_path / "together" / b.replace(":", "_") / "eval.md").is_file()
    assert not (tmp_path / "together" / "eval.json").exists()


def test_split_by_benchmark_equals_evaluating_each_alone():
    canned = {"m1": [ok("2"), ok("3")], "m2": [ok("4"), ok("4")], "v1": [ok("B"), ok("A")]}
    rewards = {"MATH": "math", "MathVista": "mc"}
    encode = lambda rec: PromptInput(uid=rec.uid, prompt_ids=[0, 1, 2])  # noqa: E731
    together = split_by_benchmark(evaluate(CannedEngine(canned), encode, _bench(), sampling=PAPER_VALIDATION, k=2,
                                           reward_fn_name=rewards))
    for name, records in _bench().items():
        alone = evaluate(CannedEngine(canned), encode, {name: records}, sampling=PAPER_VALIDATION, k=2,
                         reward_fn_name=rewards[name])
        assert _without_timing(together[name]) == _without_timing(alone)


def test_each_benchmark_gets_its_own_encoder():
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def encoder(tag: str):
        def encode(rec: Record) -> PromptInput:
            seen[tag].append(rec.uid)
            return PromptInput(uid=rec.uid, prompt_ids=[0])
        return encode

    canned = {"m1": [ok("2")], "m2": [ok("4")], "v1": [ok("60")]}
    evaluate(CannedEngine(canned), {"MATH": encoder("a"), "MathVista": encoder("b")}, _bench(),
             sampling=PAPER_VALIDATION, k=1, reward_fn_name="math")
    assert seen == {"a": ["m1", "m2"], "b": ["v1"]}
    with pytest.raises(ValueError, match=r"encode_prompt has no entry for benchmark\(s\) \['MathVista'\]"):
        evaluate(CannedEngine(canned), {"MATH": encoder("a")}, _bench(), sampling=PAPER_VALIDATION, k=1,
                 reward_fn_name="math")


def test_per_benchmark_template_and_reward_are_checked_before_the_model_loads(tiny_model, monkeypatch):
    import fastrl.policy

    def no_load(*a, **kw):
        raise AssertionError("the model must not be loaded")

    monkeypatch.setattr(fastrl.policy, "load_policy_kit", no_load)
    with pytest.raises(ValueError, match=r"a template is given for \['mini-geo'\], which is not among"):
        api.evaluate(tiny_model, ["mini-math"], limit=1, templates={"mini-geo": "fastrl_math"})
    with pytest.raises(ValueError, match="benchmark 'mini-math': unknown prompt template 'nope'"):
        api.evaluate(tiny_model, ["mini-math"], limit=1, templates={"mini-math": "nope"})
    with pytest.raises(ValueError, match="unknown reward function"):
        api.evaluate(tiny_model, ["mini-math"], limit=1, rewards={"mini-math": "nope"})


def test_name_value_pairs():
    assert name_value_pairs(["mini-geo:total=fastrl_mc", "MathVista=mc"], flag="--x") == {
        "mini-geo:total": "fastrl_mc", "MathVista": "mc"}
    with pytest.raises(ValueError, match="expected BENCHMARK=VALUE"):
        name_value_pairs(["fastrl_mc"], flag="--benchmark-template")


def test_threads_option_sets_torchs_intra_op_threads(tiny_model, tmp_path, monkeypatch, capsys):
    import torch

    set_to: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", set_to.append)
    assert main([*_eval_argv(tiny_model, ["mini-math"], tmp_path), "--k", "1", "--sampling", "greedy",
                 "--threads", "1"]) == 0
    assert set_to == [1]
    assert main(["eval", "--model", str(tiny_model), "--benchmark", "mini-math", "--threads", "-1"]) == 2
    assert "--threads -1" in capsys.readouterr().err
