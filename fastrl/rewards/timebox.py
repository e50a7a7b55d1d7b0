"""Time-boxing for reward calls (sympy, inside mathruler, can hang on some inputs).

sympy is pure Python, so a thread cannot interrupt it. Two mechanisms:

- ``signal``: in the main thread, ``SIGALRM`` via ``setitimer`` raises ``GradingTimeout`` inside
  the call. Costs microseconds per call, so thousands of calls are cheap. mathruler wraps sympy in
  a bare ``except:`` that would swallow a one-shot alarm, so the timer re-fires every 50 ms after
  the deadline until the call returns, and a call during which the alarm fired counts as a
  time-out even if it returned.
- ``process``: elsewhere (worker threads, or when another ``SIGALRM`` timer is already armed), the
  call runs in a small persistent pool of spawned worker processes; on a time-out the worker is
  killed and replaced. Spawned (not forked) so a process holding torch/OpenMP threads is not
  forked. The first call pays the worker start-up (≈1 s), later calls only a pipe round trip.

``mode="auto"`` picks ``signal`` when it can and ``process`` otherwise.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing as mp
import signal
import threading
import traceback
from typing import Any, Callable

DEFAULT_TIMEOUT_S = 5.0
_REFIRE_S = 0.05
_STARTUP_TIMEOUT_S = 300.0  # a fresh worker's interpreter start and imports, outside the time box


class GradingTimeout(Exception):
    """A reward call ran past its time box."""


class GradingError(RuntimeError):
    """A reward call raised inside a worker process (message carries the original traceback)."""


def _signal_usable() -> bool:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    # Another alarm armed (e.g. a test-timeout plugin): do not clobber it.
    return signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def _run_with_signal(fn: Callable[..., Any], args: tuple, kwargs: dict, timeout_s: float) -> Any:
    fired = False

    def on_alarm(signum: int, frame: Any) -> None:
        nonlocal fired
        fired = True
        raise GradingTimeout(f"{getattr(fn, '__name__', fn)} ran past {timeout_s:.3g}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s, _REFIRE_S)
            try:
                result = fn(*args, **kwargs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0.0)
        except GradingTimeout:
            raise
        except Exception:
            if fired:  # the alarm surfaced as some other exception type
                raise GradingTimeout(f"{getattr(fn, '__name__', fn)} ran past {timeout_s:.3g}s") from None
            raise
    finally:
        signal.signal(signal.SIGALRM, previous)
    if fired:  # swallowed by a bare except inside fn
        raise GradingTimeout(f"{getattr(fn, '__name__', fn)} ran past {timeout_s:.3g}s")
    return result


def _worker_main(conn: Any) -> None:
    # Workers ignore SIGINT: the parent owns shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        if msg[0] == "import":  # warm-up: import the grader's module outside any time box
            try:
                importlib.import_module(msg[1])
                conn.send(("ok", None))
            except BaseException as e:
                conn.send(("err", f"{type(e).__name__}: {e}"))
            continue
        _, fn, args, kwargs = msg
        try:
            conn.send(("ok", fn(*args, **kwargs)))
        except BaseException as e:  # report everything; the parent decides
            conn.send(("err", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class _Worker:
    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True, name="fastrl-reward-worker")
        self.proc.start()
        child.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class _WorkerPool:
    """Idle workers reused across calls; a worker that timed out is killed, not returned."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def call(self, fn: Callable[..., Any], args: tuple, kwargs: dict, timeout_s: float) -> Any:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None or not worker.proc.is_alive():
            worker = self._fresh_worker(getattr(fn, "__module__", None))
        worker.conn.send(("call", fn, args, kwargs))
        if not worker.conn.poll(timeout_s):
            worker.kill()
            raise GradingTimeout(f"{getattr(fn, '__name__', fn)} ran past {timeout_s:.3g}s (worker killed)")
        status, payload = worker.conn.recv()
        with self._lock:
            self._idle.append(worker)
        if status == "err":
            raise GradingError(payload)
        return payload

    @staticmethod
    def _fresh_worker(module: str | None) -> _Worker:
        """Start a worker and import ``module`` in it before any time box starts."""
        worker = _Worker()
        worker.conn.send(("import", module or "fastrl.rewards"))
        if not worker.conn.poll(_STARTUP_TIMEOUT_S):
            worker.kill()
            raise RuntimeError(f"reward worker did not start within {_STARTUP_TIMEOUT_S:.0f}s")
        status, payload = worker.conn.recv()
        if status == "err":
            worker.kill()
            raise GradingError(f"reward worker could not import {module!r}: {payload}")
        return worker

    def warm(self, n: int = 1, module: str = "fastrl.rewards") -> None:
        with self._lock:
            missing = n - len(self._idle)
        fresh = [self._fresh_worker(module) for _ in range(max(0, missing))]
        with self._lock:
            self._idle.extend(fresh)

    def shutdown(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for w in workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            w.proc.join(timeout=1)
            if w.proc.is_alive():
                w.kill()


_POOL = _WorkerPool()
atexit.register(_POOL.shutdown)


def run_time_boxed(
    fn: Callable[..., Any],
    *args: Any,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    mode: str = "auto",
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)`` cut off after ``timeout_s`` seconds (raises ``GradingTimeout``).

    ``mode``: ``auto`` | ``signal`` | ``process`` (see module doc). In ``process`` mode ``fn`` and its
    arguments must be picklable (module-level functions); a fresh worker imports ``fn``'s module
    before the call is sent, so start-up is never counted against ``timeout_s``.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if mode == "auto":
        mode = "signal" if _signal_usable() else "process"
    if mode == "signal":
        if not _signal_usable():
            raise RuntimeError("signal time-boxing needs the main thread and no other armed SIGALRM timer")
        return _run_with_signal(fn, args, kwargs, timeout_s)
    if mode == "process":
        return _POOL.call(fn, args, kwargs, timeout_s)
    raise ValueError(f"unknown time-box mode {mode!r}; valid: auto, signal, process")


def warm_workers(n: int = 1, module: str = "fastrl.rewards") -> None:
    """Start ``n`` idle worker processes now, with ``module`` imported in each."""
    _POOL.warm(n, module)


def shutdown_workers() -> None:
    _POOL.shutdown()
