"""The actor's plain torch path (the same semantics as the DeepSpeed path, which
test_distributed_zero.py checks against it), the reference builder and the distributed helpers in
a single process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fastrl.config import ConfigError, ModelConfig, OptimConfig, TrainerConfig
from fastrl.training import distributed as D
from fastrl.training.actor import Actor, WarmupLambda, build_reference
from tests.training.scripts import tiny

OPTIM = OptimConfig(lr=1e-2, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-3, grad_clip=1.0, warmup_steps=0, offload=False)
TRAINER = TrainerConfig(optim=OPTIM, zero_stage=0, use_deepspeed=False, seed=3)
MODEL = ModelConfig(dtype="float32", gradient_checkpointing=False)


def _actor(model: torch.nn.Module, trainer: TrainerConfig = TRAINER, model_cfg: ModelConfig = MODEL) -> Actor:
    return Actor(model, trainer, model_cfg)


def _with_optim(**changes: object) -> TrainerConfig:
    return replace(TRAINER, optim=replace(OPTIM, **changes))


def _step_on_rows(actor: Actor, micro: list[list[int]]) -> dict[str, float]:
    ids, attn, mask = tiny.fixed_batch()
    global_tokens = int(mask.sum())
    for rows in micro:
        actor.backward(tiny.micro_loss(actor.module, ids[rows], attn[rows], mask[rows], global_tokens))
    return actor.step()


def _params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"lr": 0.0}, "trainer.optim.lr = 0.0"),
        ({"betas": (0.9, 1.0)}, "trainer.optim.betas"),
        ({"eps": 0.0}, "trainer.optim.eps = 0.0"),
        ({"grad_clip": -1.0}, "trainer.optim.grad_clip = -1.0"),
        ({"warmup_steps": -1}, "trainer.optim.warmup_steps = -1"),
        ({"offload": True}, "trainer.optim.offload = true needs DeepSpeed"),
    ],
)
def test_optim_errors_name_the_key(change: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        _with_optim(**change)


def test_actor_checks_the_sections_it_reads() -> None:
    """The actor reads the run config's sections as they are, with their checks (no second schema)."""
    with pytest.raises(ConfigError, match="trainer.zero_stage = 4"):
        replace(TRAINER, zero_stage=4)
    with pytest.raises(ConfigError, match="model.dtype = bfloat16 needs trainer.use_deepspeed"):
        _actor(torch.nn.Linear(2, 2), TRAINER, replace(MODEL, dtype="bfloat16"))


def test_ragged_micro_batches_equal_one_backward_and_manual_adamw() -> None:
    """Sum semantics: 3 ragged micro-batches == one backward on the whole batch == a hand-written
    clip + AdamW step on the full-batch gradient."""
    whole = _actor(tiny.tiny_qwen2(seed=0))
    m_whole = _step_on_rows(whole, [[0, 1, 2, 3, 4, 5]])
    ragged = _actor(tiny.tiny_qwen2(seed=0))
    m_ragged = _step_on_rows(ragged, [[0, 4], [1], [2, 3, 5]])
    assert m_ragged["actor/grad_norm"] == pytest.approx(m_whole["actor/grad_norm"], rel=1e-6)
    assert _max_diff(_params(ragged.model), _params(whole.model)) < 1e-6

    manual = tiny.tiny_qwen2(seed=0)
    ids, attn, mask = tiny.fixed_batch()
    tiny.micro_loss(manual, ids, attn, mask, int(mask.sum())).backward()
    norm = torch.nn.utils.clip_grad_norm_(manual.parameters(), OPTIM.grad_clip)
    opt = torch.optim.AdamW(manual.parameters(), lr=OPTIM.lr, betas=OPTIM.betas, eps=OPTIM.eps,
                            weight_decay=OPTIM.weight_decay)
    opt.step()
    assert m_whole["actor/grad_norm"] == pytest.approx(float(norm), rel=1e-6)
    assert m_whole["actor/grad_norm"] > OPTIM.grad_clip  # clipping was active
    assert _max_diff(_params(whole.model), _params(manual)) < 1e-7
    # Not vacuous: the step moved the weights far more than the tolerance.
    assert _max_diff(_params(whole.model), _params(tiny.tiny_qwen2(seed=0))) > 1e-3


