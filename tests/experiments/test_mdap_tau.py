"""The stand-in MDAP tau (slots.yaml ``mdap_tau``): which runs it reaches and which it leaves alone."""

from __future__ import annotations

import copy

import pytest

import experiments.spec as S


def _with_tau(monkeypatch, taus: dict[str, object]) -> None:
    slots = copy.deepcopy(S.load_slots())
    slots["mdap_tau"] = {"mini": taus}
    monkeypatch.setattr(S, "load_slots", lambda path=S.SLOTS_FILE: slots)


def test_only_runs_that_prune_with_mdap_get_the_stand_in_tau(tmp_path, monkeypatch):
    _with_tau(monkeypatch, {"geometry3k": 0.6})
    taus = {(s.dataset, s.variant): S.spec_tau(s) for s in S.build_runs("table1", "mini", [1], tmp_path)}
    assert taus[("geometry3k", "fastrl")] == taus[("geometry3k", "fastrl_gspo")] == 0.6
    assert taus[("geoqa8k", "fastrl")] == 0.8  # no stand-in tau for this dataset: the method's own
    assert taus[("geometry3k", "grpo")] is None and taus[("geometry3k", "cppo")] is None
    grpo = next(s for s in S.build_runs("table1", "mini", [1], tmp_path) if s.variant == "grpo")
    assert not any(o.startswith(S.TAU_KEY) for o in grpo.overrides)  # GRPO's command is untouched


def test_a_variant_that_sets_tau_or_another_pruner_wins(tmp_path, monkeypatch):
    _with_tau(monkeypatch, {"geometry3k": 0.6, "geoqa8k": 0.6})
    sweep = {s.variant: S.spec_tau(s) for s in S.build_runs("table7", "mini", [1], tmp_path)}
    assert sweep["tau0.8"] == 0.8 and sweep["tau0.2"] == 0.2
    table5 = {s.variant: s for s in S.build_runs("table5", "mini", [1], tmp_path)}
    assert S.spec_tau(table5["random_p0.5"]) is None and S.spec_tau(table5["fastrl"]) == 0.6
    assert not any(o.startswith(S.TAU_KEY) for o in table5["random_p0.5"].overrides)


def test_shared_runs_build_one_command_in_every_table(tmp_path):
    by_dir: dict = {}
    for target in ("table1", "table2", "table4", "table5", "table7", "fig3"):
        for s in S.build_runs(target, "mini", [1], tmp_path):
            assert by_dir.setdefault(s.run_dir, s.overrides) == s.overrides, (target, s.run_dir)


def test_the_committed_mini_tau_makes_the_fastrl_runs_prune_at_0_6(tmp_path):
    taus = {S.spec_tau(s) for s in S.build_runs("table1", "mini", [1], tmp_path) if s.variant == "fastrl"}
    assert taus == {0.6}
    paper = {S.spec_tau(s) for s in S.build_runs("table1", "paper", [1], tmp_path) if s.variant == "fastrl"}
    assert paper == {0.8}  # the paper scale keeps the paper's tau


@pytest.mark.parametrize("bad", [-0.1, 1.5, "alike"])
def test_a_bad_tau_names_the_key(tmp_path, monkeypatch, bad):
    _with_tau(monkeypatch, {"geometry3k": bad})
    with pytest.raises(S.SpecError, match=r"mdap_tau\.mini\.geometry3k"):
        S.build_runs("table1", "mini", [1], tmp_path)


def test_the_header_says_the_tau_used(tmp_path):
    from experiments.grid import tau_header

    assert "**MDAP tau**" in tau_header(S.build_runs("table1", "mini", [1], tmp_path))
    assert "0.6" in tau_header(S.build_runs("table1", "mini", [1], tmp_path))
    assert tau_header(S.build_runs("lr_sweep", "mini", [1], tmp_path)) == ""


def test_a_header_names_the_mechanisms_that_never_acted(tmp_path):
    """DESIGN §8: a table where a mechanism is inert says so in its header. On Dec 6 the retention
    ARS never moved n on GeoQA · large and ARS never moved n at tau >= 0.8; nothing said so."""
    from experiments import collect as C
    from experiments.grid import inert_header

    specs = [s for s in S.build_runs("table2", "mini", [1], tmp_path) if s.dataset == "geoqa8k"]
    title = (specs[0].labels["dataset_title"], specs[0].labels["model_title"])

    def row(method, metric, value):
        return C.Row("table2", "measured", method, *title, metric, value)

    acted = [row("fastrl", "n_changes", 2.2), row("fastrl", "kept_fraction", 0.71),
             row("grpo", "n_changes", 0.0), row("grpo", "kept_fraction", 1.0),  # no scaler, no MDAP: nothing to act
             row("fastrl_no_mdap", "kept_fraction", 1.0), row("fastrl_no_ars", "n_changes", 0.0)]
    assert inert_header(acted, specs) == ""
    header = inert_header([*acted, row("fastrl_retention_ars", "n_changes", 0.0),
                           row("fastrl_greedy_mdap", "kept_fraction", 1.0)], specs)
    assert header.startswith("**Mechanisms that did not act**")
    assert f"fastrl_retention_ars (ars_retention: n never moved) on {title[0]} · {title[1]}" in header
    assert "fastrl_greedy_mdap (MDAP kept every response)" in header and "fastrl (" not in header
