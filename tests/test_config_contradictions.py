"""Contradictions and mistakes in a config fail when it is loaded, before any model is built, with
one line naming the key and the fix (issue 16, defects 7 and 12)."""

from __future__ import annotations

import importlib.util

import pytest

from fastrl.cli import main
from fastrl.config import ConfigError, load_config


def _load(*overrides: str, config: str = "methods/grpo.yaml"):
    return load_config(config, list(overrides), scale="smoke")  # smoke: 4 prompts x 4 responses = 16


@pytest.mark.parametrize("overrides, key, fix", [
    (["trainer.zero_stage=3"], "trainer.zero_stage = 3", "trainer.use_deepspeed=true"),  # smoke: no DeepSpeed
    (["trainer.mini_batch_size=5"], "does not divide the rollout batch", "trainer.mini_batch_size=4"),
    (["trainer.mini_batch_size=64"], "exceeds the rollout batch", "trainer.mini_batch_size=16"),
    (["trainer.save_every=-1"], "trainer.save_every = -1", ">= 0"),
    (["trainer.val_every=-1"], "trainer.val_every = -1", ">= 0"),
    (["trainer.keep_checkpoints=0"], "trainer.keep_checkpoints = 0", ">= 1"),
    (["rollout.temperature=0"], "rollout.temperature = 0", "rollout.val_temperature"),
    (["rollout.top_p=0"], "rollout.top_p = 0", "(0, 1]"),
    (["trainer.optim.lr=0"], "trainer.optim.lr = 0", "lr > 0"),
    (["data.task=files", "data.train_files=[t.jsonl]"], "data.task = files needs model.source = path", "model.path"),
    (["model.source=path"], "model.source = path needs model.path", "model.source=tiny"),
    (["model.path=some/model"], "model.path = 'some/model' is set but model.source = tiny", "model.source=path"),
    (["trainer.optim.offload=true"], "trainer.optim.offload = true needs DeepSpeed ZeRO >= 1", "trainer.optim.offload=false"),
    (["model.dtype=bfloat16"], "model.dtype = bfloat16", "trainer.use_deepspeed=true"),
])
def test_contradiction_fails_at_load_naming_key_and_fix(overrides, key, fix):
    with pytest.raises(ConfigError) as err:
        _load(*overrides)
    msg = str(err.value)
    assert key in msg and fix in msg and "\n" not in msg
    assert "SamplingConfig" not in msg and "ActorConfig" not in msg


def test_mini_batches_that_divide_the_rollout_batch_load():
    assert _load("trainer.mini_batch_size=8").trainer.effective_mini_batch == 8
    assert _load(config="methods/fastrl.yaml").trainer.effective_mini_batch == 1  # 4 / divisor 4
    assert _load("trainer.update_mode=fixed_updates", "trainer.mini_batch_size=64").trainer.mini_batch_size == 64


def _write(tmp_path, text: str):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_duplicate_yaml_key_names_file_line_and_column(tmp_path):
    path = _write(tmp_path, "defaults: [methods/grpo.yaml]\ntrainer:\n  lr: 1.0e-4\n  seed: 3\n  lr: 1.0e-2\n")
    with pytest.raises(ConfigError, match=rf"^{path}:5:3: duplicate key 'lr' \(first at line 3\)"):
        load_config(path, scale="smoke")


def test_yaml_syntax_error_is_one_line_with_file_line_and_column(tmp_path, capsys):
    path = _write(tmp_path, "defaults: [methods/grpo.yaml]\ntrainer:\n  lr: [1e-4\n  seed: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, scale="smoke")
    msg = str(err.value)
    assert msg.startswith(f"{path}:") and "invalid YAML" in msg and "\n" not in msg
    assert msg.split(":")[1].isdigit() and msg.split(":")[2].isdigit()  # file:line:column
    assert main(["train", str(path), "--scale", "smoke"]) == 2
    err_text = capsys.readouterr().err
    assert len(err_text.strip().splitlines()) == 1 and "Traceback" not in err_text


def test_defaults_given_as_a_string_says_it_must_be_a_list(tmp_path):
    path = _write(tmp_path, "defaults: methods/grpo.yaml\n")
    with pytest.raises(ConfigError, match=r"'defaults' must be a list of config files, e\.g\. defaults: \["):
        load_config(path, scale="smoke")


def test_vllm_engine_without_vllm_fails_before_any_model(monkeypatch):
    from fastrl.training import setup

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    loaded = []
    monkeypatch.setattr(setup, "load_model", lambda *a, **k: loaded.append(a))
    monkeypatch.setattr(setup, "resolve_policy_path", lambda *a, **k: loaded.append(a))
    cfg = _load("rollout.engine=vllm")
    with pytest.raises(ConfigError, match="rollout.engine = vllm but the vllm package is not installed.*rollout.engine=hf"):
        setup.build_policy(cfg)
    assert loaded == []
