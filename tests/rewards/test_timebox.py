"""A hanging grader is cut off (signal path in the main thread, process path elsewhere), scores
0, is counted, and the run goes on."""

from __future__ import annotations

import threading
import time

import pytest

import fastrl.rewards as rewards
from fastrl.rewards import score_batch
from fastrl.rewards.timebox import GradingTimeout, run_time_boxed


def hang(response: str, ground_truth: str, **_: object) -> dict[str, float]:
    """Pure-Python busy loop, like a sympy simplify that never ends."""
    x = 0
    while True:
        x += 1


def hang_swallowing(response: str, ground_truth: str, **_: object) -> dict[str, float]:
    """Swallows the alarm with a bare except, like mathruler's are_equal_under_sympy, then hangs again."""
    for _attempt in range(3):
        try:
            while True:
                pass
        except:  # noqa: E722 - deliberately as bad as the real grader
            pass
    return {"overall": 1.0, "format": 1.0, "accuracy": 1.0}


def quick(response: str, ground_truth: str, **_: object) -> dict[str, float]:
    ok = float(response == ground_truth)
    return {"overall": ok, "format": 0.0, "accuracy": ok}


@pytest.fixture
def fake_registry(monkeypatch):
    for name, fn in (("hang", hang), ("hang_swallowing", hang_swallowing), ("quick", quick)):
        monkeypatch.setitem(rewards.REWARD_FUNCTIONS, name, fn)
        monkeypatch.setitem(rewards.REWARD_KEYS, name, ("overall", "format", "accuracy"))


def test_signal_timeout_in_main_thread(fake_registry):
    t0 = time.perf_counter()
    scores, stats = score_batch("hang", ["a", "b"], ["a", "b"], timeout_s=0.2)
    elapsed = time.perf_counter() - t0
    assert scores == [{"overall": 0.0, "format": 0.0, "accuracy": 0.0}] * 2
    assert stats["reward/timeouts"] == 2 and stats["reward/failures"] == 2
    assert elapsed < 2.0
    # the run goes on: a normal call right after works
    assert score_batch("quick", ["a"], ["a"])[0][0]["accuracy"] == 1.0


def test_swallowed_alarm_still_counts_as_timeout(fake_registry):
    t0 = time.perf_counter()
    scores, stats = score_batch("hang_swallowing", ["a"], ["a"], timeout_s=0.2)
    assert scores[0]["overall"] == 0.0 and stats["reward/timeouts"] == 1
    assert time.perf_counter() - t0 < 2.0


def test_process_timeout_off_the_main_thread(fake_registry):
    out: dict[str, object] = {}

    def work() -> None:
        t0 = time.perf_counter()
        out["hang"] = score_batch("hang", ["a"], ["a"], timeout_s=0.5)
        out["hang_s"] = time.perf_counter() - t0
        out["quick"] = score_batch("quick", ["a", "b"], ["a", "c"], timeout_s=5.0)

    th = threading.Thread(target=work)
    th.start()
    th.join(timeout=120)
    assert not th.is_alive()
    scores, stats = out["hang"]
    assert scores[0]["overall"] == 0.0 and stats["reward/timeouts"] == 1
    assert out["hang_s"] < 30.0  # includes one worker start-up
    q_scores, q_stats = out["quick"]
    assert [s["accuracy"] for s in q_scores] == [1.0, 0.0] and q_stats["reward/failures"] == 0


def test_run_time_boxed_modes():
    with pytest.raises(GradingTimeout):
        run_time_boxed(hang, "a", "b", timeout_s=0.1, mode="signal")
    with pytest.raises(ValueError, match="unknown time-box mode"):
        run_time_boxed(quick, "a", "b", mode="threads")
    assert run_time_boxed(quick, "a", "a", timeout_s=1.0)["accuracy"] == 1.0


def test_signal_path_is_fast_for_many_calls():
    responses = ["<thinking>x</thinking> \\boxed{" + str(i) + "}" for i in range(300)]
    t0 = time.perf_counter()
    scores, stats = score_batch("math", responses, [str(i) for i in range(300)])
    assert all(s["overall"] == 1.5 for s in scores) and stats["reward/failures"] == 0
    assert time.perf_counter() - t0 < 10.0
