"""Components are built from their own config sections; the trainer only calls their protocols."""

from __future__ import annotations

import pytest

import fastrl.training.pipeline as pipeline
from fastrl.algorithms.pruning import CPPOPruner, KeepAllPruner, MDAPPruner
from fastrl.algorithms.rollout_scale import FixedRolloutScaler, ReleaseRolloutScaler, RetentionRolloutScaler
from fastrl.algorithms.sections import CPPOConfig, MDAPConfig
from fastrl.config import CONFIG_ROOT, load_config
from fastrl.training.components import build_components

METHODS = sorted(p.stem for p in (CONFIG_ROOT / "methods").glob("*.yaml"))


@pytest.mark.parametrize("method", METHODS)
def test_every_method_builds(method):
    cfg = load_config(f"methods/{method}.yaml", scale="smoke")
    c = build_components(cfg)
    assert c.rollout_scaler.n == cfg.rollout.n
    assert c.new_group_buffer(cfg.trainer.prompts_per_step).metrics() == {"rollout/tries": 0.0}


def test_sections_reach_their_components():
    cfg = load_config("methods/fastrl.yaml", ["algorithm.mdap.tau=0.6", "algorithm.ars.period_steps=3"],
                      scale="smoke")
    c = build_components(cfg)
    assert c.pruner == MDAPPruner(MDAPConfig(tau=0.6, rule="release")) and c.pruner.prune_first
    assert isinstance(c.rollout_scaler, ReleaseRolloutScaler) and c.rollout_scaler.period.steps == 3
    retention = build_components(load_config("methods/fastrl_retention_ars.yaml", scale="smoke"))
    assert isinstance(retention.rollout_scaler, RetentionRolloutScaler) and retention.rollout_scaler.n_min == 2
    cppo = build_components(load_config("methods/cppo.yaml", scale="smoke"))
    assert cppo.pruner == CPPOPruner(CPPOConfig(prune_rate=0.5, prune_first=False)) and not cppo.pruner.prune_first
    grpo = build_components(load_config("methods/grpo.yaml", scale="smoke"))
    assert grpo.pruner == KeepAllPruner() and isinstance(grpo.rollout_scaler, FixedRolloutScaler)
    assert grpo.rollout_scaler.period.steps == 1  # the fixed n reports once per ARS period (smoke: every step)


@pytest.mark.parametrize("override, match", [
    ("algorithm.rollout_scaler=ars_retention algorithm.ars_retention.n_min=9", r"n_min = 9 > n_max = 4"),
    ("algorithm.ars.period_steps=-1", r"period_steps = -1 must be an integer >= 0"),
    ("algorithm.ars.n_floor=9", r"n_floor = 9 > n_init = 4"),
])
def test_a_bad_hyperparameter_fails_before_the_model_is_built(tmp_path, monkeypatch, override, match):
    """What a section cannot check alone (it needs rollout.n, or the scaler chosen) is checked by
    the component when it is built: still before any model."""
    def no_policy(cfg):
        raise AssertionError("the policy was built before the components were checked")

    monkeypatch.setattr(pipeline, "build_policy", no_policy)
    cfg = load_config("methods/fastrl.yaml", [*override.split(), f"trainer.run_dir={tmp_path / 'run'}"], scale="smoke")
    with pytest.raises(ValueError, match=match):
        pipeline.Trainer(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, message", [
    ("algorithm.mdap.tau=1.5", "algorithm.mdap.tau = 1.5 must lie in [0, 1]"),
    ("algorithm.mdap.rule=nearest", "algorithm.mdap.rule = 'nearest' is not one of release, greedy"),
    ("algorithm.cppo.prune_rate=2", "algorithm.cppo.prune_rate = 2.0 must lie in [0, 1]"),
    ("algorithm.random.prune_rate=-0.1", "algorithm.random.prune_rate = -0.1 must lie in [0, 1]"),
    ("algorithm.dapo.max_tries=0", "algorithm.dapo.max_tries = 0 must be an integer >= 1"),
])
def test_a_section_checks_its_values_when_the_config_is_read(override, message):
    from fastrl.config import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config("methods/fastrl.yaml", [override], scale="smoke")
    assert str(err.value) == message


def test_greso_bad_probabilities_fail_when_the_config_is_read():
    """algorithm.greso owns its checks (fastrl.algorithms.sections.GresoConfig): before any build."""
    with pytest.raises(ValueError, match=r"algorithm.greso.p_min = 0.5 > p_max = 0.4"):
        load_config("methods/greso.yaml", ["algorithm.greso.p_min=0.5", "algorithm.greso.p_max=0.4"], scale="smoke")


