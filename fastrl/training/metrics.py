"""Stage timers, the per-step log (metrics.jsonl, plus tensorboard / wandb: ``trainer.loggers``) and the
progress line."""

from __future__ import annotations

import json
import logging
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

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
    """Appends one JSON object per step to ``<run_dir>/metrics.jsonl`` (always); mirrors each step's
    numbers to tensorboard (``<run_dir>/tensorboard/``) and Weights & Biases (``<run_dir>/wandb/``)
    when ``loggers`` names them. The jsonl file is the record: resume truncates it, the tables read
    it; the trackers only mirror it (a resumed run's redone steps are sent again)."""

    def __init__(self, run_dir: Path, *, loggers: Sequence[str] = ("jsonl",), enabled: bool = True,
                 config: Mapping[str, Any] | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        self._wandb: Any = None
        if enabled and "tensorboard" in loggers:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        if enabled and "wandb" in loggers:
            self._wandb = start_wandb(run_dir, config or {})

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
        numbers = {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and k != K.STEP}
        if self._tb is not None:
            for k, v in numbers.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({WANDB_STEP: step, **numbers})

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


WANDB_ID_FILE = "wandb_id"
WANDB_STEP = "train/step"  # wandb's x-axis: the training step (a resumed run sends redone steps again)


def start_wandb(run_dir: Path, config: Mapping[str, Any]) -> Any:
    """A wandb run for ``run_dir``: named after it, in ``<run_dir>/wandb/``, its id kept in
    ``<run_dir>/wandb_id`` so a resumed run continues the same wandb run. Project, entity and mode
    come from wandb's own environment (``WANDB_PROJECT``, default ``fastrl``; ``WANDB_ENTITY``;
    ``WANDB_MODE=offline`` writes locally, ``wandb sync <run_dir>/wandb/offline-run-*`` uploads)."""
    import os
    import uuid

    import wandb

    id_file = run_dir / WANDB_ID_FILE
    if not id_file.exists():
        id_file.write_text(uuid.uuid4().hex[:12] + "\n")
    run = wandb.init(project=os.environ.get("WANDB_PROJECT", "fastrl"), name=run_dir.name, id=id_file.read_text().strip(),
                     dir=str(run_dir), config=dict(config), resume="allow", reinit="create_new")
    run.define_metric(WANDB_STEP)
    run.define_metric("*", step_metric=WANDB_STEP)
    return run


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


def step_line(step: int, total: int, metrics: dict[str, Any], elapsed_s: float, steps_timed: int) -> str:
    """One training step as a log line: ``step 3/20  reward 0.41  acc 0.38  kept 0.62  n 8
    s/step 3.1  val 0.45  (9 s, about 52 s left)``, the validation accuracy when the step had one;
    ``elapsed_s`` is the time of the last ``steps_timed`` steps (this start's), the pace of the rest."""
    from fastrl.logs import duration

    shown = progress_postfix(metrics)
    if K.VAL_ACCURACY in metrics:
        shown["val"] = f"{metrics[K.VAL_ACCURACY]:.3g}"
    left = elapsed_s / max(steps_timed, 1) * max(total - step, 0)
    return (f"step {step}/{total}  " + "  ".join(f"{k} {v}" for k, v in shown.items())
            + f"  ({duration(elapsed_s)}, about {duration(left)} left)")


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
