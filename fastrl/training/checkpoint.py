"""Atomic, complete training checkpoints.

Layout under ``run_dir/ckpt``::

    step_N/                 one complete checkpoint (never seen half-written)
      trainer_state.pt      {"step", "world_size", "state" (trainer dict), "rng" (one per rank)}
      actor_meta.json, ...  whatever Actor.save wrote (DeepSpeed: actor/ with per-rank shards)
      COMPLETE              written last, before the rename
    latest                  text "step_N", replaced atomically after the rename
    .tmp-step_N/            a checkpoint being written (a SIGKILL leaves it; ignored, and removed
                            by the next save of that step)

A checkpoint is committed by ``os.replace(.tmp-step_N, step_N)`` (a directory rename: atomic on a
POSIX file system), after every file in it was fsync'ed; the ``latest`` pointer is then replaced
atomically (write a temp file, fsync, ``os.replace``). A kill at any moment leaves either the
previous or the new checkpoint as the newest complete one; :func:`latest_checkpoint` also picks up
a committed ``step_N`` newer than ``latest`` (a kill between the two renames).

Multi-rank: every rank calls :func:`save_checkpoint` and :func:`load_checkpoint` (the actor's
save/load are collective); rank 0 does the renames. The checkpoint folder must be on a file system
every rank sees (one node, or a shared file system).

``state`` is the trainer's own state (data position, ARS/GRESO ``state_dict()``s, metrics so far,
…), saved with ``torch.save`` (pickle), so it may hold tensors, numpy arrays and plain Python.
Python/numpy/torch (CPU and the rank's CUDA device) RNG states of EVERY rank are captured here and
restored on load.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastrl.training import distributed as D
from fastrl.training.actor import Actor

log = logging.getLogger(__name__)

CKPT_SUBDIR = "ckpt"
LATEST_FILE = "latest"
STATE_FILE = "trainer_state.pt"
COMPLETE_FILE = "COMPLETE"
_STEP_RE = re.compile(r"^step_(\d+)$")


def capture_rng_state() -> dict[str, Any]:
    """This process's Python, numpy, torch CPU and, when CUDA is present, its current CUDA
    device's RNG states (``{"device": index, "state": ByteTensor}``: one rank drives one GPU, and
    reading every device's state would open a CUDA context on each of them in every rank)."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        state["cuda"] = {"device": index, "state": torch.cuda.get_rng_state(index)}
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`.

    The CUDA state goes back to this process's current CUDA device (the same LOCAL_RANK on a
    resume). Checkpoints written before that format hold a list with one state per device; they
    restore device by device. A checkpoint without CUDA state resumed where CUDA is present logs a
    warning (the CUDA stream then starts fresh); CUDA state is ignored where CUDA is absent."""
    missing = [k for k in ("python", "numpy", "torch") if k not in state]
    if missing:
        raise ValueError(f"restore_rng_state: RNG state lacks {missing}")
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if not torch.cuda.is_available():
        return
    saved = state.get("cuda")
    if saved is None:
        log.warning("restore_rng_state: the checkpoint has no CUDA RNG state (written without CUDA)")
    elif isinstance(saved, dict):
        torch.cuda.set_rng_state(saved["state"].cpu(), torch.cuda.current_device())
    else:
        for index, device_state in enumerate(list(saved)[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(device_state.cpu(), index)


def _fsync_tree(root: Path) -> None:
    """Flush every file under ``root`` and the folders themselves to disk."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def checkpoint_step(path: Path) -> int:
    """N of a ``step_N`` checkpoint folder."""
    m = _STEP_RE.match(Path(path).name)
    if m is None:
        raise ValueError(f"{path} is not a checkpoint folder (expected a name step_N)")
    return int(m.group(1))


def _committed(ckpt_root: Path) -> list[tuple[int, Path]]:
    """Complete ``step_N`` folders, sorted by N."""
    if not ckpt_root.is_dir():
        return []
    found = []
    for child in ckpt_root.iterdir():
        m = _STEP_RE.match(child.name)
        if m and child.is_dir() and (child / COMPLETE_FILE).is_file():
            found.append((int(m.group(1)), child))
    return sorted(found)


def save_checkpoint(
    run_dir: Path, step: int, actor: Actor, state: dict[str, Any], *, keep: int = 2
) -> Path:
    """Write ``run_dir/ckpt/step_<step>`` atomically, point ``latest`` at it, keep the newest
    ``keep`` checkpoints. Collective: every rank calls it. Returns the checkpoint folder."""
    if step < 0:
        raise ValueError(f"save_checkpoint: step={step} must be >= 0")
    if keep < 1:
        raise ValueError(f"save_checkpoint: keep={keep} must be >= 1")
    root = Path(run_dir) / CKPT_SUBDIR
    final = root / f"step_{step}"
    tmp = root / f".tmp-step_{step}"
    if D.is_main():
        if tmp.exists():  # left behind by a run killed while writing this step
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    D.barrier()

    rng_per_rank = D.all_gather_object(capture_rng_state())
    actor.save(tmp, client_state={"step": step})
    if D.is_main():
        torch.save(
            {"step": step, "world_size": D.world_size(), "state": state, "rng": rng_per_rank},
            tmp / STATE_FILE,
        )
        (tmp / COMPLETE_FILE).write_text(f"step_{step}\n")
        _fsync_tree(tmp)
        if final.exists():  # re-saving a step (e.g. after a resume): move the old one aside
            old = root / f".old-step_{step}"
            if old.exists():
                shutil.rmtree(old)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
        _fsync_dir(root)
        _write_atomic(root / LATEST_FILE, f"step_{step}\n")
        for _, path in _committed(root)[:-keep]:
            if path != final:
                shutil.rmtree(path)
    D.barrier()
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir``, or None if there is none.

    Follows ``latest``; a committed ``step_N`` newer than it (a kill between the commit rename and
    the pointer update) wins. Half-written ``.tmp-step_N`` folders are never returned.
    """
    root = Path(run_dir) / CKPT_SUBDIR
    pointer = root / LATEST_FILE
    best: Path | None = None
    if pointer.is_file():
        name = pointer.read_text().strip()
        target = root / name
        if _STEP_RE.match(name) is None or not (target / COMPLETE_FILE).is_file():
            raise ValueError(
                f"{pointer} names {name!r}, which is not a complete checkpoint folder in {root}"
            )
        best = target
    committed = _committed(root)
    if committed and (best is None or committed[-1][0] > checkpoint_step(best)):
        best = committed[-1][1]
    return best


def load_checkpoint(path: Path, actor: Actor) -> dict[str, Any]:
    """Restore the actor (weights, optimizer, scheduler) and this rank's RNG states from ``path``;
    return the trainer ``state`` that was saved. Collective: every rank calls it."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not (path / COMPLETE_FILE).is_file() or not state_file.is_file():
        raise ValueError(f"load_checkpoint: {path} is not a complete checkpoint (no {COMPLETE_FILE})")
    # weights_only=False: the blob holds numpy RNG states and arbitrary trainer state we wrote.
    blob = torch.load(state_file, map_location="cpu", weights_only=False)
    if blob["world_size"] != D.world_size():
        raise ValueError(
            f"load_checkpoint: {path} was written by {blob['world_size']} ranks, this run has "
            f"{D.world_size()}; resume with the same world size"
        )
    client = actor.load(path)
    if client.get("step") != blob["step"]:
        raise ValueError(
            f"load_checkpoint: {path}: actor state is from step {client.get('step')}, "
            f"trainer state from step {blob['step']}"
        )
    restore_rng_state(blob["rng"][D.rank()])
    return blob["state"]
