"""The small data-parallel seam: rank/world helpers that also work in a single plain process.

Every helper works with and without ``torch.distributed`` initialised; a process that never
initialised it is rank 0 of a world of size 1 and every collective is the identity.

Launching several ranks (CPU or GPU). The `deepspeed` launcher and ``torchrun`` both set
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` for each process,
which is all :func:`init_distributed` reads::

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --master_port 29512 script.py ...
    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 --master_port 29512 script.py ...

On a CPU-only machine (measured with DeepSpeed 0.19.8, torch 2.13 CPU, 2 shared cores): both
launchers work. ``deepspeed --num_gpus N`` starts N local ranks under ``DS_ACCELERATOR=cpu`` and
appends ``--local_rank=R`` to the script's arguments (the script must accept that flag, or be
started with ``--no_local_rank``); ``torchrun --nproc_per_node N`` passes nothing extra. The same
2-rank ZeRO-3 + ZeRO-2 script took 29 s under ``deepspeed`` and 24 s under ``torchrun``. The tests
use the ``deepspeed`` launcher (what multi-node paper-scale runs use, via its hostfile).
``--bind_cores_to_rank`` is not used: it needs ``numactl`` (not installed here).

The CPU accelerator's backend is ``ccl`` when ``oneccl_bindings_for_pytorch`` is installed and
``gloo`` otherwise; FastRL initialises ``gloo`` on CPU (DeepSpeed then wraps that group). The first
DeepSpeed engine on CPU JIT-builds a shared-memory comm op (``deepspeed_shm_comm``: 61 s measured)
and ZeRO-Offload's ``DeepSpeedCPUAdam`` builds ``cpu_adam`` (235 s measured under load);
``TORCH_EXTENSIONS_DIR`` (the tests point it at ``<repo>/.cache/torch_extensions``) caches both,
after which loading takes ~0.1 s.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, NoReturn, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_joined_a_group = False  # set once this process has been in a process group (see exit_process)


def default_backend() -> str:
    """``nccl`` on CUDA machines (unless ``DS_ACCELERATOR`` says otherwise), else ``gloo``."""
    accel = os.environ.get("DS_ACCELERATOR", "")
    if accel == "cpu" or not torch.cuda.is_available():
        return "gloo"
    return "nccl"


def _free_port() -> int:
    """A TCP port that was free a moment ago on localhost (for a 1-process rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env_int(key: str) -> int:
    raw = os.environ[key]
    try:
        return int(raw)
    except ValueError as err:
        raise ValueError(f"environment variable {key}={raw!r} is not an integer") from err


def init_distributed(backend: str | None = None, *, single_process_group: bool = False) -> None:
    """Initialise ``torch.distributed`` from the launcher's environment; idempotent.

    Reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT`` (set by the
    ``deepspeed`` launcher and by ``torchrun``). Without ``WORLD_SIZE`` in the environment this is
    a single plain process: nothing is initialised (the helpers below then act as world size 1)
    unless ``single_process_group`` is set, in which case a world-size-1 group is created on a
    free localhost port (DeepSpeed's engine needs a process group even for one process).

    ``backend=None`` picks :func:`default_backend`. On CUDA the local device is set from
    ``LOCAL_RANK`` before the group is created.
    """
    if dist.is_available() and dist.is_initialized():
        return
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build")
    if "WORLD_SIZE" not in os.environ:
        if not single_process_group:
            return
        # One process, no launcher: give it a private localhost rendezvous.
        os.environ["RANK"] = "0"
        os.environ["WORLD_SIZE"] = "1"
        os.environ["LOCAL_RANK"] = "0"
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(_free_port())
    missing = [k for k in _ENV_KEYS if k not in os.environ]
    if missing:
        raise ValueError(
            f"init_distributed: WORLD_SIZE is set but {missing} are missing from the environment; "
            "start multi-rank runs with the `deepspeed` launcher or torchrun"
        )
    world = _env_int("WORLD_SIZE")
    rank_ = _env_int("RANK")
    local_rank = _env_int("LOCAL_RANK")
    if not 0 <= rank_ < world:
        raise ValueError(f"init_distributed: RANK={rank_} is outside [0, WORLD_SIZE={world})")
    backend = backend or default_backend()
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    global _joined_a_group
    _joined_a_group = True
    dist.init_process_group(backend=backend, rank=rank_, world_size=world)


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def shutdown_distributed(wait_for_peers: bool = True) -> None:
    """Leave the process group (barrier, then destroy). Entry points end through
    :func:`exit_process`, which calls this: leaving the group alone did not stop ranks aborting at
    interpreter teardown. ``wait_for_peers=False`` skips the barrier: a rank ending on an interrupt
    or error cannot count on its peers reaching it (they may be gone, and gloo then raises)."""
    if dist.is_available() and dist.is_initialized():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End an entry point's process with ``code``. A process that was ever in a process group
    leaves it, runs its ``atexit`` handlers, flushes and ends with ``os._exit``: it skips Python's
    finalization, where CPython (3.11) stops daemon threads with ``pthread_exit``; one still inside
    a torch call that released the GIL then unwinds through C++ that must not throw, and the rank
    aborts ("terminate called without an active exception", rc -6) after every result was written,
    so its launcher reports a failed run. ``multiprocessing`` ends its children the same way.
    Other processes exit normally. Call it only once everything is written and closed."""
    if not (_joined_a_group or is_initialized()):
        sys.exit(code)
    shutdown_distributed(wait_for_peers=code == 0)
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more can reach it
            pass
    os._exit(code)


def rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def local_rank() -> int:
    """``LOCAL_RANK`` from the launcher, 0 in a plain process."""
    return int(os.environ.get("LOCAL_RANK", "0")) if is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def _comm_device() -> torch.device:
    """Tensors for collectives must live where the backend expects them (CUDA for nccl)."""
    if is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(x: torch.Tensor | float) -> torch.Tensor | float:
    """Sum over ranks. A tensor comes back as a new tensor on its own device (the input is not
    modified); a Python number comes back as a float. Identity for world size 1."""
    if isinstance(x, torch.Tensor):
        if world_size() == 1:
            return x.clone()
        buf = x.detach().to(_comm_device(), copy=True)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        return buf.to(x.device)
    value = float(x)
    if world_size() == 1:
        return value
    buf = torch.tensor([value], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    return float(buf.item())


def all_gather_object(obj: T) -> list[T]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank (other ranks' ``obj`` is ignored)."""
    if world_size() == 1:
        return obj
    box: list[Any] = [obj if rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def _is_zero3_param(p: torch.Tensor) -> bool:
    # DeepSpeed marks ZeRO-3 partitioned parameters with a ``ds_id`` attribute.
    return hasattr(p, "ds_id")


@contextmanager
def gather_params(
    module: torch.nn.Module,
    params: Iterable[torch.nn.Parameter] | None = None,
    *,
    modifier_rank: int | None = None,
) -> Iterator[None]:
    """Make ZeRO-3-partitioned parameters whole inside the block; a no-op otherwise.

    ``params`` defaults to all of ``module``'s parameters (the whole model at once: use it for
    small modules only; gather large models one parameter at a time). ``modifier_rank`` is
    DeepSpeed's: the rank whose in-block writes are kept and re-partitioned (``None``: read-only).
    """
    selected = list(module.parameters()) if params is None else list(params)
    zero3 = [p for p in selected if _is_zero3_param(p)]
    if not zero3:
        yield
        return
    import deepspeed  # only needed once DeepSpeed has partitioned something

    with deepspeed.zero.GatheredParameters(zero3, modifier_rank=modifier_rank):
        yield
