"""Stage timers, the per-step jsonl log (plus tensorboard when installed) and the progress bar."""

from __future__ import annotations

import json
import logging
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from fastrl import metric_keys as K
from fastrl.metric_keys import STAGES as STAGES  # re-exported: log readers import it from here

log = logging.getLogger(__name__)


class StageTimer:
    """Accumulates wall-clock seconds per stage under ``timing_s/<stage>`` and this process's CPU
    seconds under ``cpu_s/<stage>``: on a shared machine (2 cores, several runs at once) wall-clock
    also measures the neighbours, while CPU time measures the work (with one torch thread)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {s: 0.0 for s in STAGES}
        self.cpu_seconds: dict[str, float] = {s: 0.0 for s in STAGES}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + time.process_time() - cpu

    def metrics(self) -> dict[str, float]:
        return {**{K.timing_key(k): v for k, v in self.seconds.items()},
                **{K.cpu_key(k): v for k, v in self.cpu_seconds.items()}}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class RunLogger:
    """Appends one JSON object per step to ``<run_dir>/metrics.jsonl``; mirrors to tensorboard."""

    def __init__(self, run_dir: Path, *, tensorboard: bool, enabled: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:  # tensorboard is optional
                self._tb = None

    def truncate_after(self, step: int) -> None:
        """On resume, drop the log lines of steps after the checkpoint (they will be redone) and any
        final validation line (it is redone after the last step, so a run killed after writing it
        does not end with two); a torn last line (a kill mid-write) goes with a warning."""
        if not (self.enabled and self.path.exists()):
            return
        kept = [json.dumps(r) for r in parse_metrics(self.path)
                if r.get(K.STEP, -1) <= step and r.get(K.PHASE) != K.PHASE_VAL_FINAL]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(ln + "\n" for ln in kept))
        tmp.replace(self.path)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {K.STEP: step, **{k: _jsonable(v) for k, v in metrics.items()}}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != K.STEP:
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def parse_metrics(path: Path, *, warn: bool = True) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl. A last line that is not JSON (torn by a kill mid-write) is
    dropped with a warning naming the file; a bad line before it is an error naming file and line."""
    lines = Path(path).read_text().splitlines()
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if any(rest.strip() for rest in lines[number:]):
                raise ValueError(f"{path} line {number} is not JSON ({exc}); the log is damaged") from None
            if warn:
                log.warning("%s: dropped its torn last line %d (%d characters, not JSON: %s)", path, number,
                            len(line), exc)
    return rows


def read_metrics(run_dir: Path, *, warn: bool = True) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    return parse_metrics(path, warn=warn) if path.exists() else []


def progress_postfix(metrics: dict[str, Any]) -> dict[str, str]:
    """What the progress bar shows after each step."""
    keys = {
        "reward": K.REWARD_MEAN,
        "acc": K.REWARD_ACCURACY,
        "kept": K.PRUNE_KEPT_FRACTION,
        "n": K.ROLLOUT_N,
        "s/step": K.STEP_TIME,
    }
    out = {}
    for label, key in keys.items():
        if key in metrics:
            v = metrics[key]
            out[label] = f"{v:.3g}" if isinstance(v, float) else str(v)
    return out
