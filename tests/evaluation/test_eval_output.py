"""`fastrl eval` (issue 27): the help lists the valid names, a bad name fails in one line before
any model loads, results go inside the evaluated run by default, an existing eval.json is never
replaced silently (--force-new moves it aside), and generation shows its progress."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fastrl import api, cli
from fastrl.evaluation.evaluate import evaluate
from fastrl.rollout.base import Response, SamplingConfig


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "x"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text("")
    return run


def _fake_results(model, benchmarks, **kw):
    names = [api.benchmark_name(b) for b in benchmarks]
    m = {"n_problems": 2.0, "accuracy": 0.5, "pass@1": 0.5, "mean_reward": 0.5, "format_rate": 1.0}
    return {"k": 1, "sampling": {}, "reward_fn": {n: "math" for n in names}, "correct_threshold": 0.5,
            "benchmarks": {n: dict(m) for n in names}, "average": {"accuracy": 0.5}, "per_problem": {n: [] for n in names}}


def test_help_lists_benchmark_template_and_reward_names(capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    out = capsys.readouterr().out
    assert "mini-math[:default|long|swap|ood]" in out and "mini-geo[:default|total|ood]" in out
    assert "fastrl_math" in out and "fastrl_mc" in out and "grounding_iou" in out
    assert "<run>/eval/<benchmark>/" in out


@pytest.mark.parametrize("argv, says", [
    (["--benchmark", "mini-mth"], "unknown task 'mini-mth'; did you mean 'mini-math'?"),
    (["--benchmark", "mini-math:lng"], "mini-math has no variant 'lng'"),
    (["--benchmark", "m=missing.parquet"], "no file missing.parquet"),
    (["--benchmark", "mini-math", "--template", "fastrl_mth"], "unknown prompt template 'fastrl_mth'"),
    (["--benchmark", "mini-math", "--benchmark-reward", "mini-math=mth"], "unknown reward function 'mth'"),
])
def test_a_bad_name_fails_in_one_line_before_any_model_loads(run, monkeypatch, capsys, argv, says):
    import fastrl.policy

    monkeypatch.setattr(fastrl.policy, "load_policy_kit", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(api, "evaluate", lambda *a, **k: pytest.fail("evaluate was called"))
    assert cli.main(["eval", "--model", str(run), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err


def test_api_evaluate_checks_names_before_loading(run, monkeypatch):
    import fastrl.policy

    monkeypatch.setattr(fastrl.policy, "load_policy_kit", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError, match="did you mean 'mini-geo'"):
        api.evaluate(run, ["mini-gep"])


def test_default_output_is_inside_the_run_and_never_replaced_silently(run, monkeypatch, capsys):
    monkeypatch.setattr(api, "evaluate", _fake_results)
    argv = ["eval", "--model", str(run), "--benchmark", "mini-math", "--benchmark", "mini-geo:total"]
    assert cli.main(argv) == 0
    first = run / "eval" / "mini-math" / "eval.json"
    assert first.is_file() and (run / "eval" / "mini-geo_total" / "eval.json").is_file()
    assert json.loads(first.read_text())["benchmarks"].keys() == {"mini-math"}
    before = first.read_text()
    monkeypatch.setattr(api, "evaluate", lambda *a, **k: pytest.fail("a refused eval must not run"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "eval.json exists (and 1 more)" in err and "--force-new" in err and first.read_text() == before
    monkeypatch.setattr(api, "evaluate", _fake_results)
    assert cli.main([*argv, "--force-new"]) == 0
    moved = sorted((run / "eval").glob("mini-math.replaced-*"))
    assert len(moved) == 1 and (moved[0] / "eval.json").read_text() == before and (moved[0] / "eval.md").is_file()
    assert first.is_file()


def test_an_explicit_out_is_protected_too(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(api, "evaluate", _fake_results)
    argv = ["eval", "--model", str(run / "final"), "--benchmark", "mini-math", "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 0 and (tmp_path / "o" / "eval.json").is_file()
    assert cli.main(argv) == 2 and "never replaced silently" in capsys.readouterr().err


def test_a_model_that_is_not_a_run_gets_a_folder_of_its_own(tmp_path):
    from fastrl.evaluation.output import default_eval_root

    model = tmp_path / "my-model"
    model.mkdir()
    assert default_eval_root(str(model)) == Path("runs/eval/my-model")
    assert default_eval_root("Qwen/Qwen2.5-VL-7B-Instruct") == Path("runs/eval/Qwen--Qwen2.5-VL-7B-Instruct")


class _ChunkedEngine:
    """Greedy '\\boxed{1}' in chunks of 3 responses, reporting each chunk through ``progress``."""

    name, shares_trainer_weights, progress = "fake", True, None

    def generate(self, prompts, n, sampling):
        out = [Response(prompt_index=i, text="\\boxed{1}", response_ids=[1], logprobs=[0.0], finish_reason="stop")
               for i in range(len(prompts)) for _ in range(n)]
        for start in range(0, len(out), 3):
            if self.progress is not None:
                self.progress(len(out[start:start + 3]))
        return out


def test_generation_reports_its_progress(caplog):
    from fastrl.data.schema import Record
    from fastrl.rollout.base import PromptInput

    records = [Record(uid=f"u{i}", problem="p", answer="1", source="t") for i in range(10)]
    engine = _ChunkedEngine()
    with caplog.at_level("INFO", logger="fastrl"):
        evaluate(engine, lambda r: PromptInput(uid=r.uid, prompt_ids=[1]), {"b": records},
                 sampling=SamplingConfig(temperature=0.0, max_new_tokens=4), k=1, reward_fn_name="math")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("eval b:")]
    assert lines[0].startswith("eval b: 3/10 responses") and lines[-1].startswith("eval b: 10/10 responses")
    assert engine.progress is None  # the hook is removed after the benchmark
