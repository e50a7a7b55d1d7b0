"""The training prompt stream (issue 24, defect 1): a step never rolls out one prompt twice.

Advantages are grouped by prompt uid, so a prompt drawn twice into one step would merge two groups
into one of 2n responses. As the release's loader (drop_last, reshuffled per epoch), a draw never
straddles an epoch, later draws of a step skip the prompts it already holds (GRESO refills, DAPO
tries), and a training set smaller than trainer.prompts_per_step is refused before any model is built.
"""

from __future__ import annotations

import pytest
import torch

from fastrl.cli import main
from fastrl.config import load_config
from fastrl.data.schema import Record
from fastrl.training import pipeline
from fastrl.training.pipeline import Trainer, TrainingError, TrainState


def _stream(num: int, per_step: int, shuffle: bool = True) -> Trainer:
    """A trainer holding only what the prompt stream reads (no model)."""
    t = Trainer.__new__(Trainer)
    t.cfg = load_config("methods/grpo.yaml", [f"trainer.prompts_per_step={per_step}",
                                              f"data.shuffle={str(shuffle).lower()}"], scale="smoke")
    t.train_records = [Record(uid=f"q{i}", problem=f"{i} + 1 ?", images=[], answer=str(i + 1), source="t", meta={})
                       for i in range(num)]
    t.state = TrainState()
    return t


def _order(t: Trainer, epoch: int) -> list[str]:
    return [t.train_records[i].uid for i in t._epoch_order(epoch)]


def test_a_draw_never_repeats_a_prompt_across_the_epoch_wrap():
    t = _stream(num=5, per_step=4)
    for step in range(20):
        uids = [r.uid for r in t.next_records(4)]
        assert len(set(uids)) == 4, f"draw {step} repeats a prompt: {uids}"


def test_the_partial_last_batch_of_an_epoch_is_dropped_and_the_next_epoch_reshuffled():
    t = _stream(num=10, per_step=4)
    draws = [[r.uid for r in t.next_records(4)] for _ in range(5)]
    e0, e1, e2 = _order(t, 0), _order(t, 1), _order(t, 2)
    assert e0 != e1  # reshuffled per epoch
    assert draws == [e0[0:4], e0[4:8], e1[0:4], e1[4:8], e2[0:4]]  # e0[8:10], e1[8:10] dropped
    assert (t.state.epoch, t.state.position) == (2, 4)


def test_an_exact_epoch_end_starts_the_next_epoch():
    t = _stream(num=8, per_step=4, shuffle=False)
    assert [[r.uid for r in t.next_records(4)] for _ in range(3)] == [
        ["q0", "q1", "q2", "q3"], ["q4", "q5", "q6", "q7"], ["q0", "q1", "q2", "q3"]]


def test_later_draws_of_a_step_skip_the_prompts_it_holds():
    t = _stream(num=6, per_step=4, shuffle=False)
    t.state.position = 4  # two prompts left in epoch 0: fewer than the 3 wanted
    drawn = [r.uid for r in t.next_records(3, exclude={"q0", "q1"})]
    assert drawn == ["q2", "q3", "q4"]  # epoch 1, passing over q0 and q1
    assert (t.state.epoch, t.state.position) == (1, 5)


def test_a_draw_that_cannot_be_distinct_is_an_error_with_the_numbers():
    t = _stream(num=6, per_step=4)
    with pytest.raises(TrainingError, match=r"needs 4 more distinct prompts besides the 3 already .* 6 training prompts"):
        t.next_records(4, exclude={"q0", "q1", "q2"})


class _SkipOdd:
    """A selector that rejects every prompt with an odd index (as GRESO may)."""

    def select(self, uids, generator=None):
        return [int(u[1:]) % 2 == 0 for u in uids]


def test_a_selector_refill_across_the_epoch_wrap_never_repeats_a_chosen_prompt():
    t = _stream(num=9, per_step=4)
    t.components = type("C", (), {"prompt_selector": _SkipOdd()})()
    for step in range(12):
        t.state.step = step
        chosen, _ = t.select_prompts(4)
        uids = [r.uid for r in chosen]
        assert len(set(uids)) == 4 and all(int(u[1:]) % 2 == 0 for u in uids), (step, uids)


def test_a_training_set_smaller_than_a_step_is_refused_before_any_model_is_built(tmp_path, monkeypatch, capsys):
    def no_model(cfg):
        raise AssertionError("a model was built")

    monkeypatch.setattr(pipeline, "build_policy", no_model)
    rc = main(["train", "methods/grpo.yaml", "--scale", "smoke", "data.num_train=3", "trainer.prompts_per_step=4",
               f"trainer.run_dir={tmp_path / 'run'}"])
    stderr = capsys.readouterr().err  # the INFO log lines (the config's key lines) come first
    err = [line for line in stderr.splitlines() if line.startswith("fastrl: error")]
    assert rc == 2 and len(err) == 1 and "Traceback" not in stderr, stderr
    assert "data.num_train=3: 3 training prompts < trainer.prompts_per_step=4" in err[0]
