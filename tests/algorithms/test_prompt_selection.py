"""GRESO selective rollout: keep probabilities, history, p adaptation, state, determinism."""

from __future__ import annotations

import pytest
import torch

from fastrl.algorithms.prompt_selection import AllPromptsSelector, GresoSelector


def test_unseen_and_mixed_prompts_are_always_kept():
    s = GresoSelector()
    s.record("mixed", [1, 0, 1])
    assert s.keep_probability("new") == 1.0 and s.keep_probability("mixed") == 1.0
    g = torch.Generator().manual_seed(0)
    assert all(s.select(["new", "mixed"] * 50, g))


def test_keep_probability_uses_the_trailing_run():
    s = GresoSelector(p_easy=0.5, p_hard=0.6)
    for acc in ([1, 0], [1, 1], [1, 1, 1]):  # mixed, then two all-correct rollouts
        s.record("e", acc)
    assert s.history("e") == ["mixed", "easy", "easy"]
    assert s.keep_probability("e") == pytest.approx(0.5 ** 2)
    s.record("h", [0.0, 0.0])
    assert s.keep_probability("h") == pytest.approx(0.6)
    s.record("h", [0, 0, 0])
    s.record("h", torch.tensor([0.0, 0.0]))
    assert s.keep_probability("h") == pytest.approx(0.6 ** 3)
    s.record("h", [1, 1])  # the run is broken: easy with z = 1
    assert s.keep_probability("h") == pytest.approx(0.5)
    for _ in range(10):
        s.record("e", [1, 1])
    assert s.keep_probability("e") == 0.01  # 0.5^12 < floor


def test_select_frequency_matches_probability():
    s = GresoSelector(p_easy=0.5)
    s.record("e", [1, 1])
    s.record("e", [1, 1])  # p = 0.25
    g = torch.Generator().manual_seed(123)
    picks = s.select(["e"] * 4000, g)
    assert abs(sum(picks) / 4000 - 0.25) < 0.03


def test_seeded_determinism_and_fixed_draw_count():
    def run(seed):
        s = GresoSelector()
        for u in range(20):
            s.record(u, [1, 1] if u % 3 == 0 else [0, 0] if u % 3 == 1 else [0, 1])
        g = torch.Generator().manual_seed(seed)
        first = s.select(list(range(20)), g)
        return first, torch.rand(1, generator=g).item()

    assert run(5) == run(5)
    assert run(5)[0] != run(6)[0] or run(5)[1] != run(6)[1]
    # the stream advances by one draw per uid whatever the history: the next draw matches a
    # selector with no history at all
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    s = GresoSelector()
    s.record(0, [1, 1])
    s.select(list(range(20)), g1)
    GresoSelector().select(list(range(20)), g2)
    assert torch.rand(1, generator=g1).item() == torch.rand(1, generator=g2).item()


def test_p_adaptation_from_the_second_epoch():
    s = GresoSelector(alpha=0.25)  # targets: easy 1/12, hard 1/6
    for u in range(10):
        s.record(u, [1, 1])  # easy ratio 1.0 >= 1/12, hard ratio 0 < 1/6
    m = s.end_step(epoch=0)
    assert (s.p_easy, s.p_hard) == (0.5, 0.5)  # first epoch: no change
    assert m["easy_ratio"] == 1.0 and m["hard_ratio"] == 0.0
    for u in range(10):
        s.record(u, [1, 1])
    s.end_step(epoch=1)
    assert s.p_easy == pytest.approx(0.49) and s.p_hard == pytest.approx(0.51)
    # exactly at the target lowers p (GRESO's >=): 1 easy of 12 prompts
    for u in range(12):
        s.record(u, [1, 1] if u == 0 else [0, 1])
    s.end_step(epoch=2)
    assert s.p_easy == pytest.approx(0.48)
    # an empty step leaves p alone
    s.end_step(epoch=3)
    assert s.p_easy == pytest.approx(0.48) and s.p_hard == pytest.approx(0.52)


