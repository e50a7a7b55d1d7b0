"""Saves step_1, then step_2 under a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored so a write
past it fails with EFBIG, as a full disk fails with ENOSPC); prints the error of the second save."""

from __future__ import annotations

import resource
import signal
import sys
from pathlib import Path

import torch

from fastrl.training import checkpoint as C


class BigActor:
    """Writes one ``actor_state.pt`` of ``numel`` floats, as the plain actor does."""

    def __init__(self, numel: int) -> None:
        self.weights = torch.zeros(numel)

    def save(self, ckpt_dir: Path, client_state: dict) -> None:
        torch.save({"model": self.weights, "client_state": client_state}, Path(ckpt_dir) / "actor_state.pt")


run_dir = Path(sys.argv[1])
C.save_checkpoint(run_dir, 1, BigActor(10), {"pos": 1})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
try:
    C.save_checkpoint(run_dir, 2, BigActor(1 << 20), {"pos": 2})  # 4 MiB > the 1 MiB limit
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
