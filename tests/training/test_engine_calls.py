"""The trainer drives its rollout engine through the protocol only, in the right order.

Issue 15, defect 7: vLLM never slept (its gpu_memory_utilization stayed taken through the ZeRO-3
update). Now a step is: generate (the rollout) -> sleep -> update -> wake_up(weights) ->
update_weights -> wake_up(kv_cache) -> the post-sync check; an engine that shares the trainer's
weights is neither pushed to nor checked. A recording engine (wrapping the real hf engine, so the
check's log-probs are real) fails on any call made while it sleeps, as vLLM would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest

from fastrl.config import load_config
from fastrl.rollout.base import RolloutEngine
from fastrl.training.pipeline import Trainer
from tests.mini.conftest import one_torch_thread, text_model_dir  # noqa: F401  (fixtures)


class RecordingEngine:
    """Delegates to ``inner``; records calls; refuses to generate or load weights while asleep."""

    def __init__(self, inner: Any, *, shares_trainer_weights: bool) -> None:
        self.inner = inner
        self.name = "recording"
        self.shares_trainer_weights = shares_trainer_weights
        self.calls: list[str] = []
        self.asleep: set[str] = set()

    def generate(self, prompts, n, sampling):
        assert not self.asleep, f"generate while asleep ({self.asleep})"
        self.calls.append("generate")
        return self.inner.generate(prompts, n, sampling)

    def update_weights(self, named_tensors) -> None:
        assert "weights" not in self.asleep, "update_weights while the weights sleep"
        self.calls.append("update_weights")
        self.inner.update_weights(named_tensors)

    def logprobs_of(self, prompts, response_ids):
        assert not self.asleep
        self.calls.append("logprobs_of")
        return self.inner.logprobs_of(prompts, response_ids)

    def sleep(self) -> None:
        self.calls.append("sleep")
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        woken = set(tags) if tags is not None else {"weights", "kv_cache"}
        self.calls.append(f"wake_up({','.join(sorted(woken))})")
        self.asleep -= woken

    def close(self) -> None:
        self.calls.append("close")


def _trainer(tmp_path: Path, model_dir: Path, *overrides: str) -> Trainer:
    cfg = load_config("methods/grpo.yaml", [
        f"trainer.run_dir={tmp_path}", "model.source=path", f"model.path={model_dir}", "trainer.total_steps=1", "trainer.resume=false",
        "data.num_train=8", "data.num_val=2", *overrides], scale="smoke")
    return Trainer(cfg)


@pytest.mark.parametrize("shares", [False, True], ids=["own_copy", "shares_trainer_weights"])
def test_a_step_sleeps_after_the_rollout_and_wakes_around_the_sync(tmp_path: Path, text_model_dir: Path,
                                                                   shares: bool) -> None:
    trainer = _trainer(tmp_path, text_model_dir)
    engine = RecordingEngine(trainer.policy.kit.engine, shares_trainer_weights=shares)
    assert isinstance(engine, RolloutEngine)
    trainer.policy.kit.engine = engine
    metrics = trainer.train_step()
    synced = ["wake_up(weights)", "update_weights", "wake_up(kv_cache)", "generate"]
    assert engine.calls == (["generate", "sleep", "wake_up(weights)", "wake_up(kv_cache)"] if shares
                            else ["generate", "sleep", *synced])
    assert not engine.asleep
    # the check ran on the real hf engine's log-probs: same weights, (almost) no difference
    assert ("rollout/logprob_diff_max" in metrics) is not shares
    if not shares:
        assert metrics["rollout/logprob_diff_max"] < 1e-4
        engine.calls.clear()
        trainer.policy.after_load()  # a restored checkpoint is pushed to an engine with its own copy
        assert engine.calls == ["wake_up(kv_cache,weights)", "update_weights"]
    trainer.validate()  # validation finds the engine awake
    trainer.close()
    assert engine.calls[-1] == "close"



class OffsetEngine(RecordingEngine):
    """Reports every sampled token's log-prob ``offset`` nats away from the truth: a small
    disagreement on every token, which a max bound lets through and a mean bound does not."""

    def __init__(self, inner: Any, offset: float) -> None:
        super().__init__(inner, shares_trainer_weights=False)
        self.offset = offset

    def generate(self, prompts, n, sampling):
        from dataclasses import replace

        return [replace(r, logprobs=[x + self.offset for x in r.logprobs]) for r in super().generate(prompts, n, sampling)]


@pytest.mark.parametrize("mean_tol", [None, 0.01])
def test_the_post_sync_check_bounds_the_mean_difference_when_asked(tmp_path: Path, text_model_dir: Path,
                                                                    mean_tol: float | None) -> None:
    """rollout.logprob_check_mean_tol reaches the check (a bf16 engine's is the mean: paper.yaml)."""
    trainer = _trainer(tmp_path, text_model_dir, "rollout.logprob_check_tol=1.0",
                       f"rollout.logprob_check_mean_tol={'null' if mean_tol is None else mean_tol}")
    trainer.policy.kit.engine = OffsetEngine(trainer.policy.kit.engine, offset=0.05)
    try:
        if mean_tol is None:
            metrics = trainer.train_step()
            assert 0.049 < metrics["rollout/logprob_diff_mean"] < 0.051
        else:
            with pytest.raises(RuntimeError, match="mean_tol 1.0e-02"):
                trainer.train_step()
    finally:
        trainer.close()
