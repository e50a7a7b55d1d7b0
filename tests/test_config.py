"""Config composition, overrides and the errors a researcher sees for a bad key or value."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fastrl.config import CONFIG_ROOT, ConfigError, load_config, save_config, valid_keys

METHODS = sorted(p.stem for p in (CONFIG_ROOT / "methods").glob("*.yaml"))


def test_every_published_method_has_a_config():
    expected = {"grpo", "dapo", "gspo", "cppo", "greso", "fastrl", "fastrl_dapo", "fastrl_gspo",
                "fastrl_no_mdap", "fastrl_no_ars"}
    assert expected <= set(METHODS)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("scale", ["smoke", "mini", "paper"])
def test_every_method_loads_at_every_scale(method, scale):
    cfg = load_config(f"methods/{method}.yaml", scale=scale)
    assert cfg.method == method and cfg.scale == scale


def test_method_compositions_match_the_paper_settings():
    grpo = load_config("methods/grpo.yaml")
    assert (grpo.algorithm.kl_coef, grpo.algorithm.kl_kind) == (0.01, "k3")
    assert (grpo.algorithm.clip_low, grpo.algorithm.clip_high, grpo.algorithm.dual_clip) == (0.2, 0.3, 3.0)
    dapo = load_config("methods/dapo.yaml")
    assert (dapo.algorithm.group_filter, dapo.algorithm.kl_coef, dapo.algorithm.clip_high) == ("dapo", 0.0, 0.28)
    gspo = load_config("methods/gspo.yaml")
    assert (gspo.algorithm.policy_loss, gspo.algorithm.loss_agg) == ("gspo_token", "seq-mean-token-mean")
    fastrl = load_config("methods/fastrl.yaml")
    assert (fastrl.algorithm.pruner, fastrl.algorithm.rollout_scaler, fastrl.algorithm.mdap.tau) == ("mdap", "ars", 0.8)
    assert fastrl.algorithm.kl_coef == 0.01  # inherits GRPO's loss through defaults:
    fd = load_config("methods/fastrl_dapo.yaml")
    assert (fd.algorithm.group_filter, fd.algorithm.pruner) == ("dapo", "mdap")
    assert load_config("methods/fastrl_no_mdap.yaml").algorithm.pruner == "none"
    assert load_config("methods/fastrl_no_ars.yaml").algorithm.rollout_scaler == "fixed"


def test_overrides_and_scale_precedence():
    cfg = load_config("methods/fastrl.yaml", ["algorithm.mdap.tau=0.4", "trainer.total_steps=3"], scale="smoke")
    assert cfg.algorithm.mdap.tau == 0.4 and cfg.trainer.total_steps == 3 and cfg.scale == "smoke"
    assert load_config("methods/grpo.yaml", ["scale=paper"]).model.path.startswith("Qwen/")


def test_paper_scale_checks_the_bf16_sync_by_its_mean():
    """bf16 engines disagree with the trainer by tenths of a nat on a few tokens (configs/scales/paper.yaml)."""
    paper, smoke = load_config("methods/grpo.yaml", scale="paper"), load_config("methods/grpo.yaml", scale="smoke")
    assert (paper.rollout.logprob_check_tol, paper.rollout.logprob_check_mean_tol) == (1.5, 0.08)
    assert (smoke.rollout.logprob_check_tol, smoke.rollout.logprob_check_mean_tol) == (1e-2, None)


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("algorithm.mdap.tua=0.3", "unknown key 'algorithm.mdap.tua'"),
        ("trainer.total_steps=many", "trainer.total_steps"),
        ("algorithm.pruner=magic", "algorithm.pruner = 'magic' is not one of none, mdap, cppo, random, advantage_only"),
        ("algorithm.rollout_scaler=adaptive", "algorithm.rollout_scaler = 'adaptive' is not one of fixed, ars, ars_retention"),
        ("rollout.n=1", "at least 2"),
        ("rollout.logprob_check_mean_tol=0", "rollout.logprob_check_mean_tol = 0.0: each must be > 0"),
        ("rollout.logprob_check_tol=-1", "rollout.logprob_check_tol = -1.0"),
        ("nokey", "dotted.key=value"),
    ],
)
def test_bad_overrides_are_clear_errors(override, fragment):
    with pytest.raises(ConfigError) as err:
        load_config("methods/grpo.yaml", [override])
    assert fragment in str(err.value)


MDAP_TYPO = "unknown key 'algorithm.mdap.taux'; did you mean 'algorithm.mdap.tau'? Keys of algorithm.mdap: tau, rule"


def test_unknown_override_suggests_the_nearest_key_and_lists_only_its_section():
    with pytest.raises(ConfigError) as err:
        load_config("methods/grpo.yaml", ["algorithm.mdap.taux=0.3"])
    assert str(err.value) == MDAP_TYPO  # not the ~80 keys of the whole schema


@pytest.mark.parametrize(
    "key, suggestion, listing",
    [
        ("trainr.seed", "did you mean 'trainer.seed'?",
         "Top-level keys: method, scale, imports; sections: model, data, rollout, algorithm, trainer"),
        ("trainer.total_step", "did you mean 'trainer.total_steps'?", "Keys of trainer: run_dir, seed,"),
        ("algorithm.tau", "did you mean 'algorithm.mdap.tau'?", "sections: mdap, cppo, random, ars, ars_retention, greso, dapo"),
        ("algorithm.mdap.xyz", "unknown key 'algorithm.mdap.xyz'. Keys", "Keys of algorithm.mdap: tau, rule"),
        ("algorithm.mdap", "'algorithm.mdap' is a section, not a key.", "Keys of algorithm.mdap: tau, rule"),
    ],
)
def test_unknown_keys_suggest_by_section(key, suggestion, listing):
    with pytest.raises(ConfigError) as err:
        load_config("methods/grpo.yaml", [f"{key}=1"])
    msg = str(err.value)
    assert suggestion in msg and listing in msg
    assert msg.count(",") < 25  # one section's keys, not the whole schema's


def test_unknown_key_in_a_yaml_file_names_the_file_and_suggests_the_key(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: [methods/grpo.yaml]\nalgorithm:\n  mdap:\n    taux: 0.5\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(bad))
    assert str(err.value) == f"{bad}: {MDAP_TYPO}"
    top = tmp_path / "top.yaml"
    top.write_text("trainr:\n  seed: 3\n")
    with pytest.raises(ConfigError, match=r"top\.yaml: unknown key 'trainr\.seed'; did you mean 'trainer\.seed'\?"):
        load_config(str(top))
    section = tmp_path / "section.yaml"
    section.write_text("algorithm: 3\n")
    with pytest.raises(ConfigError, match=r"section\.yaml: 'algorithm' is a section, not a key\. Keys of algorithm: "):
        load_config(str(section))
    value = tmp_path / "value.yaml"
    value.write_text("trainer:\n  total_steps: many\n")
    with pytest.raises(ConfigError, match=r"value\.yaml: bad value for 'trainer\.total_steps': Value 'many'"):
        load_config(str(value))


def test_loss_agg_is_one_of_the_modes_the_loss_implements():
    from fastrl.algorithms import losses

    with pytest.raises(ConfigError, match="algorithm.loss_agg = 'mean' is not one of token-mean, seq-mean-token-mean, "
                                          "seq-mean-token-sum, seq-mean-token-sum-norm"):
        load_config("methods/grpo.yaml", ["algorithm.loss_agg=mean"])
    for mode in losses.AGG_MODES:  # the same list: fastrl.algorithms.loss_modes
        assert load_config("methods/grpo.yaml", [f"algorithm.loss_agg={mode}"]).algorithm.loss_agg == mode


def test_loss_norm_constant_needs_the_dr_grpo_mode_and_a_positive_value():
    assert load_config("methods/grpo.yaml").algorithm.loss_norm_constant is None
    drgrpo = ["algorithm.loss_agg=seq-mean-token-sum-norm"]
    cfg = load_config("methods/grpo.yaml", [*drgrpo, "algorithm.loss_norm_constant=512"])
    assert cfg.algorithm.loss_norm_constant == 512
    with pytest.raises(ConfigError, match="algorithm.loss_norm_constant = 0.0 must be > 0"):
        load_config("methods/grpo.yaml", [*drgrpo, "algorithm.loss_norm_constant=0"])
    only = r"applies only to algorithm.loss_agg = seq-mean-token-sum-norm \(now token-mean\)"
    with pytest.raises(ConfigError, match=only):
        load_config("methods/grpo.yaml", ["algorithm.loss_norm_constant=512"])


def test_component_names_are_the_registry_names(monkeypatch):
    from fastrl.algorithms import registry

    monkeypatch.setitem(registry.PRUNERS, "keep_positive", object)  # a plug-in, registered before loading
    assert load_config("methods/grpo.yaml", ["algorithm.pruner=keep_positive"]).algorithm.pruner == "keep_positive"
    monkeypatch.delitem(registry.PRUNERS, "keep_positive")
    with pytest.raises(ConfigError, match="algorithm.pruner = 'keep_positive' is not one of none, mdap, cppo"):
        load_config("methods/grpo.yaml", ["algorithm.pruner=keep_positive"])


def test_a_section_is_checked_by_its_own_dataclass_when_read():
    """The section's check() (fastrl.algorithms.sections), reported as the dotted key."""
    with pytest.raises(ConfigError, match=r"^algorithm.mdap.tau = 1.5 must lie in \[0, 1\]$"):
        load_config("methods/grpo.yaml", ["algorithm.mdap.tau=1.5"])