def test_grad_clip_zero_disables_clipping_but_reports_norm() -> None:
    cfg = replace(OPTIM, grad_clip=0.0)
    actor = _actor(tiny.tiny_qwen2(seed=0), _with_optim(grad_clip=0.0))
    m = _step_on_rows(actor, [[0, 1, 2, 3, 4, 5]])
    manual = tiny.tiny_qwen2(seed=0)
    ids, attn, mask = tiny.fixed_batch()
    tiny.micro_loss(manual, ids, attn, mask, int(mask.sum())).backward()
    norm = torch.sqrt(sum((p.grad**2).sum() for p in manual.parameters()))
    torch.optim.AdamW(manual.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                      weight_decay=cfg.weight_decay).step()
    assert m["actor/grad_norm"] == pytest.approx(float(norm), rel=1e-5)
    assert _max_diff(_params(actor.model), _params(manual)) < 1e-7


def test_warmup_schedule_and_reported_lr() -> None:
    assert [WarmupLambda(3)(t) for t in range(5)] == [1 / 3, 2 / 3, 1.0, 1.0, 1.0]
    assert WarmupLambda(0)(0) == 1.0
    torch.manual_seed(0)
    actor = _actor(torch.nn.Linear(3, 1), _with_optim(warmup_steps=3))
    lrs = []
    for _ in range(4):
        actor.backward(actor.module(torch.ones(2, 3)).sum())
        lrs.append(actor.step()["actor/lr"])
    assert lrs == pytest.approx([OPTIM.lr / 3, 2 * OPTIM.lr / 3, OPTIM.lr, OPTIM.lr], rel=1e-12)
    assert actor.num_steps == 4


def test_step_and_backward_errors() -> None:
    torch.manual_seed(0)
    actor = _actor(torch.nn.Linear(3, 1))
    with pytest.raises(ValueError, match="backward\\(\\) calls since the last step per rank = \\[0\\]"):
        actor.step()
    out = actor.module(torch.ones(2, 3))
    with pytest.raises(ValueError, match="scalar"):
        actor.backward(out)
    with pytest.raises(ValueError, match="not finite"):
        actor.backward(out.sum() * float("nan"))
    frozen = torch.nn.Linear(3, 1).requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter with requires_grad"):
        _actor(frozen)


def test_named_parameters_for_sync_are_hf_named_copies() -> None:
    model = tiny.tiny_qwen2(seed=0)
    actor = _actor(model)
    synced = list(actor.named_parameters_for_sync())
    assert [n for n, _ in synced] == [n for n, _ in model.named_parameters()]
    assert "model.embed_tokens.weight" in dict(synced)
    name, t = synced[0]
    before = dict(model.named_parameters())[name].detach().clone()
    t.add_(1.0)  # a copy: the consumer may keep or modify it
    assert torch.equal(dict(model.named_parameters())[name].detach(), before)


