"""The paper's reward (accuracy + 0.5·format) and EasyR1's variant."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fastrl.rewards import REWARD_FUNCTIONS, score_batch
from fastrl.rewards.common import extract_boxed
from fastrl.rewards import compute_score
from fastrl.rewards.math import easyr1_compute_score_unguarded

SHARED = Path(os.environ.get("FASTRL_SHARED_DIR", Path(__file__).resolve().parents[2]))


def test_paper_cases():
    assert compute_score("<thinking>2+2=4</thinking> so \\boxed{4}", "4") == {"overall": 1.5, "format": 1.0, "accuracy": 1.0}
    assert compute_score("2+2 is \\boxed{4}", "4") == {"overall": 1.0, "format": 0.0, "accuracy": 1.0}
    assert compute_score("<thinking>2+2=5</thinking> \\boxed{5}", "4") == {"overall": 0.5, "format": 1.0, "accuracy": 0.0}
    for no_box in ("<thinking>it is 4</thinking> 4", "4", "<thinking>4</thinking> \\boxed{4", ""):
        s = compute_score(no_box, "4")
        assert s["accuracy"] == 0.0 and s["overall"] <= 0.5, (no_box, s)


def test_reward_values_are_the_four_levels():
    cases = ["<thinking>a</thinking>\\boxed{1}", "\\boxed{1}", "<thinking>a</thinking>\\boxed{2}", "nothing"]
    assert [compute_score(c, "1")["overall"] for c in cases] == [1.5, 1.0, 0.5, 0.0]


def test_missing_box_is_never_correct_even_against_none():
    # mathruler's extract_boxed_content returns the string "None" when there is no box.
    assert extract_boxed("no box here") is None
    assert compute_score("<thinking>x</thinking> None", "None")["accuracy"] == 0.0
    assert compute_score("no box", "\\text{None}")["accuracy"] == 0.0
    # ...while a real \boxed{None} is graded.
    assert compute_score("\\boxed{None}", "None")["accuracy"] == 1.0


def test_whitespace_around_tag_characters_is_ignored():
    s = compute_score("< thinking >reason< / thinking > \\boxed{\\frac{1}{2}}", "0.5")
    assert s == {"overall": 1.5, "format": 1.0, "accuracy": 1.0}


def test_format_needs_box_after_thinking():
    assert compute_score("\\boxed{3} <thinking>x</thinking>", "3")["format"] == 0.0
    assert compute_score("<think>x</think> \\boxed{3}", "3")["format"] == 0.0  # paper uses <thinking>


def test_last_box_is_graded():
    assert compute_score("<thinking>\\boxed{1}</thinking> \\boxed{2}", "2")["accuracy"] == 1.0


def test_easyr1_variant():
    assert easyr1_compute_score_unguarded("<think>x</think> \\boxed{3}", "3") == {"overall": 1.0, "format": 1.0, "accuracy": 1.0}
    s = easyr1_compute_score_unguarded("\\boxed{3}", "3")
    assert s["overall"] == pytest.approx(0.9) and s["format"] == 0.0
    s = easyr1_compute_score_unguarded("<think>x</think> \\boxed{4}", "3")
    assert s["overall"] == pytest.approx(0.1)
    assert REWARD_FUNCTIONS["easyr1_math"] is easyr1_compute_score_unguarded


def test_math500_gold_answers_graded_correct():
    rows = [json.loads(line) for line in (SHARED / "data" / "math500" / "test.jsonl").open()]
    responses = [f"<thinking>The answer follows.</thinking> \\boxed{{{r['answer']}}}" for r in rows]
    scores, stats = score_batch("math", responses, [r["answer"] for r in rows])
    rate = sum(s["accuracy"] for s in scores) / len(scores)
    print(f"MATH-500 gold answers graded correct: {rate:.4f} ({int(rate * len(rows))}/{len(rows)})")
    assert len(rows) == 500
    assert all(s["format"] == 1.0 for s in scores)
    assert stats["reward/failures"] == 0
    assert rate == 1.0  # measured: 500/500