@pytest.mark.parametrize("override, key", [
    ("algorithm.ars.n_floor=1", "algorithm.ars: ReleaseRolloutScaler: n_floor = 1"),
])
def test_a_rejected_hyperparameter_names_its_config_key(override, key):
    from fastrl.config import ConfigError

    cfg = load_config("methods/fastrl.yaml", [override], scale="smoke")
    with pytest.raises(ConfigError, match=key):
        build_components(cfg)


def test_validation_metrics_group_samples_by_problem():
    from fastrl.training.pipeline import validation_metrics

    samples = [(0, 1.0, 1.5), (1, 0.0, 0.5), (0, 0.0, 0.0), (1, 1.0, 1.5)]  # (problem, accuracy, reward)
    m = validation_metrics(samples, k=2)
    assert m["val/accuracy"] == 0.5 and m["val/accuracy_n1"] == 0.5  # firsts: problem 0 right, 1 wrong
    assert m["val/num"] == 2.0 and m["val/samples_per_problem"] == 2.0
    assert m["val/reward"] == pytest.approx(0.875)
    assert m["val/accuracy_se"] == pytest.approx(((0.5 / 2 + 0.5 / 2) ** 0.5) / 2)


def test_the_pruner_sees_the_batch_as_a_view_with_every_column():
    """prune_view: the named fields, the records' rows as question ids, every other field a column."""
    import torch

    from fastrl.data.schema import Record
    from fastrl.training.batch import RolloutBatch
    from fastrl.training.components import prune_view

    records = [Record(uid="q", problem="p", answer="1", source="t", row_id=7)] * 2
    batch = RolloutBatch.from_rows(prompts=[None, None], uids=["q", "q"], response_ids=[[1], [2]], texts=["a", "b"],
                                   engine_logprobs=[[-0.1], [-0.2]], finish_reasons=["stop", "length"],
                                   records=records, rewards=torch.tensor([1.0, 0.0]),
                                   accuracies=torch.tensor([1.0, 0.0])).with_columns(advantages=torch.tensor([0.5, -0.5]))
    view = prune_view(batch)
    assert view.question_ids == [7, 7] and view.uids == ["q", "q"] and len(view) == 2
    assert view.rewards is batch.rewards and view.advantages is batch.advantages and view.response_ids == [[1], [2]]
    # columns not computed yet (old / reference log-probs before those passes) are absent, not None
    assert set(view.columns) == {"prompts", "texts", "engine_logprobs", "finish_reasons", "records", "accuracies",
                                 "responses", "response_mask", "has_engine_logprobs"}
    assert view.column("finish_reasons") == ["stop", "length"]
    with pytest.raises(KeyError, match="no column 'old_logprobs'; it holds: accuracies, engine_logprobs"):
        view.column("old_logprobs")
    with_old = prune_view(batch.with_columns(old_logprobs=torch.zeros(2, 1)))
    assert with_old.column("old_logprobs").shape == (2, 1)
    with pytest.raises(KeyError, match="no column 'entropy'"):
        view.column("entropy")


@pytest.mark.parametrize("method", METHODS)
def test_every_pruner_has_metrics_and_no_checkpoint_key_unless_it_holds_state(method):
    """Pruner.metrics() is part of the protocol (the trainer logs it); the built-in pruners hold no
    state, so a checkpoint of theirs has exactly the keys it had before pruners could hold any."""
    c = build_components(load_config(f"methods/{method}.yaml", scale="smoke"))
    assert c.pruner.metrics() == {}
    assert set(c.state_dict()) == {"rollout_scaler", "prompt_selector"}


def test_a_pruner_that_holds_state_is_checkpointed_and_restored():
    from fastrl.algorithms.registry import PRUNERS, register

    @register(PRUNERS, "counting")
    class CountingPruner(KeepAllPruner):
        calls = 0

        def state_dict(self):
            return {"calls": self.calls}

        def load_state_dict(self, state):
            self.calls = state["calls"]

    try:
        cfg = load_config("methods/grpo.yaml", ["algorithm.pruner=counting"], scale="smoke")
        saved = build_components(cfg)
        saved.pruner.calls = 7
        state = saved.state_dict()
        assert state["pruner"] == {"calls": 7}
        resumed = build_components(cfg)
        resumed.load_state_dict(state)
        assert resumed.pruner.calls == 7
        resumed.load_state_dict({k: v for k, v in state.items() if k != "pruner"})  # a checkpoint from before
        assert resumed.pruner.calls == 7
    finally:
        del PRUNERS["counting"]
