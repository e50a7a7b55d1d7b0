"""Rewards in bounded time (issue 16, defect 11): inputs a policy can emit that used to stall the
scorers for seconds (whitespace runs: quadratic tag normalisation) or minutes (sympy evaluating
``9^9^9`` exactly), each now scored fast *without* the time box.

The time bound here is loose (0.5 s, a loaded test box); ``bench/rewards_adversarial.py`` measures
the real times against the 50 ms target. A call that still stalls is cut at 3 s, so a regression
fails the test instead of hanging it.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from fastrl.rewards import REWARD_FUNCTIONS
from fastrl.rewards.bounded import sympy_hazard
from fastrl.rewards.common import format_ok, grade, normalize_tags
from fastrl.rewards.geoqa import geoqa_match, parse_quantity
from fastrl.rewards.timebox import run_time_boxed

BOUND_S = 0.5
CUT_S = 3.0
THINK = "<thinking>r</thinking> "

ASTRONOMICAL = ["9^9^9", "10^10^10", "(10!)!", "2^{2^{30}}", "{" * 500 + "1" + "}" * 500,
                "9**9**9", "(9^9)^(9^9)", "100000!", "((((9^99)^99)^99)^99)", "9^9!"]
WHITESPACE = {"8k spaces": "a" + " " * 8_000 + "b \\boxed{1}", "16k spaces": "a" + " " * 16_000 + "b \\boxed{1}",
              "16k newlines": "x" + "\n\t" * 8_000 + "y", "unclosed boxes": THINK + "\\boxed{" * 16_000,
              "boxed unit + spaces": THINK + "\\boxed{1m" + " " * 16_000 + "x}"}
# An integer and a fraction: mathruler reaches sympy only when the ground truth is no integer.
GROUND_TRUTHS = {"grounding_iou": ["[0, 0, 10, 10]"], "mc": ["B", "\\frac{1}{2}"]}


def _seconds(name: str, response: str, ground_truth: str) -> float:
    start = time.perf_counter()
    run_time_boxed(REWARD_FUNCTIONS[name], response, ground_truth, timeout_s=CUT_S, mode="signal")
    return time.perf_counter() - start


@pytest.fixture(scope="module", autouse=True)
def _warm():
    for name in REWARD_FUNCTIONS:  # first calls import sympy's simplifier (~1 s, once per process)
        for gt in GROUND_TRUTHS.get(name, ["\\frac{1}{2}"]):
            REWARD_FUNCTIONS[name](THINK + "\\boxed{x+1}", gt)


@pytest.mark.parametrize("name", sorted(REWARD_FUNCTIONS))
@pytest.mark.parametrize("answer", ASTRONOMICAL, ids=lambda a: a[:16])
def test_astronomical_answers_score_fast_unguarded(name, answer):
    for gt in GROUND_TRUTHS.get(name, ["2", "\\frac{1}{2}"]):
        assert _seconds(name, f"{THINK}\\boxed{{{answer}}}", gt) < BOUND_S, (name, answer, gt)


@pytest.mark.parametrize("name", sorted(REWARD_FUNCTIONS))
@pytest.mark.parametrize("label", sorted(WHITESPACE))
def test_long_whitespace_runs_score_fast_unguarded(name, label):
    for gt in GROUND_TRUTHS.get(name, ["2"]):
        assert _seconds(name, WHITESPACE[label], gt) < BOUND_S, (name, label)


def test_astronomical_values_are_not_numbers_and_never_match():
    for answer in ASTRONOMICAL:
        assert parse_quantity(answer).value is None, answer
        assert not geoqa_match(answer, "2") and not grade(answer, "\\frac{1}{2}"), answer
    assert grade("(10!)!", "(10!)!") and geoqa_match("9^9^9", "9^9^9")  # the same text still matches


def test_sympy_hazard_refuses_only_what_is_too_large():
    for answer in ["9^9^9", "10^10^10", "(10!)!", "2^(2^(30))", "9**9**9", "1001!", "(1/3)^(10^7)", "(" * 21 + ")" * 21]:
        assert sympy_hazard(answer) is not None, answer
    for answer in ["2*sqrt(3)", "10^400", "1000!", "2^10", "2**2**2**2", "x^2-1", "(1,2)", "pi", "5!", "(" * 20 + ")" * 20]:
        assert sympy_hazard(answer) is None, answer


@pytest.mark.parametrize("pred, gt, ok", [
    ("2^{10}", "1024", True), ("5!", "120", True), ("10!", "3628800", True), ("2^3^2", "512", True),
    ("10^{3}", "1000", True), ("2\\sqrt{3}", "3.464", True), ("2^{10}", "1000", False),
])
def test_geoqa_small_powers_and_factorials_still_evaluate(pred, gt, ok):
    assert geoqa_match(pred, gt) is ok


_OLD_TAG_WS = re.compile(r"\s*(<|>|/)\s*")  # the quadratic pattern normalize_tags replaced
_OLD_FORMAT = r"<{tag}>.*</{tag}>.*\\boxed\{{.*\}}.*"


def _random_texts(n: int) -> list[str]:
    rng = random.Random(0)
    atoms = [" ", "  ", "\n", "\t", "<", ">", "/", "a", "x", "thinking", "<thinking>", "</thinking>", "\\boxed{", "}", "{"]
    return [" ".join(rng.choice(atoms) for _ in range(rng.randint(0, 12))).replace("  ", rng.choice(["", " ", "\n"]))
            for _ in range(n)] + ["", " ", "< thinking >a< / thinking > \\boxed{1}", " / ", "<\u00a0>", "a\u2003/b"]


def test_normalize_tags_equals_the_old_regex():
    for text in _random_texts(3000):
        assert normalize_tags(text) == _OLD_TAG_WS.sub(r"\1", text), repr(text)


def test_format_ok_equals_the_old_regex():
    for text in _random_texts(3000):
        text = normalize_tags(text)
        for tag in ("thinking", "think"):
            old = re.compile(_OLD_FORMAT.format(tag=tag), re.DOTALL).fullmatch(text) is not None
            assert format_ok(text, tag) is old, (text, tag)
