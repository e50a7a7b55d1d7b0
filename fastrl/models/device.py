"""Where models and their batches live: one resolver for ``model.device`` and small placement helpers.

``model.device`` is ``auto`` (CUDA when ``torch.cuda.is_available()``, else CPU), ``cpu`` or
``cuda``. Under a launcher the CUDA device is ``cuda:LOCAL_RANK``. DeepSpeed places the actor
itself (its accelerator decides); :func:`check_deepspeed_device` makes sure that choice agrees
with ``model.device``, so the actor, the frozen reference and every batch meet on one device.

The rule for tensors: inputs go to the device of the module's parameters (the embedding), and
everything combined with the model's outputs goes to the device of those outputs
(:func:`fastrl.models.forward.response_logprobs` returns log-probs on the logits' device).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import torch

from fastrl.config import MODEL_DEVICES

DEVICE_CHOICES: tuple[str, ...] = MODEL_DEVICES
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_device(name: str = "auto", *, key: str = "model.device") -> torch.device:
    """The ``torch.device`` for a ``model.device`` value (``key`` names it in errors).

    ``auto`` is ``cuda:LOCAL_RANK`` when CUDA is available, else ``cpu``; ``cuda`` without CUDA is
    an error rather than a silent fall-back to the CPU.
    """
    if name not in DEVICE_CHOICES:
        raise ValueError(f"{key} = {name!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"{key} = 'cuda' but torch.cuda.is_available() is False (torch {torch.__version__}); "
                         f"use {key}=auto or {key}=cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def resolve_dtype(name: str, *, key: str = "model.dtype") -> torch.dtype:
    """``float32`` | ``bfloat16`` -> the torch dtype."""
    if name not in DTYPES:
        raise ValueError(f"{key} = {name!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (or buffer); CPU for a module with neither."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """A copy of ``batch`` with every tensor value moved to ``device`` (other values as they are)."""
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def deepspeed_device() -> torch.device:
    """Where DeepSpeed's accelerator puts an engine (``cuda:LOCAL_RANK``, or ``cpu`` under
    ``DS_ACCELERATOR=cpu``)."""
    from deepspeed.accelerator import get_accelerator

    return torch.device(get_accelerator().current_device_name())


def check_deepspeed_device(requested: str, ds_device: torch.device) -> None:
    """Raise when ``model.device`` names a device type DeepSpeed will not use.

    ``auto`` follows DeepSpeed. ``cpu`` with a CUDA accelerator, or ``cuda`` with the CPU
    accelerator, would leave the actor and the reference (and the batches) on different devices.
    """
    if requested == "auto" or requested == ds_device.type:
        return
    fix = "DS_ACCELERATOR=cpu" if requested == "cpu" else "unset DS_ACCELERATOR (CUDA must be available)"
    raise ValueError(
        f"model.device = {requested!r} but DeepSpeed's accelerator places the actor on {ds_device}; "
        f"set model.device=auto, or {fix}, or trainer.use_deepspeed=false"
    )
