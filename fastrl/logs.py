"""What ``fastrl`` prints while it works: the log format and level, and progress bars.

- ``configure(level)`` (the CLI calls it: INFO by default, ``--log-level``, ``-q`` = WARNING) gives
  the ``fastrl`` loggers one handler on stderr, ``HH:MM:SS message``. Third-party loggers keep
  their own level (WARNING) unless the level is DEBUG; transformers' own bars are off when stderr is
  not a terminal or under ``-q``. Without it (``import fastrl`` from Python)
  only warnings reach stderr, as Python's default does, unless the caller configures logging.
- ``progress_bar(total, desc)`` is a tqdm bar on stderr when stderr is a terminal and the
  ``fastrl`` logger is not quieted (``-q``); else None, and callers log a line now and then
  instead (a log file gets lines, not carriage returns). Log lines go through ``tqdm.write``, so
  they print above a bar rather than through it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_ROOT = "fastrl"


class _StderrHandler(logging.Handler):
    """Writes to the current ``sys.stderr`` (tests swap it), above any live tqdm bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise (logging.Handler's contract)
            self.handleError(record)


def configure(level: str = "INFO") -> None:
    """Log ``fastrl.*`` at ``level`` (one of LEVELS) to stderr; idempotent (replaces its handler)."""
    if level.upper() not in LEVELS:
        raise ValueError(f"--log-level {level!r}: choose one of {', '.join(LEVELS)}")
    logger = logging.getLogger(_ROOT)
    for h in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    # The handler prints fastrl's records; the root logger (pytest's capture, a notebook's own
    # handler) still sees them, but Python's last-resort handler no longer doubles warnings.
    if level.upper() == "DEBUG":
        logging.getLogger().setLevel(logging.DEBUG)
    if quiet() or not sys.stderr.isatty():  # transformers' and the hub's bars: carriage returns in a log file
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def quiet() -> bool:
    """True when the ``fastrl`` logger was set above INFO (``-q``, ``--log-level WARNING``)."""
    level = logging.getLogger(_ROOT).level
    return level != logging.NOTSET and level > logging.INFO


def progress_bar(total: int, desc: str, *, initial: int = 0, unit: str = "it") -> Any:
    """A tqdm bar on stderr in a terminal (not under ``-q``), else None."""
    if quiet() or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=sys.stderr)


class Progress:
    """Progress over ``total`` units: a bar in a terminal; elsewhere a log line (``logger``, INFO)
    at every tenth of the way, with the time so far and the time left at that pace."""

    def __init__(self, total: int, desc: str, *, unit: str = "it", logger: logging.Logger | None = None) -> None:
        import time

        self.total, self.desc, self.unit, self.done = total, desc, unit, 0
        self._log = logger or logging.getLogger(_ROOT)
        self._bar = progress_bar(total, desc, unit=unit)
        self._start, self._clock, self._next = time.perf_counter(), time.perf_counter, max(1, total // 10)

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.done >= self._next or self.done >= self.total:
            self._next = self.done + max(1, self.total // 10)
            elapsed = self._clock() - self._start
            left = elapsed / max(self.done, 1) * max(self.total - self.done, 0)
            self._log.info("%s: %d/%d %ss (%s, about %s left)", self.desc, self.done, self.total, self.unit,
                           duration(elapsed), duration(left))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
