"""A reward that keeps failing stops the run (issue 24, defect 3): before, 16 of 16 failures every
step gave warnings only and a finished run. One failing call still scores 0 and is counted; a step
whose reward fails on more than data.reward_max_failure_share of its responses, for
data.reward_max_failing_steps steps in a row, stops the run with the reward's name and first error."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastrl import rewards
from fastrl.cli import main
from fastrl.config import ConfigError, load_config
from fastrl.rewards import score_batch
from fastrl.training.pipeline import Trainer, TrainingError, TrainState
from tests.mini.conftest import one_torch_thread, text_model_dir  # noqa: F401  (fixtures)


def _checker(*overrides: str) -> Trainer:
    t = Trainer.__new__(Trainer)
    t.cfg = load_config("methods/grpo.yaml", list(overrides), scale="smoke")
    t.state = TrainState()
    return t


def _stats(failures: int, n: int = 16) -> dict[str, float]:
    return {"reward/failures": float(failures), "reward/timeouts": 0.0, "reward/n": float(n)}


def test_failing_steps_in_a_row_stop_the_run_with_the_reward_and_its_first_error():
    t = _checker("data.reward_max_failure_share=0.5", "data.reward_max_failing_steps=3")
    t.check_reward_failures(_stats(16), "ValueError: boom")
    t.check_reward_failures(_stats(9), "ValueError: boom")
    with pytest.raises(TrainingError) as err:
        t.check_reward_failures(_stats(12), "ValueError: boom")
    msg = str(err.value)
    assert "reward 'math' failed on 12 of 16 responses" in msg and "3 steps in a row" in msg
    assert msg.endswith("first error: ValueError: boom") and "\n" not in msg


def test_a_step_at_or_under_the_share_resets_the_count():
    t = _checker("data.reward_max_failure_share=0.5", "data.reward_max_failing_steps=2")
    for failures in (16, 8, 16, 0, 16, 8):  # 8 of 16 is not more than half
        t.check_reward_failures(_stats(failures), "ValueError: boom")
    assert t.state.reward_failing_steps == 0
    t.check_reward_failures(_stats(16), "x")
    assert t.state.reward_failing_steps == 1  # kept in the train state: a resumed run goes on counting


def test_share_one_never_stops():
    t = _checker("data.reward_max_failure_share=1.0", "data.reward_max_failing_steps=1")
    for _ in range(5):
        t.check_reward_failures(_stats(16), "ValueError: boom")


@pytest.mark.parametrize("override", ["data.reward_max_failure_share=1.5", "data.reward_max_failure_share=-0.1",
                                      "data.reward_max_failing_steps=0"])
def test_bad_settings_are_refused_at_load(override):
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config("methods/grpo.yaml", [override], scale="smoke")


def test_score_batch_reports_each_failure_in_one_line(monkeypatch):
    def flaky(response, ground_truth, **_):
        if response == "bad":
            raise ValueError("cannot parse\nsecond line")
        return {"overall": 1.0, "accuracy": 1.0}

    monkeypatch.setitem(rewards.REWARD_FUNCTIONS, "flaky", flaky)
    monkeypatch.setitem(rewards.REWARD_KEYS, "flaky", ("overall", "accuracy"))
    errors: list[str] = []
    _, stats = score_batch("flaky", ["ok", "bad", "bad"], ["1", "1", "1"], errors=errors)
    assert stats["reward/failures"] == 2 and errors == ["ValueError: cannot parse"] * 2


def test_a_run_whose_reward_always_fails_stops_in_one_line(tmp_path: Path, text_model_dir: Path, monkeypatch,
                                                            capsys):
    def broken(response, ground_truth, **_):
        raise KeyError("no grader for this answer")

    monkeypatch.setitem(rewards.REWARD_FUNCTIONS, "math", broken)
    rc = main(["train", "methods/grpo.yaml", "--scale", "smoke", f"trainer.run_dir={tmp_path / 'run'}",
               "model.source=path", f"model.path={text_model_dir}", "data.num_train=16", "data.num_val=2",
               "trainer.total_steps=4", "trainer.progress=false", "data.reward_max_failing_steps=2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fastrl")]
    assert rc == 1 and len(err) == 1, err
    assert "reward 'math' failed on 16 of 16 responses at step 2" in err[0]
    assert "2 steps in a row" in err[0] and err[0].endswith("first error: KeyError: 'no grader for this answer'")
    assert "final" not in {p.name for p in (tmp_path / "run").iterdir()}
