"""One writer per run directory: an exclusive ``fcntl.flock`` on ``<run_dir>/.lock``, held by rank 0
of the run for its lifetime. The OS drops it when the process dies, so a killed run never leaves a
stale lock; a second start in the same directory fails at once, naming the holder's pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_FILE = ".lock"


class RunDirError(ValueError):
    """The run directory belongs to another config, another process, or cannot be resumed."""


class LockUnwritable(RunDirError):
    """The run lock cannot be created or opened for writing (read-only mount, permissions)."""


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock``; the file holds the holder's pid."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "a+")
        except OSError as exc:  # a read-only mount, a folder of another user
            raise LockUnwritable(f"{self.path}: cannot write the run lock ({exc.strerror})") from None
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise RunDirError(f"{self.path.parent} is in use by another run (pid {holder}, lock {self.path}); "
                              "wait for it to end or use another trainer.run_dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    @property
    def held(self) -> bool:
        return self._fh is not None


def check_unlocked(run_dir: Path) -> None:
    """Fail at once (before torch is imported) when another process holds ``run_dir``'s lock.
    Launcher rank 0 only (``$RANK``, as torchrun and deepspeed set it): the other ranks of one run
    never take the lock. The Trainer takes the lock for real later; this is the fast path."""
    if int(os.environ.get("RANK", "0")) != 0 or not Path(run_dir).is_dir():
        return
    probe = RunLock(run_dir)
    try:
        probe.acquire()
    except LockUnwritable:
        return  # nobody can hold a lock that cannot be written; the Trainer decides (open_with_lock)
    probe.release()