def test_export_hf_roundtrip_replaces_atomically(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    class FakeTokenizer:
        def save_pretrained(self, out: str) -> None:
            (Path(out) / "tokenizer_marker.txt").write_text("tok")

    actor = _actor(tiny.tiny_qwen2(seed=0))
    out = tmp_path / "hf"
    actor.export_hf(out)
    _step_on_rows(actor, [[0, 1, 2, 3, 4, 5]])
    actor.export_hf(out, tokenizer=FakeTokenizer())  # replaces the first export
    assert (out / "tokenizer_marker.txt").read_text() == "tok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no temp/old folders left
    loaded = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager")
    assert _max_diff(_params(loaded), _params(actor.model)) == 0.0
    ids, attn, _ = tiny.fixed_batch()
    with torch.no_grad():
        assert torch.equal(tiny.token_logp(loaded, ids, attn), tiny.token_logp(actor.model, ids, attn))
    with pytest.raises(TypeError, match="save_pretrained"):
        _actor(torch.nn.Linear(2, 2)).export_hf(tmp_path / "x")


def test_build_reference_from_module_and_path(tmp_path: Path) -> None:
    model = tiny.tiny_qwen2(seed=0)
    ref = build_reference(model)
    assert not ref.training
    assert not any(p.requires_grad for p in ref.parameters())
    actor = _actor(model)
    _step_on_rows(actor, [[0, 1, 2, 3, 4, 5]])
    # The reference is a copy: the actor's update did not touch it.
    assert _max_diff(_params(ref), _params(tiny.tiny_qwen2(seed=0))) == 0.0

    actor.export_hf(tmp_path / "policy")
    from_path = build_reference(tmp_path / "policy")
    assert _max_diff(_params(from_path), _params(actor.model)) == 0.0
    assert not any(p.requires_grad for p in from_path.parameters())

    loaded_with = build_reference(tmp_path / "policy", loader=lambda p: tiny.tiny_qwen2(seed=7))
    assert _max_diff(_params(loaded_with), _params(tiny.tiny_qwen2(seed=7))) == 0.0

    bf16_trainer = replace(TRAINER, use_deepspeed=True, zero_stage=2)  # no engine is built
    assert next(build_reference(model, bf16_trainer, replace(MODEL, dtype="bfloat16")).parameters()).dtype == torch.bfloat16

    partitioned = tiny.tiny_qwen2(seed=0)
    next(partitioned.parameters()).ds_id = 0  # what ZeRO-3 marks partitioned parameters with
    with pytest.raises(ValueError, match="ZeRO-3-partitioned"):
        build_reference(partitioned)


def test_gradient_checkpointing_gives_same_step() -> None:
    plain = _actor(tiny.tiny_qwen2(seed=0))
    ckpt = _actor(tiny.tiny_qwen2(seed=0), TRAINER, replace(MODEL, gradient_checkpointing=True))
    assert ckpt.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    m1 = _step_on_rows(plain, [[0, 1, 2], [3, 4, 5]])
    m2 = _step_on_rows(ckpt, [[0, 1, 2], [3, 4, 5]])
    assert m1["actor/grad_norm"] == pytest.approx(m2["actor/grad_norm"], rel=1e-6)
    assert _max_diff(_params(plain.model), _params(ckpt.model)) < 1e-7
    with pytest.raises(ValueError, match="gradient_checkpointing_enable"):
        _actor(torch.nn.Linear(2, 2), TRAINER, replace(MODEL, gradient_checkpointing=True))


def test_seed_does_not_touch_the_callers_rng() -> None:
    model = torch.nn.Linear(2, 2)
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    _actor(model)
    assert torch.equal(torch.rand(3), expected)


def test_distributed_helpers_in_one_plain_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    D.init_distributed()  # without a launcher: nothing to initialise
    assert not D.is_initialized()
    assert (D.rank(), D.world_size(), D.is_main(), D.local_rank()) == (0, 1, True, 0)
    D.barrier()
    x = torch.tensor([1.0, 2.0])
    y = D.all_reduce_sum(x)
    assert torch.equal(y, x) and y is not x
    assert D.all_reduce_sum(2) == 2.0 and isinstance(D.all_reduce_sum(2), float)
    assert D.all_gather_object({"a": 1}) == [{"a": 1}]
    assert D.broadcast_object([3]) == [3]
    model = torch.nn.Linear(2, 2)
    with D.gather_params(model):
        assert model.weight.shape == (2, 2)
    assert D.default_backend() in ("gloo", "nccl")


def test_init_distributed_env_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        D.init_distributed()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="RANK=2 is outside"):
        D.init_distributed()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK='x'"):
        D.init_distributed()
    assert not D.is_initialized()


def test_vl_policy_export_and_reference_from_path(tmp_path: Path) -> None:
    """Qwen2.5-VL is not an AutoModelForCausalLM: export_hf and build_reference(path) must still
    round-trip it (the paper's main policies are VL models)."""
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.models.loaders import load_policy

    spec = TinyModelSpec(kind="qwen2_5_vl", hidden_size=64, num_heads=2, head_dim=32, intermediate_size=128)
    src = build_tiny_model_dir(spec, tmp_path / "src", seed=0)
    model, _ = load_policy(src)
    actor = _actor(model)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    attn = torch.ones_like(ids)
    actor.backward(tiny.token_logp(actor.module, ids, attn).sum() * -1.0)
    actor.step()
    actor.export_hf(tmp_path / "out")
    ref = build_reference(tmp_path / "out")
    assert type(ref).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert not any(p.requires_grad for p in ref.parameters())
    assert _max_diff(_params(ref), _params(actor.model)) == 0.0
    with torch.no_grad():
        assert torch.allclose(tiny.token_logp(ref, ids, attn), tiny.token_logp(actor.model, ids, attn), atol=1e-5)
