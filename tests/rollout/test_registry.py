"""The engine registry and the per-engine config sections (issue 15, "one engine seam")."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from fastrl import config as config_module
from fastrl.algorithms.registry import register
from fastrl.config import ConfigError, load_config
from fastrl.engines import ROLLOUT_ENGINES

REPO = Path(__file__).resolve().parents[2]


def test_engine_names_come_from_the_registry() -> None:
    assert list(ROLLOUT_ENGINES) == ["hf", "vllm"]
    assert config_module.ROLLOUT_ENGINES == ("hf", "vllm")
    with pytest.raises(ConfigError, match="rollout.engine = 'nope' is not one of hf, vllm"):
        load_config(None, ["rollout.engine=nope"], scale="smoke")


def test_a_registered_engine_is_built_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from fastrl.policy import PolicySpec, build_engine

    @register(ROLLOUT_ENGINES, "echo")
    def echo(spec, context):
        return ("echo", spec.path, context.model, context.pad_token_id, context.stop_token_ids)

    class Tok:
        pad_token_id, eos_token_id = 0, 2

    try:
        assert load_config(None, ["rollout.engine=echo"], scale="smoke").rollout.engine == "echo"
        assert build_engine(PolicySpec(path="p", engine="echo"), "model", Tok()) == ("echo", "p", "model", 0, [2])
    finally:
        del ROLLOUT_ENGINES["echo"]


def test_no_engine_name_branches_outside_the_rollout_package() -> None:
    from fastrl import policy

    offenders = [f"{path.relative_to(REPO)}:{n}" for path in (REPO / "fastrl").rglob("*.py")
                 if "rollout" not in path.relative_to(REPO / "fastrl").parts and path.name != "engines.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"engine\.name\s*[!=]=|spec\.engine\s*[!=]=", line)]
    assert offenders == []
    assert not re.search(r"\bif\b", inspect.getsource(policy.build_engine).split('"""')[-1])


def test_per_engine_sections_replace_the_flat_keys() -> None:
    cfg = load_config(None, ["rollout.hf.batch_size=7", "rollout.vllm.gpu_memory_utilization=0.3",
                             "rollout.vllm.sync_method=cpu_repack", "rollout.vllm.sleep=false"], scale="smoke")
    assert cfg.rollout.hf.batch_size == 7
    assert (cfg.rollout.vllm.gpu_memory_utilization, cfg.rollout.vllm.sync_method, cfg.rollout.vllm.sleep) == \
        (0.3, "cpu_repack", False)
    for old in ("rollout.vllm_max_model_len=1", "rollout.hf_batch_size=2", "rollout.vllm_sync_method=auto"):
        with pytest.raises(ConfigError, match="unknown key"):
            load_config(None, [old], scale="smoke")
    with pytest.raises(ConfigError, match="rollout.vllm.sync_method = 'fast' is not one of"):
        load_config(None, ["rollout.vllm.sync_method=fast"], scale="smoke")
    with pytest.raises(ConfigError, match="rollout.hf.batch_size = 0"):
        load_config(None, ["rollout.hf.batch_size=0"], scale="smoke")


def test_vllm_max_model_len_is_prompt_plus_response_unless_set() -> None:
    from fastrl.policy import PolicySpec
    from fastrl.rollout.vllm import max_model_len_of

    def resolved(spec: PolicySpec) -> int | None:
        return max_model_len_of(spec.section("vllm"), spec)

    paper = load_config("methods/fastrl.yaml", scale="paper")
    assert paper.rollout.vllm.max_model_len is None
    assert resolved(PolicySpec.from_config(paper, "m", seed=0)) == 2048 + 2048
    shorter = load_config("methods/fastrl.yaml", ["data.max_prompt_length=1024"], scale="paper")
    assert resolved(PolicySpec.from_config(shorter, "m", seed=0)) == 1024 + 2048
    given = load_config("methods/fastrl.yaml", ["rollout.vllm.max_model_len=3000"], scale="paper")
    spec = PolicySpec.from_config(given, "m", seed=0)
    vllm = spec.section("vllm")
    assert resolved(spec) == 3000 and vllm.enforce_eager is False and vllm.sleep is True
