"""The training backends behind :class:`fastrl.training.actor.Actor`: plain torch and DeepSpeed ZeRO.

A backend owns what differs between them: wrapping the model with its optimizer and LR schedule,
``backward``, the optimizer ``step`` (clip, AdamW, schedule, zero the grads), the checkpoint files,
the gather of (possibly partitioned) parameters for a weight sync, and where a frozen reference
model goes. The :class:`Actor` keeps the contracts they share (loss scaling to a sum over ranks,
backward counts, finiteness checks, the step counter, the checkpoint's meta file).

* ``torch`` (:class:`TorchBackend`): :class:`ClippingAdamW` on the model itself; on more than one
  rank every rank starts from rank 0's weights and gradients are all-reduced (summed) before the
  step, as DDP. No DeepSpeed import. fp32 only.
* ``deepspeed`` (:class:`DeepSpeedBackend`): ``deepspeed.initialize`` with ZeRO stage
  ``trainer.zero_stage`` (0-3), bf16 with fp32 master weights, optimizer offload.

Both apply the same update: the global gradient norm clipped to ``trainer.optim.grad_clip``, then
``torch.optim.AdamW`` (same betas, eps, decoupled weight decay) at the linear warm-up's LR. On one
rank in fp32 one step agrees to float round-off (tests/training/test_backends.py states the
tolerance). A checkpoint resumes only under the backend that wrote it (the Actor refuses the other
in one line): their files hold different things (DeepSpeed's per-rank optimizer partitions).

A new backend implements :class:`Backend` and registers a factory in :data:`BACKENDS`;
:func:`backend_name` maps the trainer section to its name.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import torch
from torch.optim.lr_scheduler import LambdaLR

from fastrl.config import OptimConfig, TrainerConfig
from fastrl.training import distributed as D

PLAIN_STATE_FILE = "actor_state.pt"
DS_TAG = "actor"  # fixed DeepSpeed tag: the checkpoint folder can be renamed after writing


class WarmupLambda:
    """LR multiplier of step t (0-based): ``min(1, (t + 1) / warmup)``; constant 1 without warm-up.

    A class (not a closure) so that ``LambdaLR.state_dict`` round-trips it.
    """

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps

    def __call__(self, step: int) -> float:
        if self.warmup_steps <= 0:
            return 1.0
        return min(1.0, (step + 1) / self.warmup_steps)


class ClippingAdamW(torch.optim.AdamW):
    """AdamW that clips the global grad norm itself and records it as ``_global_grad_norm``.

    Used where no DeepSpeed wrapper clips for us: the torch backend, and DeepSpeed stage 0 in fp32
    (there DeepSpeed calls the client optimizer directly and reads ``_global_grad_norm`` back).
    Never use it under ZeRO >= 1 or bf16: those optimizers step on per-rank partitions, whose norm
    is not the global one.
    """

    def __init__(self, params: Any, *, max_norm: float, **adamw_kwargs: Any) -> None:
        super().__init__(params, **adamw_kwargs)
        self.max_norm = max_norm
        self._global_grad_norm: float | None = None

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        params = [p for g in self.param_groups for p in g["params"]]
        for p in params:
            # A parameter that got no gradient this step (e.g. a vision tower on a text-only batch)
            # counts as a zero gradient, as in DeepSpeed's stages 0-3 (measured): AdamW still
            # decays it and advances its moments, instead of skipping it.
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        # clip_grad_norm_ with max_norm=inf only measures (the clip coefficient is 1).
        limit = self.max_norm if self.max_norm > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, limit)
        self._global_grad_norm = float(norm)
        return super().step(closure)


def adamw_kwargs(o: OptimConfig) -> dict[str, Any]:
    return {"lr": o.lr, "betas": tuple(o.betas), "eps": o.eps, "weight_decay": o.weight_decay}


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"Actor: {type(model).__name__} has no parameter with requires_grad=True")
    return params


def deepspeed_config(trainer: TrainerConfig, bf16: bool) -> dict[str, Any]:
    """The DeepSpeed config the actor uses (also what an ``HfDeepSpeedConfig`` needs for ZeRO-3
    init-time partitioning of large models at load time).

    Micro-batch size and accumulation steps are nominal (1/1): the caller owns accumulation
    (``managed_gradient_accumulation=false``), so DeepSpeed never rescales by them.
    """
    zero: dict[str, Any] = {"stage": trainer.zero_stage}
    if trainer.optim.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    # Stage 0 in fp32 hands the raw client optimizer to DeepSpeed: ClippingAdamW clips there.
    ds_clips = not (trainer.zero_stage == 0 and not bf16)
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": trainer.optim.grad_clip if ds_clips else 0.0,
        "bf16": {"enabled": bf16},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,  # silence DeepSpeed's own progress lines
        "wall_clock_breakdown": False,
    }


class Backend(Protocol):
    """What the Actor needs from a training backend (see the module docstring)."""

    name: str
    module: torch.nn.Module  # what forward passes that are backpropagated are called on
    model: torch.nn.Module  # the wrapped HF model (names, config, generate, save_pretrained)
    scheduler: Any  # its LR schedule (get_last_lr)

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate d(loss)/dθ as given: ``loss`` is already scaled to a sum over ranks' terms."""

    def step(self) -> float:
        """Reduce, clip, AdamW, advance the schedule, zero the grads; the global norm before clipping."""

    def gather(self, params: Iterable[torch.nn.Parameter]) -> AbstractContextManager[None]:
        """The parameters whole inside the block (collective where they are partitioned)."""

    def meta(self) -> dict[str, Any]:
        """What a checkpoint must match to resume: ``backend`` and ``zero_stage``."""

    def save(self, ckpt_dir: Path, client_state: dict[str, Any]) -> None:
        """Model + optimizer + schedule (+ ``client_state``) into ``ckpt_dir``; collective."""

    def load(self, ckpt_dir: Path, client_keys: set[str]) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns the ``client_state`` (``client_keys`` only)."""


class TorchBackend:
    """Plain torch: the model itself, :class:`ClippingAdamW` and a warm-up ``LambdaLR``."""

    name = "torch"

    def __init__(self, model: torch.nn.Module, trainer: TrainerConfig, bf16: bool) -> None:
        D.init_distributed()  # no-op in a plain process; joins the launcher's group otherwise
        self.model = self.module = model
        if D.world_size() > 1:
            # Every rank starts from rank 0's weights (DDP does the same).
            with torch.no_grad():
                for p in model.parameters():
                    torch.distributed.broadcast(p.data, src=0)
        self.optimizer = ClippingAdamW(trainable(model), max_norm=trainer.optim.grad_clip,
                                       **adamw_kwargs(trainer.optim))
        self.scheduler = LambdaLR(self.optimizer, WarmupLambda(trainer.optim.warmup_steps))

    @staticmethod
    def device(requested: str) -> torch.device:
        """Where the policy trains: ``model.device`` resolved (auto = CUDA when available)."""
        from fastrl.models.device import resolve_device

        return resolve_device(requested)

    @staticmethod
    def place(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        return model.to(device)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _reduce_grads(self) -> None:
        """Sum gradients over ranks (DDP's reduction); a missing grad counts as zero (as in
        ``ClippingAdamW.step``), so every rank joins every all-reduce."""
        if D.world_size() == 1:
            return
        for p in self.model.parameters():
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)

    def step(self) -> float:
        self._reduce_grads()
        self.optimizer.step()
        norm = self.optimizer._global_grad_norm
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        assert norm is not None
        return float(norm)

    def gather(self, params: Iterable[torch.nn.Parameter]) -> AbstractContextManager[None]:
        return D.gather_params(self.model, list(params))

    def meta(self) -> dict[str, Any]:
        return {"backend": self.name, "zero_stage": None}

    def save(self, ckpt_dir: Path, client_state: dict[str, Any]) -> None:
        if D.is_main():
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict(), "client_state": dict(client_state)},
                       ckpt_dir / PLAIN_STATE_FILE)

    def load(self, ckpt_dir: Path, client_keys: set[str]) -> dict[str, Any]:
        blob = torch.load(ckpt_dir / PLAIN_STATE_FILE, map_location="cpu", weights_only=False)
        self.model.load_state_dict(blob["model"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.scheduler.load_state_dict(blob["scheduler"])
        return dict(blob["client_state"])

    @staticmethod
    def place_reference(ref: torch.nn.Module, trainer: TrainerConfig, bf16: bool) -> torch.nn.Module:
        """A frozen reference stays where it was loaded (bf16 never trains here: check_precision)."""
        return ref.to(torch.bfloat16) if bf16 else ref


class DeepSpeedBackend:
    """``deepspeed.initialize`` around the model: ZeRO stage 0-3, bf16, optimizer offload."""

    name = "deepspeed"

    def __init__(self, model: torch.nn.Module, trainer: TrainerConfig, bf16: bool) -> None:
        import deepspeed

        D.init_distributed(single_process_group=True)
        self.zero_stage = trainer.zero_stage
        params, kw = trainable(model), adamw_kwargs(trainer.optim)
        optimizer: torch.optim.Optimizer
        if trainer.optim.offload:
            from deepspeed.ops.adam import DeepSpeedCPUAdam  # JIT-builds cpu_adam on first use

            optimizer = DeepSpeedCPUAdam(params, adamw_mode=True, **kw)
        elif trainer.zero_stage == 0 and not bf16:
            optimizer = ClippingAdamW(params, max_norm=trainer.optim.grad_clip, **kw)
        else:
            optimizer = torch.optim.AdamW(params, **kw)
        warmup = WarmupLambda(trainer.optim.warmup_steps)
        engine, ds_optimizer, _, scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=lambda opt: LambdaLR(opt, warmup),
            config=deepspeed_config(trainer, bf16), dist_init_required=False,
        )
        # Forward passes go through the engine: its forward installs ZeRO's backward-prologue hooks.
        self.module, self.model = engine, engine.module
        self.engine, self.optimizer, self.scheduler = engine, ds_optimizer, scheduler

    @staticmethod
    def device(requested: str) -> torch.device:
        """DeepSpeed's accelerator device, checked against ``model.device``."""
        from fastrl.models.device import check_deepspeed_device, deepspeed_device

        device = deepspeed_device()
        check_deepspeed_device(requested, device)
        return device

    @staticmethod
    def place(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        return model  # deepspeed.initialize moves the model itself

    def backward(self, loss: torch.Tensor) -> None:
        # DeepSpeed averages over data-parallel ranks: scale up so the result is the sum.
        self.engine.backward(loss * D.world_size(), scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        if norm is None:
            raise RuntimeError("DeepSpeed returned no global grad norm after step()")
        return float(norm)

    def gather(self, params: Iterable[torch.nn.Parameter]) -> AbstractContextManager[None]:
        return D.gather_params(self.model, list(params))

    def meta(self) -> dict[str, Any]:
        return {"backend": self.name, "zero_stage": self.zero_stage}

    def save(self, ckpt_dir: Path, client_state: dict[str, Any]) -> None:
        self.engine.save_checkpoint(str(ckpt_dir), tag=DS_TAG, client_state=dict(client_state), save_latest=False)

    def load(self, ckpt_dir: Path, client_keys: set[str]) -> dict[str, Any]:
        path, client_state = self.engine.load_checkpoint(
            str(ckpt_dir), tag=DS_TAG, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if path is None:
            raise ValueError(f"Actor.load: DeepSpeed found no checkpoint under {ckpt_dir}/{DS_TAG}")
        # DeepSpeed adds its own keys (e.g. "optimizer") to the client state: hand back only ours.
        return {k: v for k, v in client_state.items() if k in client_keys}

    @staticmethod
    def place_reference(ref: torch.nn.Module, trainer: TrainerConfig, bf16: bool) -> torch.nn.Module:
        """ZeRO-3: an optimizer-less ZeRO-3 engine; otherwise a copy on the actor's device."""
        if trainer.zero_stage == 3:
            return _zero3_reference_engine(ref, bf16)
        from deepspeed.accelerator import get_accelerator

        # Where DeepSpeed put the actor (cuda:LOCAL_RANK on GPUs, cpu under DS_ACCELERATOR=cpu).
        return (ref.to(torch.bfloat16) if bf16 else ref).to(get_accelerator().current_device_name())


def _zero3_reference_engine(ref: torch.nn.Module, bf16: bool) -> torch.nn.Module:
    """``ref`` inside an optimizer-less ZeRO-3 engine (partitioned, gathered in forward)."""
    import deepspeed

    D.init_distributed(single_process_group=True)
    ds_cfg = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": bf16},
        "zero_optimization": {"stage": 3},
        "steps_per_print": 2**31 - 1,
    }
    engine, *_ = deepspeed.initialize(model=ref, config=ds_cfg, dist_init_required=False)
    engine.eval()
    return engine


BACKENDS: dict[str, type[TorchBackend] | type[DeepSpeedBackend]] = {
    TorchBackend.name: TorchBackend,
    DeepSpeedBackend.name: DeepSpeedBackend,
}


def backend_name(trainer: TrainerConfig) -> str:
    """The backend a trainer section selects (``trainer.use_deepspeed``)."""
    return DeepSpeedBackend.name if trainer.use_deepspeed else TorchBackend.name


def build_backend(model: torch.nn.Module, trainer: TrainerConfig, bf16: bool) -> Backend:
    return BACKENDS[backend_name(trainer)](model, trainer, bf16)
