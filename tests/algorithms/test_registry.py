"""Registries: every component name resolves, pruners share one call signature."""

from __future__ import annotations

import pytest
import torch

from fastrl.algorithms import registry as R
from fastrl.algorithms.advantages import grpo_advantages


def test_component_names():
    assert set(R.PROMPT_SELECTORS) == {"all", "greso"}
    assert set(R.GROUP_FILTERS) == {"none", "dapo"}
    assert set(R.PRUNERS) == {"none", "mdap", "cppo", "random", "advantage_only"}
    assert set(R.ROLLOUT_SCALERS) == {"fixed", "ars"}
    assert set(R.POLICY_LOSSES) == {"ppo_clip", "gspo", "gspo_token"}
    assert set(R.ADVANTAGE_ESTIMATORS) == {"grpo", "drgrpo"}


def test_get_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown pruner 'mdpa'; valid: advantage_only, cppo, mdap, none, random"):
        R.get(R.PRUNERS, "mdpa")


def test_register_decorator_and_duplicates():
    reg = R.Registry("thing")

    @R.register(reg, "x")
    def x():
        return 1

    assert R.get(reg, "x") is x
    with pytest.raises(ValueError, match=r"thing 'x' is already registered"):
        R.register(reg, "x")(x)


@pytest.mark.parametrize("name, hp", [("none", {}), ("mdap", {"tau": 0.8, "rule": "release"}),
                                      ("mdap", {"tau": 0.8, "rule": "greedy"}),
                                      ("cppo", {"prune_rate": 0.5}), ("random", {"prune_rate": 0.5}),
                                      ("advantage_only", {})])
@pytest.mark.parametrize("d", [1, 3, 4])
def test_every_pruner_has_the_trainer_signature(name, hp, d):
    uids = [f"q{i % 5}" for i in range(40)]  # interleaved, 8 per question
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 4, (40,), generator=g).float() / 2
    adv = grpo_advantages(rewards, uids)
    toks = [torch.randint(0, 50, (int(torch.randint(1, 20, (1,), generator=g)),), generator=g).tolist()
            for _ in range(40)]
    pruner = R.build_pruner(name, **hp)
    result = pruner(adv, uids, toks, align_to=d, generator=torch.Generator().manual_seed(1))
    kept = result.kept
    assert kept.dtype == torch.long and kept.tolist() == sorted(set(kept.tolist()))
    assert {uids[i] for i in kept.tolist()} == set(uids)
    if name == "none":
        assert len(kept) == 40
    else:  # 40 responses always leave enough pruned ones to refill to a multiple of d
        assert len(kept) % d == 0
    assert sum(result.final_counts.values()) == len(kept)
    assert repr(pruner).startswith(type(pruner).__name__ + "(")


def test_build_pruner_rejects_unknown_and_bad_hyperparameters():
    with pytest.raises(ValueError, match=r"pruner 'cppo' takes \['prune_rate'\]; unknown: \['tau'\]"):
        R.build_pruner("cppo", tau=0.5)
    with pytest.raises(ValueError, match=r"tau = 2 must lie in \[0, 1\]"):
        R.build_pruner("mdap", tau=2)
    with pytest.raises(ValueError, match=r"rule = 'nearest'"):
        R.build_pruner("mdap", rule="nearest")


def test_policy_losses_and_estimators_are_callable():
    x = torch.zeros(2, 3)
    for name, fn in R.POLICY_LOSSES.items():
        loss, metrics = fn(x, x, torch.ones(2), torch.ones(2, 3), clip_low=0.2, clip_high=0.2)
        assert loss.item() == pytest.approx(-1.0) and "clipfrac" in metrics, name
    assert R.ADVANTAGE_ESTIMATORS["drgrpo"]([1.0, 0.0], ["a", "a"]).tolist() == [0.5, -0.5]


def test_classes_build_with_config_style_kwargs():
    R.get(R.PROMPT_SELECTORS, "greso")(p_easy=0.5, p_hard=0.5, alpha=0.25, step_size=0.01,
                                        p_min=0.05, p_max=0.95, floor=0.01)
    R.get(R.ROLLOUT_SCALERS, "ars")(n_init=8, rule="retention", n_min=4, n_max=None, beta=0.5, headroom=1,
                                    rho_high=0.9, grow_step=2, per_prompt=False)
    assert R.get(R.ROLLOUT_SCALERS, "ars")(n_init=8, rule="release", n_floor=2).rule == "release"
    assert R.get(R.ROLLOUT_SCALERS, "fixed")(n=8).n == 8
    assert R.get(R.GROUP_FILTERS, "dapo")(16, max_tries=20).target_groups == 16
    assert R.get(R.GROUP_FILTERS, "none")(16, max_tries=20).target_groups == 16


def test_core_imports_without_vllm_or_deepspeed():
    import subprocess
    import sys

    code = ("import sys; import fastrl.algorithms.registry; "
            "bad = [m for m in ('vllm', 'deepspeed', 'transformers') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
