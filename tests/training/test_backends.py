"""The training-backend seam (fastrl/training/backends.py): plain torch and DeepSpeed ZeRO apply the
same update on one rank, each resumes bit-identically from its own checkpoint, the other's checkpoint
is refused in one line, and the one-process scales train without DeepSpeed.

DeepSpeed runs in this process on its CPU accelerator (one rank, gloo). Tolerance, stated: after
3 AdamW steps (warm-up, weight decay, clipping active, ragged micro-batches) torch and DeepSpeed
ZeRO-0/2 agree to 1e-6 absolute in every parameter and 1e-6 relative in the grad norm (float32
round-off: DeepSpeed sums gradients in its own flat buffers and clips with its own norm kernel).
The six DeepSpeed cases took 305 s on the 2-core box at load average ~10 (marked slow).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from fastrl.config import ModelConfig, OptimConfig, TrainerConfig, load_config  # noqa: E402
from fastrl.training.actor import Actor  # noqa: E402
from fastrl.training.backends import backend_name  # noqa: E402
from tests.training.scripts import tiny  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OPTIM = OptimConfig(lr=1e-2, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-3, grad_clip=1.0, warmup_steps=2)
TORCH = TrainerConfig(optim=OPTIM, zero_stage=0, use_deepspeed=False, seed=3)
MODEL = ModelConfig(dtype="float32", gradient_checkpointing=False)
ATOL = 1e-6  # parameters, absolute
RTOL = 1e-6  # grad norm, relative
MICRO = [[0, 1], [2], [3, 4, 5]]  # ragged micro-batches of fixed_batch's rows

deepspeed = pytest.importorskip("deepspeed", reason="the DeepSpeed backend needs deepspeed")


def _ds(stage: int) -> TrainerConfig:
    return replace(TORCH, use_deepspeed=True, zero_stage=stage)


def _train(actor: Actor, steps: int) -> list[float]:
    ids, attn, mask = tiny.fixed_batch()
    norms = []
    for _ in range(steps):
        for rows in MICRO:
            actor.backward(tiny.micro_loss(actor.module, ids[rows], attn[rows], mask[rows], int(mask.sum())))
        norms.append(actor.step()["actor/grad_norm"])
    return norms


def _params(actor: Actor) -> dict[str, torch.Tensor]:
    return dict(actor.named_parameters_for_sync())


@pytest.mark.deepspeed
@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 2])
def test_torch_update_equals_deepspeed(stage: int) -> None:
    plain, ds = Actor(tiny.tiny_qwen2(), TORCH, MODEL), Actor(tiny.tiny_qwen2(), _ds(stage), MODEL)
    assert (plain.backend.name, ds.backend.name) == ("torch", "deepspeed")
    norms_plain, norms_ds = _train(plain, 3), _train(ds, 3)
    assert norms_plain[0] > OPTIM.grad_clip  # clipping is active
    assert norms_ds == pytest.approx(norms_plain, rel=RTOL)
    a, b = _params(plain), _params(ds)
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= ATOL
    assert plain.current_lr() == ds.current_lr()


@pytest.mark.deepspeed
@pytest.mark.slow
@pytest.mark.parametrize("trainer", [TORCH, _ds(2)], ids=["torch", "deepspeed-zero2"])
def test_resume_is_bit_identical_per_backend(trainer: TrainerConfig, tmp_path: Path) -> None:
    straight = Actor(tiny.tiny_qwen2(), trainer, MODEL)
    _train(straight, 2)
    straight.save(tmp_path / "ckpt", {"step": 2})
    norms_straight = _train(straight, 2)
    resumed = Actor(tiny.tiny_qwen2(seed=7), trainer, MODEL)  # other weights: all must come from the file
    assert resumed.load(tmp_path / "ckpt") == {"step": 2}
    assert resumed.num_steps == 2
    assert _train(resumed, 2) == norms_straight
    a, b = _params(straight), _params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.deepspeed
@pytest.mark.slow
@pytest.mark.parametrize("writer, reader", [(TORCH, _ds(2)), (_ds(2), TORCH)], ids=["torch->ds", "ds->torch"])
def test_other_backends_checkpoint_is_refused_in_one_line(writer: TrainerConfig, reader: TrainerConfig,
                                                          tmp_path: Path) -> None:
    actor = Actor(tiny.tiny_qwen2(), writer, MODEL)
    _train(actor, 1)
    actor.save(tmp_path / "ckpt", {})
    with pytest.raises(ValueError, match=r"written with backend='\w+'.*trainer.use_deepspeed") as err:
        Actor(tiny.tiny_qwen2(), reader, MODEL).load(tmp_path / "ckpt")
    assert "\n" not in str(err.value)


def test_one_process_scales_train_on_torch_and_paper_on_deepspeed() -> None:
    assert backend_name(load_config(scale="smoke").trainer) == "torch"
    assert backend_name(load_config(scale="mini").trainer) == "torch"
    assert backend_name(load_config(scale="paper").trainer) == "deepspeed"


def test_torch_backend_never_imports_deepspeed() -> None:
    """No DeepSpeed import (nor its per-run Muon import, ~1.6 s) on the torch backend."""
    code = ("import sys, torch; from fastrl.config import *; from fastrl.training.actor import Actor;"
            "a = Actor(torch.nn.Linear(2, 1), TrainerConfig(use_deepspeed=False), ModelConfig(dtype='float32'));"
            "a.backward(a.module(torch.ones(1, 2)).sum()); a.step();"
            "print('deepspeed' in sys.modules)")
    # a fresh process, without the distributed variables in-process DeepSpeed tests leave behind
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def test_actor_has_no_backend_branches() -> None:
    source = (REPO / "fastrl" / "training" / "actor.py").read_text()
    assert "use_deepspeed:" not in source and "self.engine" not in source and "import deepspeed" not in source
