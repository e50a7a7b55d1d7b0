"""The actor: one trainable policy behind a training backend (fastrl.training.backends): plain torch
AdamW, or a DeepSpeed ZeRO engine (stages 0-3), chosen by ``trainer.use_deepspeed``.

Modelled on OpenRLHF's DeepSpeed strategy, kept small. The Actor has no backend branches: it owns
the contracts below and hands the rest to its backend. Every backend has the same semantics:

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

Forward passes go through :attr:`Actor.module` (the backend's). Under DeepSpeed that is the engine itself (an
``nn.Module`` whose attribute lookups fall through to the wrapped model): the engine's forward
installs the backward-prologue hooks that ZeRO needs, so calling ``engine.module`` directly for a
pass that is later backpropagated is wrong. :attr:`Actor.model` is the wrapped HF model (names,
config, ``generate``).

All ranks must build the same initial model (same seed or same weights). A checkpoint resumes only
under the backend that wrote it, and DeepSpeed's (per-rank optimizer partitions) only with the same
world size and ZeRO stage (:meth:`Actor.load` checks and refuses the others in one line).
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

from fastrl import metric_keys as K
from fastrl.config import ModelConfig, OptimConfig, TrainerConfig, check_precision
from fastrl.training import distributed as D
from fastrl.training.backends import (  # noqa: F401 -- ClippingAdamW, WarmupLambda, deepspeed_config: public names
    BACKENDS, Backend, ClippingAdamW, WarmupLambda, backend_name, build_backend, deepspeed_config,
)

_META_FILE = "actor_meta.json"


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
            self.backend: Backend = build_backend(model, trainer, self.bf16)
        self.model = self.backend.model

    # ---------------------------------------------------------------- training
    @property
    def module(self) -> torch.nn.Module:
        """What to call forward on: the backend's module (the DeepSpeed engine, or the model)."""
        return self.backend.module

    @property
    def dp_world_size(self) -> int:
        return D.world_size()

    @property
    def num_steps(self) -> int:
        """Optimizer steps taken (restored by :meth:`load`)."""
        return self._steps

    def current_lr(self) -> float:
        """The learning rate the next :meth:`step` applies."""
        return float(self.backend.scheduler.get_last_lr()[0])

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradient of ``loss`` (a scalar already normalised globally, see module
        docstring). Every rank must call this the same number of times per step."""
        if loss.dim() != 0:
            raise ValueError(f"Actor.backward: loss must be a scalar, got shape {tuple(loss.shape)}")
        if not torch.isfinite(loss.detach()).item():
            raise ValueError(f"Actor.backward: loss is not finite ({loss.item()}) at step {self._steps}")
        self.backend.backward(loss)
        self._backward_calls += 1

    def _check_backward_counts(self) -> None:
        counts = D.all_gather_object(self._backward_calls)
        if self._backward_calls == 0 or len(set(counts)) > 1:
            raise ValueError(
                f"Actor.step at step {self._steps}: backward() calls since the last step per rank "
                f"= {counts}; every rank must call backward() at least once and the same number "
                "of times per optimizer step"
            )

    def step(self) -> dict[str, float]:
        """One optimizer step over everything accumulated since the last one; zeroes the grads.

        Returns ``{"actor/grad_norm": global norm before clipping, "actor/lr": lr applied}``.
        """
        self._check_backward_counts()
        lr = self.current_lr()
        grad_norm = self.backend.step()
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
            with self.backend.gather([p]):
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
        return {**self.backend.meta(), "world_size": D.world_size(), "steps": self._steps,
                "optim": asdict(self.optim), "bf16": self.bf16}

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
        self.backend.save(ckpt_dir, dict(client_state))
        if D.is_main():
            meta = {**self._meta(), "client_keys": sorted(client_state)}
            (ckpt_dir / _META_FILE).write_text(json.dumps(meta, indent=1))
        D.barrier()

    def load(self, ckpt_dir: Path) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns its ``client_state``. Collective.

        A checkpoint resumes only under the backend, ZeRO stage and world size that wrote it: any
        other is refused in one line (a torch checkpoint is not a DeepSpeed one, and DeepSpeed's
        optimizer state is partitioned per rank)."""
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
                    f"{key}={mine[key]!r}; a checkpoint resumes only with the backend "
                    "(trainer.use_deepspeed), ZeRO stage and world size that wrote it"
                )
        client_state = self.backend.load(ckpt_dir, set(meta["client_keys"]))
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
    if trainer is None:
        return ref.to(torch.bfloat16) if bf16 else ref
    return BACKENDS[backend_name(trainer)].place_reference(ref, trainer, bf16)


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
