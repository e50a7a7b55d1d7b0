"""Aimed process kills for the fault-injection tests.

``FASTRL_TEST_KILL_AT=<point>[:<k>]`` SIGKILLs this process the k-th time (default: the first) it
reaches ``fault_point(<point>)``; the tests aim kills inside a checkpoint write with it. Unset, a
fault point costs one dict lookup. Its own module, so that the checkpoint and run-directory
modules, which both place fault points, need not import each other.
"""

from __future__ import annotations

import os
import signal

KILL_ENV = "FASTRL_TEST_KILL_AT"
_fault_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    """SIGKILL this process here when ``$FASTRL_TEST_KILL_AT`` names this point (tests only)."""
    target = os.environ.get(KILL_ENV)
    if not target or target.split(":")[0] != name:
        return
    _fault_hits[name] = _fault_hits.get(name, 0) + 1
    if _fault_hits[name] == int(target.partition(":")[2] or 1):
        os.kill(os.getpid(), signal.SIGKILL)
