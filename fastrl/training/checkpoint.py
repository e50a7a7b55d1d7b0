"""Atomic, complete training checkpoints.

Layout under ``run_dir/ckpt``::

    step_N/                 one complete checkpoint (never seen half-written)
      trainer_state.pt      {"step", "world_size", "state" (trainer dict), "rng" (one per rank)}
      actor_meta.json, ...  whatever Actor.save wrote (DeepSpeed: actor/ with per-rank shards)
      COMPLETE              written last, before the rename
    latest                  text "step_N", replaced atomically after the rename
    .tmp-step_N/            a checkpoint being written (a SIGKILL leaves it; ignored, and removed
                            by the next save)
    .old-step_N/            the previous copy of step_N while a re-save of that step swaps it out
                            (the end-of-run save when total_steps % save_every == 0)

A checkpoint is committed by ``os.replace(.tmp-step_N, step_N)`` (a directory rename: atomic on a
POSIX file system), after every file in it was fsync'ed; the ``latest`` pointer is then replaced
atomically (write a temp file, fsync, ``os.replace``). A kill at any moment leaves either the
previous or the new checkpoint as the newest complete one: :func:`checkpoint_candidates` lists the
complete ``step_N`` folders newest first whatever ``latest`` says (a pointer naming a folder that is
not complete is warned about, not trusted), and a complete ``.old-step_N`` stands in for a
``step_N`` that a killed re-save left missing (the next save renames it back).

Loading falls back: :func:`load_latest` tries the candidates newest first; one whose files do not
load (a truncated or zero-byte ``trainer_state.pt`` / ``actor_state.pt``) is skipped with a one-line
warning naming the file and the error, and only when none is left is it an error.

Multi-rank: every rank calls :func:`save_checkpoint` and :func:`load_checkpoint` (the actor's
save/load are collective); rank 0 does the renames. The checkpoint folder must be on a file system
every rank sees (one node, or a shared file system).

``state`` is the trainer's own state (data position, ARS/GRESO ``state_dict()``s, metrics so far,
…), saved with ``torch.save`` (pickle), so it may hold tensors, numpy arrays and plain Python.
Python/numpy/torch (CPU and the rank's CUDA device) RNG states of EVERY rank are captured here and
restored on load.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import random
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastrl.training import distributed as D
from fastrl.training.actor import Actor
from fastrl.training.faults import fault_point

log = logging.getLogger(__name__)

CKPT_SUBDIR = "ckpt"
LATEST_FILE = "latest"
STATE_FILE = "trainer_state.pt"
COMPLETE_FILE = "COMPLETE"
_STEP_RE = re.compile(r"^step_(\d+)$")
_OLD_RE = re.compile(r"^\.old-step_(\d+)$")
class CheckpointCorrupt(ValueError):
    """A checkpoint folder marked complete whose files do not load (truncated, zero-byte...)."""


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


def _complete_folders(ckpt_root: Path, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
    """Folders of ``ckpt_root`` whose name matches ``pattern`` and that hold COMPLETE, sorted by step."""
    if not ckpt_root.is_dir():
        return []
    found = []
    for child in ckpt_root.iterdir():
        m = pattern.match(child.name)
        if m and child.is_dir() and (child / COMPLETE_FILE).is_file():
            found.append((int(m.group(1)), child))
    return sorted(found)


def _committed(ckpt_root: Path) -> list[tuple[int, Path]]:
    """Complete ``step_N`` folders, sorted by N."""
    return _complete_folders(ckpt_root, _STEP_RE)


def _restore_old_copies(root: Path) -> None:
    """Rank 0, before a save: a complete ``.old-step_N`` left by a re-save killed between its two
    renames becomes ``step_N`` again when that is missing; otherwise it is a redundant copy."""
    committed = {step for step, _ in _committed(root)}
    for step, old in _complete_folders(root, _OLD_RE):
        if step in committed:
            shutil.rmtree(old)
        else:
            shutil.rmtree(root / f"step_{step}", ignore_errors=True)  # an incomplete leftover, if any
            os.replace(old, root / f"step_{step}")


def _commit(root: Path, tmp: Path, final: Path) -> None:
    """Rename the written ``tmp`` to ``final``; a re-save moves the old ``final`` aside first, and
    until the second rename that ``.old-step_N`` is a complete checkpoint loaders accept."""
    if not final.exists():
        os.replace(tmp, final)
        return
    old = root / f".old-{final.name}"
    if old.exists():
        shutil.rmtree(old)
    os.replace(final, old)
    fault_point("resave_between_renames")
    os.replace(tmp, final)
    shutil.rmtree(old)


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
        if root.is_dir():
            _restore_old_copies(root)
            # left behind by a run killed while writing (the run dir has one writer: all are stale)
            for stale in root.glob(".tmp-step_*"):
                shutil.rmtree(stale)
        tmp.mkdir(parents=True)
    D.barrier()

    rng_per_rank = D.all_gather_object(capture_rng_state())
    try:
        actor.save(tmp, client_state={"step": step})
        if D.is_main():
            fault_point("save_after_actor")
            torch.save(
                {"step": step, "world_size": D.world_size(), "state": state, "rng": rng_per_rank},
                tmp / STATE_FILE,
            )
            (tmp / COMPLETE_FILE).write_text(f"step_{step}\n")
            _fsync_tree(tmp)
    except (OSError, RuntimeError) as exc:
        raise _write_failure(run_dir, tmp, step, exc) from exc
    if D.is_main():
        fault_point("save_before_commit")
        _commit(root, tmp, final)
        _fsync_dir(root)
        fault_point("save_before_pointer")
        _write_atomic(root / LATEST_FILE, f"step_{step}\n")
        for _, path in _committed(root)[:-keep]:
            if path != final:
                shutil.rmtree(path)
    D.barrier()
    return final


def _write_failure(run_dir: Path, tmp: Path, step: int, exc: BaseException) -> BaseException:
    """A checkpoint write that failed for want of space (a full disk, a quota, a file-size limit)
    as one line naming the file and the cause; ``exc`` itself for any other error. torch's writer
    reports a full disk as ``inline_container.cc ... unexpected pos`` with no errno and no file:
    the file is then the one written last, and the cause what growing it says now."""
    from fastrl.training.errors import TrainingError

    errno_ = exc.errno if isinstance(exc, OSError) else None
    file = Path(exc.filename) if isinstance(exc, OSError) and exc.filename else _newest_file(tmp)
    if errno_ is None and file is not None:
        errno_ = _grow_errno(file)
    if errno_ in _NO_SPACE:
        cause = os.strerror(errno_)
    elif _SHORT_WRITE in str(exc) and file is not None:
        cause = f"the write stopped short ({shutil.disk_usage(file.parent).free} bytes free there)"
    else:
        return exc
    shutil.rmtree(tmp, ignore_errors=True)  # frees the space the partial checkpoint took
    previous = [s for s, _ in checkpoint_candidates(run_dir)]
    resume = f"step_{previous[0]}" if previous else "the start (no checkpoint yet)"
    return TrainingError(f"{file or tmp}: cannot write checkpoint step_{step}: {cause}; the run stopped there "
                         f"and resumes from {resume}: free space and run it again")


_NO_SPACE = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_SHORT_WRITE = "unexpected pos"  # torch's zip writer (inline_container.cc) after a short write
_PROBE_BYTES = 64 << 20


def _newest_file(root: Path) -> Path | None:
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    return max(files, key=lambda p: p.stat().st_mtime_ns) if files else None


def _grow_errno(file: Path) -> int | None:
    """The errno that reserving 64 MiB more for ``file`` gets now (None if it succeeds; the file
    is cut back): ENOSPC on a full disk, EFBIG past a file-size limit."""
    try:
        fd = os.open(file, os.O_WRONLY)
    except OSError as probe:
        return probe.errno
    try:
        size = os.fstat(fd).st_size
        os.posix_fallocate(fd, size, _PROBE_BYTES)
        os.ftruncate(fd, size)
    except OSError as probe:
        return probe.errno
    finally:
        os.close(fd)
    return None


def checkpoint_candidates(run_dir: Path, *, warn: bool = False) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint of ``run_dir``, newest first: committed
    ``step_N`` folders, and a complete ``.old-step_N`` where ``step_N`` is missing or incomplete (a
    re-save killed between its renames). ``latest`` naming anything else is warned about (``warn``):
    the folders themselves decide. Half-written ``.tmp-step_N`` folders are never listed."""
    root = Path(run_dir) / CKPT_SUBDIR
    committed = _committed(root)
    steps = {step for step, _ in committed}
    found = committed + [(step, p) for step, p in _complete_folders(root, _OLD_RE) if step not in steps]
    pointer = root / LATEST_FILE
    if warn and pointer.is_file():
        name = pointer.read_text().strip()
        if name not in {p.name for _, p in committed}:
            log.warning("%s names %r, which is not a complete checkpoint folder; using the newest complete one "
                        "(%s)", pointer, name, max(found)[1].name if found else "none")
    return sorted(found, key=lambda item: (item[0], _STEP_RE.match(item[1].name) is not None), reverse=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` (see :func:`checkpoint_candidates`), or None."""
    found = checkpoint_candidates(run_dir, warn=True)
    return found[0][1] if found else None


# What a truncated, zero-byte or otherwise damaged file raises from torch.load / json / DeepSpeed.
_DAMAGE = (OSError, EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, json.JSONDecodeError,
           KeyError, IndexError)


def load_checkpoint(path: Path, actor: Actor) -> dict[str, Any]:
    """Restore the actor (weights, optimizer, scheduler) and this rank's RNG states from ``path``;
    return the trainer ``state`` that was saved. Collective: every rank calls it.

    A file that does not load is a :class:`CheckpointCorrupt` naming it; a checkpoint of another
    world size or backend is a plain ValueError (an older checkpoint would not fit either)."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not (path / COMPLETE_FILE).is_file() or not state_file.is_file():
        raise ValueError(f"load_checkpoint: {path} is not a complete checkpoint (no {COMPLETE_FILE})")
    try:
        # weights_only=False: the blob holds numpy RNG states and arbitrary trainer state we wrote.
        blob = torch.load(state_file, map_location="cpu", weights_only=False)
        saved_world, saved_step, rng = blob["world_size"], blob["step"], blob["rng"]
    except _DAMAGE as exc:
        raise CheckpointCorrupt(f"{state_file} does not load ({type(exc).__name__}: {exc})") from exc
    if saved_world != D.world_size():
        raise ValueError(
            f"load_checkpoint: {path} was written by {saved_world} ranks, this run has "
            f"{D.world_size()}; resume with the same world size"
        )
    try:
        client = actor.load(path)
    except _DAMAGE as exc:
        raise CheckpointCorrupt(f"{path}: the actor state does not load ({type(exc).__name__}: {exc})") from exc
    if client.get("step") != saved_step:
        raise CheckpointCorrupt(
            f"load_checkpoint: {path}: actor state is from step {client.get('step')}, "
            f"trainer state from step {saved_step}"
        )
    restore_rng_state(rng[D.rank()])
    return blob["state"]


def load_latest(run_dir: Path, actor: Actor) -> tuple[int, dict[str, Any]] | None:
    """Load the newest checkpoint of ``run_dir`` that loads on every rank; returns (its step, the
    trainer state), or None when the run has no checkpoint. A damaged one is skipped with a one-line
    warning; when every one is damaged, the error lists them. Collective."""
    candidates = checkpoint_candidates(run_dir, warn=True) if D.is_main() else []
    candidates = D.broadcast_object(candidates)
    problems: list[str] = []
    for step, path in candidates:
        try:
            state, error = load_checkpoint(path, actor), None
        except CheckpointCorrupt as exc:
            state, error = None, str(exc)
        errors = [e for e in D.all_gather_object(error) if e is not None]
        if not errors:
            return step, state  # type: ignore[return-value]
        problems.append(errors[0])
        if D.is_main():
            log.warning("checkpoint %s skipped: %s", path, errors[0])
    if problems:
        raise ValueError(f"{run_dir}: no checkpoint loads ({'; '.join(problems)}); pass --force-new to start over")
    return None