@dataclass
class KeepTopConfig:
    fraction: float = 0.5


def test_the_schema_holds_every_registered_section_in_the_order_config_yaml_had(tmp_path: Path):
    from fastrl.algorithms import registry
    from fastrl.algorithms.sections import ARSConfig, MDAPConfig
    from fastrl.config import FastRLConfig, to_dict

    cfg = load_config("methods/fastrl.yaml", scale="smoke")
    assert list(to_dict(cfg))[-1] == "trainer"  # no `imports` key while it is empty
    assert list(to_dict(cfg)["algorithm"])[-7:] == ["mdap", "cppo", "random", "ars", "ars_retention", "greso", "dapo"]
    assert isinstance(cfg.algorithm.mdap, MDAPConfig) and isinstance(cfg.algorithm.ars, ARSConfig)

    registry.register(registry.PRUNERS, "keep_top_cfg", section="keep_top_cfg", config=KeepTopConfig)(object)
    try:
        cfg = load_config("methods/grpo.yaml", ["algorithm.pruner=keep_top_cfg", "algorithm.keep_top_cfg.fraction=0.25"])
        assert cfg.algorithm.keep_top_cfg == KeepTopConfig(0.25)
        assert "algorithm.keep_top_cfg.fraction" in valid_keys()
        save_config(cfg, tmp_path / "config.yaml")
        again = load_config(tmp_path / "config.yaml")
        assert to_dict(again) == to_dict(cfg)
        import copy
        import pickle

        assert pickle.loads(pickle.dumps(cfg)) == cfg == copy.deepcopy(cfg)
        with pytest.raises(ConfigError, match="unknown key 'algorithm.keep_top_cfg.fractoin'; did you mean "
                                              "'algorithm.keep_top_cfg.fraction'"):
            load_config("methods/grpo.yaml", ["algorithm.keep_top_cfg.fractoin=0.25"])
    finally:
        del registry.PRUNERS["keep_top_cfg"]
    assert not hasattr(FastRLConfig().algorithm, "keep_top_cfg")


