"""The run directory's contract: one identity, one writer, a finished run is never retrained.

- **Identity** (``fastrl.training.identity``). ``<run_dir>/config.yaml`` is the resolved config,
  written once, when the run is created (after its model and data were built). A later start in
  that directory compares its own resolved config with it, over the sections the run uses, and
  refuses every difference that changes the training, naming each key with its old and new value,
  before any model is built; a config.yaml of an earlier schema is migrated first
  (``fastrl.migrations``).
- **Finished runs.** A run whose log ends with its ``val_final`` line and whose ``final/`` policy
  exists is finished: the same config reports "finished, nothing to do" with the path to its
  ``summary.json``; a larger ``trainer.total_steps`` extends it from its last checkpoint.
- **Starting over** is explicit: ``--force-new`` (``fastrl.train(..., force_new=True)``) or
  ``trainer.resume=false`` move the old contents aside, to ``<run_dir>.replaced-<UTC time>/``; nothing
  is deleted.
- **One writer** (``fastrl.training.lock``). An exclusive ``fcntl.flock`` on ``<run_dir>/.lock``
  held by rank 0 of the run for its lifetime.

Everything here runs on rank 0 only (the pipeline broadcasts the outcome to the other ranks).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from fastrl import metric_keys as K
from fastrl.config import FastRLConfig
from fastrl.training.identity import CONFIG_FILE, check_identity
from fastrl.training.lock import LOCK_FILE, LockUnwritable, RunDirError, RunLock
from fastrl.training.metrics import read_metrics

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
FINAL_DIR = "final"
REPLACED_INFIX = ".replaced-"


# ------------------------------------------------------------------------------------ finished runs
def is_finished(run_dir: Path) -> bool:
    """The log ends with the final validation line (written after ``final/``) and ``final/`` exists."""
    rows = read_metrics(Path(run_dir), warn=False)  # the resume warns about a torn line, once
    return bool(rows) and rows[-1].get(K.PHASE) == K.PHASE_VAL_FINAL and (Path(run_dir) / FINAL_DIR).is_dir()


def finished_steps(run_dir: Path) -> int:
    """Training steps of a finished run (the step of its final line)."""
    return int(read_metrics(Path(run_dir), warn=False)[-1][K.STEP])


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> Path:
    path = Path(run_dir) / SUMMARY_FILE
    tmp = path.with_name(f".{SUMMARY_FILE}.tmp")
    tmp.write_text(json.dumps(dict(summary), indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def finished_report(run_dir: Path) -> dict[str, Any]:
    """What ``fit`` returns for a finished run: its saved summary, marked as not retrained."""
    path = Path(run_dir) / SUMMARY_FILE
    summary = json.loads(path.read_text()) if path.is_file() else {"steps": finished_steps(run_dir)}
    where = path if path.is_file() else Path(run_dir) / "metrics.jsonl"
    return {**summary, "status": "finished", "summary_path": str(where),
            "message": f"{run_dir}: finished, nothing to do (summary: {where})"}


def move_aside(run_dir: Path) -> Path | None:
    """Move every entry of ``run_dir`` but the lock to ``<run_dir>.replaced-<UTC time>/`` (the lock
    stays held throughout); returns that folder, or None when there was nothing to move."""
    run_dir = Path(run_dir)
    entries = [p for p in run_dir.iterdir() if p.name != LOCK_FILE] if run_dir.is_dir() else []
    if not entries:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = run_dir.with_name(f"{run_dir.name}{REPLACED_INFIX}{stamp}")
    suffix = 1
    while dest.exists():
        suffix += 1
        dest = run_dir.with_name(f"{run_dir.name}{REPLACED_INFIX}{stamp}-{suffix}")
    dest.mkdir(parents=True)
    for entry in entries:
        os.replace(entry, dest / entry.name)
    return dest


# ------------------------------------------------------------------------------------ opening a run
@dataclass
class Opening:
    """What rank 0 found in the run directory (broadcast to every rank)."""

    finished: dict[str, Any] | None = None  # the report of a finished run: nothing to train
    moved_to: str | None = None  # where --force-new moved the old contents
    error: str | None = None  # a RunDirError message: every rank raises it


def open_with_lock(lock: RunLock, run_dir: Path, cfg: FastRLConfig, *, force_new: bool) -> Opening:
    """Take ``lock`` and decide (``open_run``). Where the lock cannot be written (a read-only
    mount), a finished run of this config is still reported finished, since reading needs no lock;
    anything else is one line naming the lock and why."""
    try:
        lock.acquire()
    except LockUnwritable as exc:
        run_dir = Path(run_dir)
        if not force_new and cfg.trainer.resume and (run_dir / CONFIG_FILE).exists() and is_finished(run_dir):
            check_identity(run_dir, cfg)
            if finished_steps(run_dir) == cfg.trainer.total_steps:
                return Opening(finished=finished_report(run_dir))
        raise RunDirError(f"{exc}; training here needs to write (only a finished run of this config can be "
                          "reported without it): use a writable trainer.run_dir") from None
    return open_run(run_dir, cfg, force_new=force_new)


def open_run(run_dir: Path, cfg: FastRLConfig, *, force_new: bool) -> Opening:
    """Decide what a start in ``run_dir`` does (the lock must already be held)."""
    run_dir = Path(run_dir)
    if force_new or not cfg.trainer.resume:
        moved = move_aside(run_dir)
        if moved is not None:
            log.warning("%s: started over (%s); its previous contents are in %s", run_dir,
                        "--force-new" if force_new else "trainer.resume=false", moved)
        return Opening(moved_to=str(moved) if moved else None)
    if not (run_dir / CONFIG_FILE).exists():
        return Opening()
    check_identity(run_dir, cfg)
    from fastrl.training.checkpoint import checkpoint_candidates

    planned = cfg.trainer.total_steps
    if not is_finished(run_dir):
        newest = max((step for step, _ in checkpoint_candidates(run_dir)), default=0)
        if newest > planned:
            raise RunDirError(f"{run_dir} has a checkpoint of step {newest}; trainer.total_steps={planned} cannot "
                              f"undo it (use trainer.total_steps >= {newest}, another trainer.run_dir, or --force-new)")
        return Opening()
    done = finished_steps(run_dir)
    if planned == done:
        return Opening(finished=finished_report(run_dir))
    if planned < done:
        raise RunDirError(f"{run_dir} finished {done} steps; trainer.total_steps={planned} cannot undo them "
                          f"(use trainer.total_steps >= {done}, another trainer.run_dir, or --force-new)")
    if not any(step == done for step, _ in checkpoint_candidates(run_dir)):
        raise RunDirError(f"{run_dir} finished {done} steps without a checkpoint of step {done} (trainer.save_every "
                          f"was 0), so it cannot be extended to trainer.total_steps={planned}; use another "
                          "trainer.run_dir or --force-new")
    (run_dir / SUMMARY_FILE).unlink(missing_ok=True)  # extending: no longer finished once it resumes
    return Opening()
