"""The released pass order (prune before old/ref log-probs except for CPPO) and GRESO's refill."""

from __future__ import annotations

import pytest

import fastrl.training.pipeline as pipeline
from fastrl.config import load_config
from fastrl.training.pipeline import Trainer


def _trainer(tmp_path, method, *overrides):
    cfg = load_config(f"methods/{method}.yaml", [f"trainer.run_dir={tmp_path / method}", *overrides], scale="smoke")
    return Trainer(cfg)


@pytest.mark.parametrize("method, overrides, full_batch", [
    ("cppo", (), True),  # as released: old/ref on the full batch, then prune
    ("cppo", ("algorithm.cppo.prune_first=true",), False),
    ("fastrl", (), False),  # MDAP prunes first
])
def test_log_prob_passes_run_where_the_release_runs_them(tmp_path, monkeypatch, method, overrides, full_batch):
    trainer = _trainer(tmp_path, method, *overrides)
    calls = []
    real = pipeline.compute_logprobs

    def spy(model, batch, **kw):
        calls.append(len(batch))
        return real(model, batch, **kw)

    monkeypatch.setattr(pipeline, "compute_logprobs", spy)
    metrics = trainer.train_step()
    assert len(calls) == 2  # old and reference (KL is on)
    total, kept = metrics["rollout/num_responses"], metrics["prune/kept"]
    assert kept < total  # both pruners pruned something at smoke scale
    expected = total if full_batch else kept
    assert all(n == expected for n in calls), calls


def test_the_full_batch_pass_gives_the_same_update_inputs(tmp_path):
    """CPPO's two orders differ only in cost: the selected log-probs are the same numbers."""
    ma = _trainer(tmp_path / "a", "cppo").train_step()  # each Trainer seeds the global RNG: build, then step
    mb = _trainer(tmp_path / "b", "cppo", "algorithm.cppo.prune_first=true").train_step()
    for key in ("prune/kept", "actor/pg_loss", "actor/kl_loss", "reward/mean"):
        assert ma[key] == pytest.approx(mb[key], abs=1e-6), key


class _RejectEveryOther:
    """A prompt selector that skips every second prompt it is offered."""

    def __init__(self) -> None:
        self.offered = 0

    def select(self, uids, generator=None):
        out = [(self.offered + i) % 2 == 0 for i in range(len(uids))]
        self.offered += len(uids)
        return out


def test_greso_refills_to_a_full_batch(tmp_path):
    trainer = _trainer(tmp_path, "greso")
    trainer.components.prompt_selector = _RejectEveryOther()
    chosen, drawn = trainer.select_prompts(4)
    assert len(chosen) == 4 and drawn >= 7  # 4 accepted of at least 7 offered
    assert len({r.uid for r in chosen}) == 4


def test_greso_step_never_shrinks(tmp_path):
    trainer = _trainer(tmp_path, "greso", "trainer.total_steps=4")
    for _ in range(4):
        m = trainer.train_step()
        assert m["rollout/num_prompts"] == trainer.cfg.trainer.prompts_per_step
        assert m["rollout/prompts_drawn"] >= m["rollout/num_prompts"]


def test_a_mini_batch_that_cannot_split_over_the_ranks_is_an_error():
    from fastrl.training.pipeline import _check_world_fits

    cfg = load_config("methods/fastrl.yaml", scale="smoke")  # 4 / 4 = 1 trajectory per optimizer step
    _check_world_fits(cfg, 1)
    with pytest.raises(ValueError, match=r"trainer.mini_batch_size=8"):
        _check_world_fits(cfg, 2)