def test_imports_are_imported_before_the_config_is_read(tmp_path: Path, monkeypatch):
    from fastrl.algorithms import registry

    (tmp_path / "plug_cfg_mod.py").write_text(
        "from dataclasses import dataclass\n"
        "from fastrl.algorithms.registry import PRUNERS, register\n"
        "@dataclass\nclass C:\n    k: int = 1\n"
        "register(PRUNERS, 'plug_cfg', section='plug_cfg', config=C)(object)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    method = tmp_path / "m.yaml"
    method.write_text("defaults: [methods/grpo.yaml]\nimports: [plug_cfg_mod]\nalgorithm:\n  pruner: plug_cfg\n"
                      "  plug_cfg: {k: 3}\n")
    try:
        cfg = load_config(method, imports=["plug_cfg_mod", "json"])
        assert cfg.imports == ["plug_cfg_mod", "json"] and cfg.algorithm.plug_cfg.k == 3
    finally:
        registry.PRUNERS.pop("plug_cfg", None)
    with pytest.raises(ConfigError, match=r"^--import: cannot import module 'nope_mod.x' \(no module named 'nope_mod'\); "
                                          r"put the directory that holds it on PYTHONPATH, or pip install its package$"):
        load_config("methods/grpo.yaml", imports=["nope_mod.x"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: [methods/grpo.yaml]\nimports: plug_cfg_mod\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: 'imports' must be a list of module names"):
        load_config(bad)


def test_config_imports_no_torch():
    code = "import sys, fastrl.config; sys.exit('torch' in sys.modules or 'transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=CONFIG_ROOT.parent).returncode == 0


def test_missing_file_and_scale(tmp_path: Path):
    with pytest.raises(ConfigError, match="not found"):
        load_config("methods/nope.yaml")
    with pytest.raises(ConfigError, match="scale 'huge'"):
        load_config("methods/grpo.yaml", scale="huge")


def test_saved_config_round_trips(tmp_path: Path):
    cfg = load_config("methods/fastrl_gspo.yaml", ["algorithm.mdap.tau=0.6"], scale="smoke")
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(str(tmp_path / "config.yaml"))
    assert again == cfg


def test_valid_keys_cover_nested_sections():
    keys = valid_keys()
    assert "algorithm.ars_retention.n_min" in keys and "algorithm.ars.n_min" not in keys and "trainer.update_mode" in keys and "algorithm.mdap" not in keys
