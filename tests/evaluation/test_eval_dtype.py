"""Issue 15, defect 9: ``fastrl eval --engine vllm`` without ``--dtype`` evaluates a checkpoint in
its own dtype (vLLM's ``auto`` would run a float32 export in bfloat16)."""

from __future__ import annotations

import json

import pytest

from fastrl import api
from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir


class _Captured(Exception):
    pass


@pytest.fixture()
def captured_spec(monkeypatch):
    import fastrl.policy

    specs = []

    def capture(spec, device="cpu"):
        specs.append(spec)
        raise _Captured

    monkeypatch.setattr(fastrl.policy, "load_policy_kit", capture)
    return specs


@pytest.fixture(scope="module")
def fp32_model(tmp_path_factory):
    return build_tiny_model_dir(TinyModelSpec(kind="qwen2", num_layers=1), tmp_path_factory.mktemp("m") / "m", seed=0)


def _eval(model, **kw):
    with pytest.raises(_Captured):
        api.evaluate(model, ["mini-math"], limit=1, **kw)


def test_vllm_eval_defaults_to_the_checkpoints_dtype(fp32_model, captured_spec, tmp_path):
    assert json.loads((fp32_model / "config.json").read_text())["dtype"] == "float32"
    _eval(fp32_model, engine="vllm")
    assert captured_spec[-1].section("vllm").dtype == "float32"
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    for f in fp32_model.iterdir():
        (bf16 / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((bf16 / "config.json").read_text())
    (bf16 / "config.json").write_text(json.dumps({**cfg, "dtype": "bfloat16"}))
    _eval(bf16, engine="vllm")
    assert captured_spec[-1].section("vllm").dtype == "bfloat16"
    _eval(fp32_model, engine="vllm", dtype="bfloat16")  # an explicit --dtype wins
    assert captured_spec[-1].section("vllm").dtype == "bfloat16"
    _eval(fp32_model, engine="hf")
    assert captured_spec[-1].dtype == "float32"
