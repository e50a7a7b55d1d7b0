"""``model.device``: resolution, validation, and that the policy, reference, SFT and checkpoint RNG
follow it. No GPU here: CUDA's presence is simulated, and PyTorch's ``meta`` device stands in for
an accelerator where a module must really move."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastrl.config import ConfigError, load_config
from fastrl.models import device as D
from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir

META = torch.device("meta")


def test_resolve_device_auto_cpu_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert D.resolve_device("auto") == D.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"model.device = 'cuda' but torch.cuda.is_available\(\) is False"):
        D.resolve_device("cuda")
    with pytest.raises(ValueError, match=r"--device = 'gpu' is not one of auto, cpu, cuda"):
        D.resolve_device("gpu", key="--device")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert D.resolve_device("auto") == D.resolve_device("cuda") == torch.device("cuda", 1)
    assert D.resolve_device("cpu") == torch.device("cpu")


def test_config_validates_device_and_pixels():
    assert load_config("methods/grpo.yaml", scale="smoke").model.device == "auto"
    assert load_config("methods/grpo.yaml", ["model.device=cpu"], scale="smoke").model.device == "cpu"
    with pytest.raises(ConfigError, match="model.device = 'gpu' is not one of auto, cpu, cuda"):
        load_config("methods/grpo.yaml", ["model.device=gpu"], scale="smoke")
    m = load_config("methods/grpo.yaml", scale="smoke").model
    assert (m.min_pixels, m.max_pixels) == (262144, 4194304)
    with pytest.raises(ConfigError, match="model.min_pixels = 10 and model.max_pixels = 5"):
        load_config("methods/grpo.yaml", ["model.min_pixels=10", "model.max_pixels=5"], scale="smoke")


def test_deepspeed_device_must_agree_with_model_device():
    D.check_deepspeed_device("auto", torch.device("cuda", 0))
    D.check_deepspeed_device("cuda", torch.device("cuda", 0))
    D.check_deepspeed_device("cpu", torch.device("cpu"))
    with pytest.raises(ValueError, match="model.device = 'cpu' but DeepSpeed's accelerator places the actor on cuda:0"):
        D.check_deepspeed_device("cpu", torch.device("cuda", 0))
    with pytest.raises(ValueError, match="model.device = 'cuda'.*on cpu"):
        D.check_deepspeed_device("cuda", torch.device("cpu"))


def test_module_device_and_to_device():
    assert D.module_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert D.module_device(torch.nn.Linear(2, 2, device=META)) == META
    assert D.module_device(torch.nn.ReLU()) == torch.device("cpu")
    moved = D.to_device({"a": torch.zeros(2), "b": 3}, META)
    assert moved["a"].device == META and moved["b"] == 3


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    spec = TinyModelSpec(kind="qwen2", num_layers=1, intermediate_size=128)
    return build_tiny_model_dir(spec, tmp_path_factory.mktemp("tiny_device"), seed=0)


def test_build_policy_puts_actor_and_reference_on_the_resolved_device(monkeypatch, tiny_dir, tmp_path):
    """Without DeepSpeed the policy goes to ``model.device`` and the reference follows it (before
    the fix both stayed on the CPU while a CUDA run needed them on the GPU)."""
    from fastrl.training import setup

    seen: list[str] = []

    def fake_resolve(name: str = "auto", **_: object) -> torch.device:
        seen.append(name)
        return META  # stands in for cuda:0

    monkeypatch.setattr(setup, "resolve_device", fake_resolve, raising=False)
    from fastrl.models import device as device_module  # the torch backend resolves through it

    monkeypatch.setattr(device_module, "resolve_device", fake_resolve)
    cfg = load_config("methods/grpo.yaml", ["model.source=path", f"model.path={tiny_dir}", "model.device=cuda", "trainer.use_deepspeed=false",
                                            f"trainer.run_dir={tmp_path}"], scale="smoke")
    assert cfg.algorithm.kl_coef > 0
    bundle = setup.build_policy(cfg)
    assert seen == ["cuda"]
    assert {p.device for p in bundle.actor.model.parameters()} == {META}
    assert {p.device for p in bundle.reference.parameters()} == {META}
    assert D.module_device(bundle.engine.model) == META


def test_warm_start_trains_on_the_requested_device(monkeypatch, tmp_path):
    from fastrl.mini import sft

    class Seen(Exception):
        pass

    def fake_train(model, *args, **kwargs):
        raise Seen(D.module_device(model), kwargs.get("autocast_dtype"))

    monkeypatch.setattr(sft, "train_sft", fake_train)
    spec = TinyModelSpec(kind="qwen2", num_layers=1, intermediate_size=128)
    with pytest.raises(Seen) as caught:
        sft.warm_start("mini-math", spec, out_root=tmp_path, seed=0, steps=1, lr=1e-3, num_train=8, device="meta",
                       compute_dtype="bfloat16")
    assert caught.value.args == (META, None)  # bf16 autocast only on CUDA
    assert not list(tmp_path.iterdir())  # the temporary directory is gone


def test_sft_cache_key_separates_gpu_runs():
    from fastrl.mini.sft import cache_key, sft_inputs

    spec = TinyModelSpec(kind="qwen2", num_layers=1, intermediate_size=128)
    common = dict(seed=0, steps=1, lr=1e-3, batch_size=4, num_train=8, template="fastrl_math", warmup_frac=0.05,
                  weight_decay=0.0)
    cpu = sft_inputs("mini-math", spec, **common)
    assert "device" not in cpu and "autocast" not in cpu  # CPU cache entries keep their old keys
    gpu = sft_inputs("mini-math", spec, device_type="cuda", autocast_dtype="bfloat16", **common)
    assert (gpu["device"], gpu["autocast"]) == ("cuda", "bfloat16")
    assert cache_key(cpu) != cache_key(gpu)


def test_checkpoint_saves_and_restores_the_cuda_rng_when_cuda_is_present(monkeypatch):
    from fastrl.training import checkpoint as C

    restored: list[tuple[list[int], int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda index: torch.tensor([7, index], dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, index: restored.append((s.tolist(), index)))
    state = C.capture_rng_state()
    assert state["cuda"]["device"] == 1 and state["cuda"]["state"].tolist() == [7, 1]
    C.restore_rng_state(state)
    assert restored == [([7, 1], 1)]
    restored.clear()
    legacy = {**state, "cuda": [torch.tensor([1]), torch.tensor([2]), torch.tensor([3])]}  # one per device, 3 GPUs
    C.restore_rng_state(legacy)
    assert restored == [([1], 0), ([2], 1)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    restored.clear()
    C.restore_rng_state(state)  # CUDA state ignored without CUDA
    assert restored == []
