"""Registries: every component name resolves, pruners share one call signature, components are
built from their own config section, the registry itself imports no torch."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from fastrl.algorithms import losses
from fastrl.algorithms import registry as R
from fastrl.algorithms.advantages import grpo_advantages
from fastrl.algorithms.pruning import CPPOPruner, MDAPPruner, PruneBatch
from fastrl.algorithms.rollout_scale import FixedRolloutScaler, ReleaseRolloutScaler, RetentionRolloutScaler
from fastrl.algorithms.sections import CPPOConfig, MDAPConfig, RandomPruneConfig
from fastrl.config import FastRLConfig


def test_component_names():
    assert set(R.PROMPT_SELECTORS) == {"all", "greso"}
    assert set(R.GROUP_FILTERS) == {"none", "dapo"}
    assert set(R.PRUNERS) == {"none", "mdap", "cppo", "random", "advantage_only"}
    assert set(R.ROLLOUT_SCALERS) == {"fixed", "ars", "ars_retention"}
    assert set(R.POLICY_LOSSES) == {"ppo_clip", "gspo", "gspo_token"} == set(losses.POLICY_LOSS_KINDS)
    assert set(R.ADVANTAGE_ESTIMATORS) == {"grpo", "drgrpo"}


def test_get_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown pruner 'mdpa'; valid: advantage_only, cppo, mdap, none, random"):
        R.get(R.PRUNERS, "mdpa")


def test_register_decorator_and_duplicates():
    reg = R.Registry("thing")

    @R.register(reg, "x")
    def x():
        return 1

    assert R.get(reg, "x") is x and list(reg) == ["x"]
    with pytest.raises(ValueError, match=r"thing 'x' is already registered"):
        R.register(reg, "x")(x)


def test_lazy_entries_load_once_and_plain_assignment_works():
    reg = R.Registry("thing", {"adv": R.Entry("fastrl.algorithms.advantages:grpo_advantages")})
    assert reg["adv"] is grpo_advantages and R.get(reg, "adv") is reg["adv"]
    reg["other"] = len  # what monkeypatch.setitem does
    assert reg["other"] is len and set(reg) == {"adv", "other"}
    del reg["other"]
    assert "other" not in reg and reg.get("other") is None


@pytest.mark.parametrize("name, config", [("none", None), ("mdap", MDAPConfig(0.8, "release")),
                                          ("mdap", MDAPConfig(0.8, "greedy")), ("cppo", CPPOConfig(0.5, False)),
                                          ("random", RandomPruneConfig(0.5)), ("advantage_only", None)])
@pytest.mark.parametrize("d", [1, 3, 4])
def test_every_pruner_takes_the_batch_view(name, config, d):
    uids = [f"q{i % 5}" for i in range(40)]  # interleaved, 8 per question
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 4, (40,), generator=g).float() / 2
    adv = grpo_advantages(rewards, uids)
    toks = [torch.randint(0, 50, (int(torch.randint(1, 20, (1,), generator=g)),), generator=g).tolist()
            for _ in range(40)]
    batch = PruneBatch(adv, uids, [None] * 40, toks, rewards)
    pruner = R.get(R.PRUNERS, name)(*([config] if config else []))
    result = pruner(batch, align_to=d, generator=torch.Generator().manual_seed(1))
    kept = result.kept
    assert kept.dtype == torch.long and kept.tolist() == sorted(set(kept.tolist()))
    assert {uids[i] for i in kept.tolist()} == set(uids)
    if name == "none":
        assert len(kept) == 40
    else:  # 40 responses always leave enough pruned ones to refill to a multiple of d
        assert len(kept) % d == 0
    assert sum(result.final_counts.values()) == len(kept)
    assert repr(pruner).startswith(type(pruner).__name__ + "(")
    assert pruner.prune_first is (name != "cppo")


def test_a_pruner_built_by_hand_checks_its_section():
    with pytest.raises(TypeError, match="tau"):
        CPPOPruner(tau=0.5)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"^tau = 2 must lie in \[0, 1\]$"):
        MDAPPruner(MDAPConfig(tau=2))
    with pytest.raises(ValueError, match=r"^rule = 'nearest' is not one of release, greedy$"):
        MDAPPruner(MDAPConfig(rule="nearest"))
    with pytest.raises(ValueError, match=r"prune_rate = 2.0 must lie in \[0, 1\]"):
        CPPOPruner(CPPOConfig(prune_rate=2.0))
    with pytest.raises(ValueError, match=r"prune_rate = -0.1"):
        R.get(R.PRUNERS, "random")(RandomPruneConfig(prune_rate=-0.1))


def test_policy_losses_and_estimators_are_callable():
    x = torch.zeros(2, 3)
    for name, fn in R.POLICY_LOSSES.items():
        loss, metrics = fn(x, x, torch.ones(2), torch.ones(2, 3), losses.ClipSettings(clip_low=0.2, clip_high=0.2))
        assert loss.item() == pytest.approx(-1.0) and "clipfrac" in metrics, name
    assert R.ADVANTAGE_ESTIMATORS["drgrpo"]([1.0, 0.0], ["a", "a"]).tolist() == [0.5, -0.5]


def test_each_component_is_built_from_its_own_config_section():
    a = FastRLConfig().algorithm
    a.mdap.tau, a.mdap.rule, a.cppo.prune_rate, a.cppo.prune_first = 0.6, "greedy", 0.25, True
    a.greso.p_easy, a.dapo.max_tries, a.ars.period_steps, a.ars.n_floor = 0.3, 7, 3, 4
    assert R.build(R.PRUNERS, "mdap", a) == MDAPPruner(MDAPConfig(tau=0.6, rule="greedy"))
    assert R.build(R.PRUNERS, "mdap", a).config is a.mdap  # the typed section itself, no field matching
    assert R.build(R.PRUNERS, "cppo", a) == CPPOPruner(CPPOConfig(prune_rate=0.25, prune_first=True))
    assert R.build(R.PRUNERS, "random", a).config.prune_rate == a.random.prune_rate
    assert R.build(R.PROMPT_SELECTORS, "greso", a).p_easy == 0.3
    assert R.bind(R.GROUP_FILTERS, "dapo", a)(16).max_tries == 7
    assert R.bind(R.GROUP_FILTERS, "none", a)(16).target_groups == 16
    ars = R.build(R.ROLLOUT_SCALERS, "ars", a, n_init=8)
    assert isinstance(ars, ReleaseRolloutScaler) and (ars.n, ars.n_floor, ars.period.steps) == (8, 4, 3)
    a.ars_retention.n_min, a.ars_retention.beta = 2, 0.25
    ars = R.build(R.ROLLOUT_SCALERS, "ars_retention", a, n_init=6)
    assert isinstance(ars, RetentionRolloutScaler) and (ars.n_min, ars.n_max, ars.beta) == (2, 6, 0.25)
    fixed = R.build(R.ROLLOUT_SCALERS, "fixed", a, n_init=6)
    assert isinstance(fixed, FixedRolloutScaler) and (fixed.n, fixed.period.steps) == (6, 3)
    with pytest.raises(ValueError, match=r"unknown pruner 'magic'; valid: advantage_only, cppo, mdap, none, random"):
        R.build(R.PRUNERS, "magic", a)


@dataclass
class _Section:
    scale: float = 2.0


def test_a_plugin_is_built_from_its_typed_section():
    reg = R.Registry("thing")

    @R.register(reg, "scaled", section="custom", config=_Section)
    def scaled(config: _Section, *, base: float) -> float:
        return config.scale * base

    @dataclass
    class Sections:
        custom: _Section

    assert R.build(reg, "scaled", Sections(_Section(3.0)), base=2.0) == 6.0

    @R.register(reg, "plain")  # no section: built from the context alone
    def plain(*, base: float) -> float:
        return base

    assert R.build(reg, "plain", Sections(_Section(3.0)), base=2.0) == 2.0
    with pytest.raises(ValueError, match="needs both a name and a dataclass"):
        R.register(reg, "half", section="other")(plain)


def test_a_section_name_is_typed_by_one_dataclass():
    @dataclass
    class OtherMDAP:
        tau: float = 0.5

    with pytest.raises(ValueError, match=r"config section 'mdap' is already typed by fastrl.algorithms.sections.MDAPConfig"):
        R.register(R.PRUNERS, "my_mdap", section="mdap", config=OtherMDAP)(object)
    with pytest.raises(ValueError, match=r"config section 'pruner' is not available"):
        R.register(R.PRUNERS, "my_mdap", section="pruner", config=OtherMDAP)(object)
    R.register(R.PRUNERS, "my_mdap", section="mdap", config=MDAPConfig)(object)  # sharing the same dataclass: fine
    try:
        assert R.sections()["mdap"] is MDAPConfig
    finally:
        del R.PRUNERS["my_mdap"]


def test_core_imports_without_vllm_or_deepspeed():
    import subprocess
    import sys

    code = ("import sys; from fastrl.algorithms import registry as R; R.get(R.PRUNERS, 'mdap'); "
            "bad = [m for m in ('vllm', 'deepspeed', 'transformers') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_registry_names_come_without_torch():
    import subprocess
    import sys

    code = ("import sys; from fastrl.algorithms import registry as R; names = list(R.PRUNERS); "
            "sys.exit(1 if 'torch' in sys.modules or names != ['none', 'mdap', 'cppo', 'random', 'advantage_only'] else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
