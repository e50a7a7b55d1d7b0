#!/usr/bin/env python3
"""Time every reward function, *unguarded* (no time box), on the inputs that used to stall them.

    PYTHONPATH=. python bench/rewards_adversarial.py            # table of ms per call
    PYTHONPATH=. python bench/rewards_adversarial.py --limit-ms 50   # exit 1 if any call is slower

Inputs (issue 16, defect 11): long whitespace runs (``normalize_tags`` was quadratic in them:
8 k spaces 2.7 s, 16 k spaces 16 s) and boxed answers whose value is astronomically large
(``9^9^9``, ``10^10^10``, ``(10!)!``, ``2^{2^{30}}``) or deeply nested (500+ braces), on which
sympy ran for > 20 s. The target is < 50 ms per call; ``tests/rewards/test_adversarial.py``
checks the same inputs with a looser bound (a loaded test box).

Each call runs in the main process under a ``SIGALRM`` of ``--cap-s`` seconds (default 60), so a
regression prints ``> cap`` instead of hanging the bench.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from fastrl.rewards import REWARD_FUNCTIONS

THINK = "<thinking>r</thinking> "

ASTRONOMICAL = ["9^9^9", "10^10^10", "(10!)!", "2^{2^{30}}", "{" * 500 + "1" + "}" * 500,
                "{" * 5000 + "1" + "}" * 5000, "((((10!)!)!)!)", "9^{9^{9}}", "10^{10^{10}}",
                "\\sqrt{" * 600 + "2" + "}" * 600, "\\frac{1}{" * 300 + "2" + "}" * 300, "2^2^2^2^2^2",
                "100000!", "9**9**9", "(9^9)^(9^9)", "9^9!", "((((9^99)^99)^99)^99)", "1+" * 3000 + "1",
                "1m" + " " * 16_000 + "x", "1,000" * 3000, "x^99999999", "\\text{" * 2000 + "1" + "}" * 2000]


def adversarial_responses() -> list[tuple[str, str]]:
    """(label, response) pairs."""
    out = []
    for n in (8_000, 16_000, 64_000):
        out.append((f"{n // 1000}k spaces, no tag", "a" + " " * n + "b \\boxed{1}"))
        out.append((f"{n // 1000}k spaces before tag", "<thinking>" + " " * n + "</thinking> \\boxed{1}"))
        out.append((f"{n // 1000}k newlines+tabs", "x" + "\n\t" * (n // 2) + "y"))
    out.append(("4k '</thinking>' repeats", "<thinking>" + "</thinking>" * 4000 + "\\boxed{"))
    out.append(("16k '\\boxed{' unclosed", "<thinking>a</thinking>" + "\\boxed{" * 16_000))
    out.append(("10k '[1,' (box-like)", "[1," * 10_000))
    out.append(("50k digits after '['", "[" + "1" * 50_000))
    out.extend((f"boxed {a[:24]!s}", f"{THINK}\\boxed{{{a}}}") for a in ASTRONOMICAL)
    return out


class _Cap(Exception):
    pass


def _time_call(fn, response: str, ground_truth: str, cap_s: float) -> float:
    def on_alarm(signum, frame):
        raise _Cap

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, cap_s, 0.05)  # re-fires: mathruler swallows a bare except
    start = time.perf_counter()
    try:
        fn(response, ground_truth)
        return time.perf_counter() - start
    except _Cap:
        return float("inf")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit-ms", type=float, default=0.0, help="exit 1 if any call takes longer (0: report only)")
    ap.add_argument("--cap-s", type=float, default=60.0, help="give up on one call after this long")
    args = ap.parse_args(argv)
    # An integer and a fraction: mathruler reaches sympy only when the ground truth is no integer.
    ground_truths = {"grounding_iou": ["[0, 0, 10, 10]"], "mc": ["B", "\\frac{1}{2}"]}
    worst = 0.0
    names = list(REWARD_FUNCTIONS)
    for name in names:  # the first sympy simplify imports its submodules (~1 s, once per process)
        for gt in ground_truths.get(name, ["\\frac{1}{2}"]):
            REWARD_FUNCTIONS[name](THINK + "\\boxed{x+1}", gt)
    print(f"{'input':34s}" + "".join(f"{n:>14s}" for n in names) + "   (ms per call, unguarded; worst ground truth)")
    for label, response in adversarial_responses():
        row = []
        for name in names:
            s = max(_time_call(REWARD_FUNCTIONS[name], response, gt, args.cap_s)
                    for gt in ground_truths.get(name, ["2", "\\frac{1}{2}"]))
            worst = max(worst, s)
            row.append(f"{'> cap':>14s}" if s == float("inf") else f"{s * 1e3:14.1f}")
        print(f"{label:34s}" + "".join(row), flush=True)
    print(f"worst: {'> cap' if worst == float('inf') else f'{worst * 1e3:.1f} ms'}")
    return 1 if args.limit_ms and worst * 1e3 > args.limit_ms else 0


if __name__ == "__main__":
    sys.exit(main())