def test_p_stays_within_bounds():
    s = GresoSelector(p_easy=0.06, p_hard=0.94)
    for epoch in range(1, 5):
        s.record("a", [1, 1])
        s.end_step(epoch)
    assert s.p_easy == 0.05 and s.p_hard == 0.95


def test_state_round_trip():
    a = GresoSelector()
    for u in range(6):
        a.record(u, [1, 1] if u % 2 else [0, 0])
    a.end_step(1)
    a.record(0, [0, 0])  # open step counters survive too
    b = GresoSelector()
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    assert [b.keep_probability(u) for u in range(6)] == [a.keep_probability(u) for u in range(6)]
    ga, gb = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert a.select(list(range(6)), ga) == b.select(list(range(6)), gb)
    assert a.end_step(2) == b.end_step(2)
    with pytest.raises(ValueError, match=r"missing keys \['p_easy', 'p_hard', 'history'\]"):
        b.load_state_dict({"step": {}})


def test_all_prompts_selector_interface():
    s = AllPromptsSelector()
    assert s.select(["a", "b", "c"], torch.Generator()) == [True, True, True]
    s.record_groups({"a": [1, 1], "b": [0, 0], "c": [1, 0], "d": [0, 1]})
    m = s.end_step(0)
    assert (m["prompts_rolled_out"], m["easy_ratio"], m["hard_ratio"]) == (4.0, 0.25, 0.25)
    t = AllPromptsSelector()
    t.load_state_dict(s.state_dict())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: GresoSelector().record("u1", []), r"prompt uid='u1' has no accuracies"),
        (lambda: GresoSelector().record("u1", [1, float("nan")]), r"accuracy #1 of prompt uid='u1' is nan"),
        (lambda: GresoSelector().record("u1", [2.0]), r"accuracy #0 of prompt uid='u1' is 2.0"),
        (lambda: GresoSelector(p_min=0.5, p_max=0.4), r"p_min = 0.5 > p_max = 0.4"),
        (lambda: GresoSelector(p_easy=0.99), r"p_easy = 0.99 must lie in \[0.05, 0.95\]"),
        (lambda: GresoSelector(alpha=1.5), r"alpha = 1.5 must lie in \[0.0, 1.0\]"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_metrics_are_the_keep_probabilities_after_each_step():
    s = GresoSelector(p_easy=0.4, p_hard=0.6)
    assert s.metrics() == {"greso/p_easy": 0.4, "greso/p_hard": 0.6}
    s.record_groups({u: [1, 1] for u in range(10)})  # all easy: lowers p_easy, raises p_hard
    s.end_step(epoch=1)
    assert s.metrics() == {"greso/p_easy": pytest.approx(0.39), "greso/p_hard": pytest.approx(0.61)}
    assert AllPromptsSelector().metrics() == {}


@pytest.mark.parametrize("override, key", [
    ("algorithm.greso.p_easy=2", "algorithm.greso.p_easy"),
    ("algorithm.greso.p_min=0.9", "algorithm.greso.p_"),
    ("algorithm.ars_retention.rho_high=0", "algorithm.ars_retention.rho_high"),
    ("algorithm.ars_retention.n_min=1", "algorithm.ars_retention.n_min"),
])
def test_greso_and_retention_values_are_refused_when_the_config_is_read(override, key):
    """Their sections own the checks, so a bad value fails at load, naming the key, before any
    model is built (it used to fail only when the component was built)."""
    from fastrl.config import load_config

    with pytest.raises(ValueError, match=key):
        load_config("methods/greso.yaml", [override], scale="smoke")


def test_the_section_dataclasses_own_the_defaults():
    from fastrl.algorithms.rollout_scale import RetentionRolloutScaler
    from fastrl.algorithms.sections import GresoConfig, RetentionARSConfig

    assert GresoSelector().config == GresoConfig()
    assert GresoSelector(p_easy=0.4).config == GresoConfig(p_easy=0.4)
    assert RetentionRolloutScaler(n_init=8).config == RetentionARSConfig()
