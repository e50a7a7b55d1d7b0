"""Config composition, overrides and the errors a researcher sees for a bad key or value."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("algorithm.mdap.tua=0.3", "unknown key 'algorithm.mdap.tua'"),
        ("trainer.total_steps=many", "trainer.total_steps"),
        ("algorithm.pruner=magic", "algorithm.pruner = 'magic' is not one of"),
        ("algorithm.mdap.tau=1.5", "must lie in [0, 1]"),
        ("rollout.n=1", "at least 2"),
        ("nokey", "dotted.key=value"),
    ],
)
def test_bad_overrides_are_clear_errors(override, fragment):
    with pytest.raises(ConfigError) as err:
        load_config("methods/grpo.yaml", [override])
    assert fragment in str(err.value)


def test_unknown_key_in_a_yaml_file_names_the_file_and_lists_valid_keys(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: [methods/grpo.yaml]\nalgorithm:\n  mdap:\n    taux: 0.5\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(bad))
    msg = str(err.value)
    assert str(bad) in msg and "taux" in msg and "algorithm.mdap.tau" in msg


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
    assert "algorithm.ars.n_min" in keys and "trainer.update_mode" in keys and "algorithm.mdap" not in keys
