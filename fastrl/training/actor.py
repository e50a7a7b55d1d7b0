"""The actor: one trainable policy behind a DeepSpeed ZeRO engine (stages 0-3) or plain torch AdamW.

Modelled on OpenRLHF's DeepSpeed strategy, kept small. Both paths have the same semantics:

* **Gradient = sum over ranks.** The caller normalises each micro-batch loss so that the correct
  gradient is the SUM over data-parallel ranks of every rank's gradient (e.g. a token-mean loss
  divided by the GLOBAL token count of the mini-batch, summed over ranks). DeepSpeed (and DDP)
  average gradients over the ``W`` data-parallel ranks, so :meth:`Actor.backward` multiplies the
  loss by ``W`` (exact in floating point for ``W`` a power of two). No ``1/gas`` scaling is done.
* **Any number of micro-batches per optimizer step.** DeepSpeed runs with
  ``managed_gradient_accumulation=false``: ``backward`` only accumulates, ``step`` is the
  boundary. Pruning makes the kept set ragged, but EVERY RANK MUST MAKE THE SAME NUMBER OF
  ``backward`` CALLS between two ``step`` calls: ZeRO-2/3 reduce gradients inside ``backward``,
  a collective, and a rank that skips one deadlocks the others (``step`` also checks the counts
  and raises if they differ, which catches the stage-0/1 and plain cases that would not hang).
  A rank with nothing left to train must still call ``backward`` on a zero loss that touches the
  graph (e.g. ``0 * logits.sum()``).
* **One optimizer step** clips the global gradient norm to ``trainer.optim.grad_clip`` (0: no clipping),
  applies AdamW with the learning rate of a linear warm-up schedule, then zeroes the gradients.
  The reported ``actor/grad_norm`` is the global norm BEFORE clipping. A trainable parameter that
  received no gradient counts as having a zero gradient (weight decay still applies), on both
  paths.

Forward passes go through :attr:`Actor.module`. Under DeepSpeed that is the engine itself (an
``nn.Module`` whose attribute lookups fall through to the wrapped model): the engine's forward
installs the backward-prologue hooks that ZeRO needs, so calling ``engine.module`` directly for a
pass that is later backpropagated is wrong. :attr:`Actor.model` is the wrapped HF model (names,
config, ``generate``).

All ranks must build the same initial model (same seed or same weights). DeepSpeed checkpoints
store per-rank optimizer partitions: they resume only with the same world size and ZeRO stage
(:meth:`Actor.load` checks and says so).
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from torch.optim.lr_scheduler import LambdaLR

from fastrl import metric_keys as K
from fastrl.config import ModelConfig, OptimConfig, TrainerConfig, check_precision
from fastrl.training import distributed as D

_META_FILE = "actor_meta.json"
_PLAIN_STATE_FILE = "actor_state.pt"
_DS_TAG = "actor"  # fixed DeepSpeed tag: the checkpoint folder can be renamed after writing


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

    Used where no DeepSpeed wrapper clips for us: the plain path, and DeepSpeed stage 0 in fp32
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


def _enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise ValueError(
            f"gradient_checkpointing=True but {type(model).__name__} has no "
            "gradient_checkpointing_enable() (an HF PreTrainedModel is needed)"
        )
    # Non-reentrant checkpointing works with ZeRO-3's parameter hooks and frozen inputs.
    enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "use_cache"):
        config.use_cache = False  # a KV cache is useless (and warned about) while checkpointing


def is_bf16(model_config: ModelConfig) -> bool:
    """DeepSpeed bf16 weights and compute (fp32 master weights) for ``model.dtype = bfloat16``."""
    return model_config.dtype == "bfloat16"


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


class Actor:
    """The trainable policy. See the module docstring for the gradient and rank contracts.

    It reads its settings from the run config's own sections: ``trainer.optim`` (AdamW, clipping,
    warm-up, offload), ``trainer.use_deepspeed`` / ``zero_stage`` / ``seed`` (the seed forks the
    RNG around the engine's construction only) and ``model.dtype`` / ``gradient_checkpointing``.
    """

    def __init__(self, model: torch.nn.Module, trainer: TrainerConfig, model_config: ModelConfig) -> None:
        check_precision(model_config, trainer)
        self.trainer = trainer
        self.optim: OptimConfig = trainer.optim
        self.bf16 = is_bf16(model_config)
        self._backward_calls = 0  # since the last step
        self._steps = 0
        if model_config.gradient_checkpointing:
            _enable_gradient_checkpointing(model)
        model.train()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(trainer.seed)
            if trainer.use_deepspeed:
                self._init_deepspeed(model)
            else:
                self._init_plain(model)

    # ---------------------------------------------------------------- construction
    def _adamw_kwargs(self) -> dict[str, Any]:
        o = self.optim
        return {"lr": o.lr, "betas": tuple(o.betas), "eps": o.eps, "weight_decay": o.weight_decay}

    def _init_plain(self, model: torch.nn.Module) -> None:
        D.init_distributed()  # no-op in a plain process; joins the launcher's group otherwise
        self.engine = None
        self.model = model
        if D.world_size() > 1:
            # Every rank starts from rank 0's weights (DDP does the same).
            with torch.no_grad():
                for p in model.parameters():
                    torch.distributed.broadcast(p.data, src=0)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"Actor: {type(model).__name__} has no parameter with requires_grad=True")
        self.optimizer = ClippingAdamW(params, max_norm=self.optim.grad_clip, **self._adamw_kwargs())
        self.scheduler = LambdaLR(self.optimizer, WarmupLambda(self.optim.warmup_steps))

    def _init_deepspeed(self, model: torch.nn.Module) -> None:
        import deepspeed

        D.init_distributed(single_process_group=True)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"Actor: {type(model).__name__} has no parameter with requires_grad=True")
        optimizer: torch.optim.Optimizer
        if self.optim.offload:
            from deepspeed.ops.adam import DeepSpeedCPUAdam  # JIT-builds cpu_adam on first use

            optimizer = DeepSpeedCPUAdam(params, adamw_mode=True, **self._adamw_kwargs())
        elif self.trainer.zero_stage == 0 and not self.bf16:
            optimizer = ClippingAdamW(params, max_norm=self.optim.grad_clip, **self._adamw_kwargs())
        else:
            optimizer = torch.optim.AdamW(params, **self._adamw_kwargs())
        warmup = WarmupLambda(self.optim.warmup_steps)
        engine, ds_optimizer, _, scheduler = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            lr_scheduler=lambda opt: LambdaLR(opt, warmup),
            config=deepspeed_config(self.trainer, self.bf16),
            dist_init_required=False,
        )
        self.engine = engine
        self.model = engine.module
        self.optimizer = ds_optimizer
        self.scheduler = scheduler

    # ---------------------------------------------------------------- training
    @property
    def module(self) -> torch.nn.Module:
        """What to call forward on: the DeepSpeed engine, or the plain model."""
        return self.engine if self.engine is not None else self.model

    @property
    def dp_world_size(self) -> int:
        return D.world_size()

    @property
    def num_steps(self) -> int:
        """Optimizer steps taken (restored by :meth:`load`)."""
        return self._steps

    def current_lr(self) -> float:
        """The learning rate the next :meth:`step` applies."""
        return float(self.scheduler.get_last_lr()[0])

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradient of ``loss`` (a scalar already normalised globally, see module
        docstring). Every rank must call this the same number of times per step."""
        if loss.dim() != 0:
            raise ValueError(f"Actor.backward: loss must be a scalar, got shape {tuple(loss.shape)}")
        if not torch.isfinite(loss.detach()).item():
            raise ValueError(f"Actor.backward: loss is not finite ({loss.item()}) at step {self._steps}")
        if self.engine is not None:
            # DeepSpeed averages over data-parallel ranks: scale up so the result is the sum.
            self.engine.backward(loss * self.dp_world_size, scale_wrt_gas=False)
        else:
            loss.backward()
        self._backward_calls += 1

    def _check_backward_counts(self) -> None:
        counts = D.all_gather_object(self._backward_calls)
        if self._backward_calls == 0 or len(set(counts)) > 1:
            raise ValueError(
                f"Actor.step at step {self._steps}: backward() calls since the last step per rank "
                f"= {counts}; every rank must call backward() at least once and the same number "
                "of times per optimizer step"
            )

    def _plain_reduce_grads(self) -> None:
        """Sum gradients over ranks (the plain path's DDP); a missing grad counts as zero (as in
        ``ClippingAdamW.step``), so every rank joins every all-reduce."""
        if D.world_size() == 1:
            return
        for p in self.model.parameters():
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)

    def step(self) -> dict[str, float]:
        """One optimizer step over everything accumulated since the last one; zeroes the grads.

        Returns ``{"actor/grad_norm": global norm before clipping, "actor/lr": lr applied}``.
        """
        self._check_backward_counts()
        lr = self.current_lr()
        if self.engine is not None:
            self.engine.step()
            norm = self.engine.get_global_grad_norm()
            if norm is None:
                raise RuntimeError("DeepSpeed returned no global grad norm after step()")
        else:
            self._plain_reduce_grads()
            self.optimizer.step()
            norm = self.optimizer._global_grad_norm
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        grad_norm = float(norm)
        if not math.isfinite(grad_norm):
            raise ValueError(f"Actor.step: gradient norm is {grad_norm} at step {self._steps}")
        self._backward_calls = 0
        self._steps += 1
        return {K.ACTOR_GRAD_NORM: grad_norm, K.ACTOR_LR: lr}

    # ---------------------------------------------------------------- weights out
    def named_parameters_for_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(hf_name, full tensor)`` for every parameter, one at a time.

        Under ZeRO-3 each parameter is gathered alone, copied, and released before it is yielded,
        so at most one full parameter (plus the consumer's copy) is alive: never the whole model.
        Gathering is collective: EVERY rank must exhaust this iterator, in step. The tensors are
        detached copies (safe to keep); dtype is the training dtype (bf16 under DeepSpeed bf16).
        """
        for name, p in self.model.named_parameters():
            with D.gather_params(self.model, [p]):
                full = p.data.detach().clone()
            yield name, full

    def _full_state_dict_on_main(self) -> dict[str, torch.Tensor] | None:
        """Consolidated CPU state dict on rank 0 (None elsewhere), gathered one tensor at a time."""
        sd: dict[str, torch.Tensor] = {}
        for name, tensor in self.named_parameters_for_sync():
            if D.is_main():
                sd[name] = tensor.cpu()
        # Buffers are never partitioned by ZeRO; non-persistent ones are not part of a checkpoint.
        non_persistent = {
            f"{mod_name}.{b}" if mod_name else b
            for mod_name, mod in self.model.named_modules()
            for b in getattr(mod, "_non_persistent_buffers_set", ())
        }
        for name, buf in self.model.named_buffers():
            if D.is_main() and name not in non_persistent:
                sd[name] = buf.detach().cpu().clone()
        return sd if D.is_main() else None

    def export_hf(self, out_dir: Path, tokenizer: Any = None) -> None:
        """Consolidated HF ``save_pretrained`` into ``out_dir`` (replaced atomically by rank 0).

        Collective (ZeRO-3 gathers): every rank calls it. Only rank 0 writes.
        """
        out_dir = Path(out_dir)
        save_pretrained = getattr(self.model, "save_pretrained", None)
        if save_pretrained is None:
            raise TypeError(f"export_hf: {type(self.model).__name__} has no save_pretrained()")
        sd = self._full_state_dict_on_main()
        if D.is_main():
            assert sd is not None
            tmp = out_dir.with_name(f".tmp-{out_dir.name}")
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
            save_pretrained(str(tmp), state_dict=sd, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp))
            _replace_dir(tmp, out_dir)
        D.barrier()

    # ---------------------------------------------------------------- checkpoints
    def _meta(self) -> dict[str, Any]:
        return {
            "backend": "deepspeed" if self.engine is not None else "torch",
            "zero_stage": self.trainer.zero_stage if self.engine is not None else None,
            "world_size": D.world_size(),
            "steps": self._steps,
            "optim": asdict(self.optim),
            "bf16": self.bf16,
        }

    def save(self, ckpt_dir: Path, client_state: dict[str, Any]) -> None:
        """Model + optimizer + LR-scheduler state (+ ``client_state``) into ``ckpt_dir``.

        Collective: every rank calls it (DeepSpeed writes per-rank optimizer partitions).
        """
        ckpt_dir = Path(ckpt_dir)
        bad = [k for k in client_state if not isinstance(k, str)]
        if bad:
            raise ValueError(f"Actor.save: client_state keys must be strings, got {bad!r}")
        if D.is_main():
            ckpt_dir.mkdir(parents=True, exist_ok=True)
        D.barrier()
        if self.engine is not None:
            self.engine.save_checkpoint(
                str(ckpt_dir), tag=_DS_TAG, client_state=dict(client_state), save_latest=False
            )
        elif D.is_main():
            torch.save(
                {
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "client_state": dict(client_state),
                },
                ckpt_dir / _PLAIN_STATE_FILE,
            )
        if D.is_main():
            meta = {**self._meta(), "client_keys": sorted(client_state)}
            (ckpt_dir / _META_FILE).write_text(json.dumps(meta, indent=1))
        D.barrier()

    def load(self, ckpt_dir: Path) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns its ``client_state``. Collective."""
        ckpt_dir = Path(ckpt_dir)
        meta_path = ckpt_dir / _META_FILE
        if not meta_path.is_file():
            raise ValueError(f"Actor.load: {meta_path} does not exist (not an actor checkpoint)")
        meta = json.loads(meta_path.read_text())
        mine = self._meta()
        for key in ("backend", "zero_stage", "world_size"):
            if meta[key] != mine[key]:
                raise ValueError(
                    f"Actor.load: {ckpt_dir} was written with {key}={meta[key]!r}, this actor has "
                    f"{key}={mine[key]!r}; DeepSpeed/optimizer state resumes only with the same "
                    "backend, ZeRO stage and world size"
                )
        if self.engine is not None:
            path, client_state = self.engine.load_checkpoint(
                str(ckpt_dir), tag=_DS_TAG, load_optimizer_states=True, load_lr_scheduler_states=True
            )
            if path is None:
                raise ValueError(f"Actor.load: DeepSpeed found no checkpoint under {ckpt_dir}/{_DS_TAG}")
            # DeepSpeed adds its own keys (e.g. "optimizer") to the client state: hand back only ours.
            client_state = {k: v for k, v in client_state.items() if k in set(meta["client_keys"])}
        else:
            blob = torch.load(ckpt_dir / _PLAIN_STATE_FILE, map_location="cpu", weights_only=False)
            self.model.load_state_dict(blob["model"])
            self.optimizer.load_state_dict(blob["optimizer"])
            self.scheduler.load_state_dict(blob["scheduler"])
            client_state = blob["client_state"]
        self._steps = int(meta["steps"])
        self._backward_calls = 0
        return client_state


def _replace_dir(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst``; an existing ``dst`` is moved aside first and deleted afterwards."""
    old = dst.with_name(f".old-{dst.name}")
    if old.exists():
        shutil.rmtree(old)
    if dst.exists():
        os.replace(dst, old)
    os.replace(src, dst)
    if old.exists():
        shutil.rmtree(old)


def build_reference(
    model_path_or_module: str | os.PathLike[str] | torch.nn.Module,
    trainer: TrainerConfig | None = None,
    model_config: ModelConfig | None = None,
    *,
    loader: Callable[[str], torch.nn.Module] | None = None,
) -> torch.nn.Module:
    """A frozen reference policy for the KL term (build it only when β > 0).

    ``model_path_or_module``: an HF model folder or hub id (loaded with ``loader``, else with
    ``fastrl.models.loaders.load_hf_model``, in bf16 for ``model.dtype = bfloat16`` and fp32
    otherwise) or an UNWRAPPED module to copy (pass the model before it goes into :class:`Actor`;
    a ZeRO-3-partitioned module cannot be copied). Pass the actor's ``trainer`` and ``model``
    sections: without them the reference is a plain fp32 copy on every rank.

    Returned module: eval mode, every parameter ``requires_grad=False``. Under DeepSpeed ZeRO-3 it
    is wrapped in an optimizer-less ZeRO-3 engine (OpenRLHF's reference setup: parameters
    partitioned over ranks and gathered layer by layer in forward, so calling it is collective:
    all ranks run the same number of forwards). Otherwise it is a plain frozen copy, cast to bf16
    when the actor trains in bf16 (matching its compute) and, with DeepSpeed, moved to the actor's
    device; without DeepSpeed it stays where it was loaded (CPU, or the source module's device).
    """
    if (trainer is None) != (model_config is None):
        raise ValueError("build_reference: pass both the trainer and the model sections, or neither")
    bf16 = model_config is not None and is_bf16(model_config)
    ref = _reference_module(model_path_or_module, bf16, loader)
    ref.eval()
    ref.requires_grad_(False)
    if trainer is None or not trainer.use_deepspeed:
        return ref.to(torch.bfloat16) if bf16 else ref
    if trainer.zero_stage == 3:
        return _zero3_reference_engine(ref, bf16)
    from deepspeed.accelerator import get_accelerator

    # Where DeepSpeed put the actor (cuda:LOCAL_RANK on GPUs, cpu under DS_ACCELERATOR=cpu).
    return (ref.to(torch.bfloat16) if bf16 else ref).to(get_accelerator().current_device_name())


def _reference_module(
    src: str | os.PathLike[str] | torch.nn.Module, bf16: bool, loader: Callable[[str], torch.nn.Module] | None,
) -> torch.nn.Module:
    """A copy of an unwrapped module, or the model at a path (``loader``, else ``load_hf_model``:
    a hub id resolves through the HF cache, offline too, as the actor's own load does)."""
    if isinstance(src, torch.nn.Module):
        if any(hasattr(p, "ds_id") for p in src.parameters()):
            raise ValueError(
                "build_reference: got a ZeRO-3-partitioned module; pass the model before "
                "Actor() wraps it, or a model path"
            )
        return copy.deepcopy(src)
    path = os.fspath(src)
    if loader is not None:
        return loader(path)
    from fastrl.models.loaders import load_hf_model

    return load_hf_model(path, dtype=torch.bfloat16 if bf16 else torch.float32)


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
