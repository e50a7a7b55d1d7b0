"""GeoQA unit-aware matching, multiple-choice letter ↔ text, grounding IoU, the registry."""

from __future__ import annotations

import pytest

from fastrl.rewards import REWARD_FUNCTIONS, failure_counts, guarded_call, score_batch
from fastrl.rewards.geoqa import geoqa_match, parse_quantity
from fastrl.rewards.grounding import box_iou, parse_box
from fastrl.rewards.mc import mc_match

F = "<thinking>r</thinking> "


def test_registry_names():
    assert set(REWARD_FUNCTIONS) == {"math", "easyr1_math", "geoqa", "mc", "grounding_iou"}
    with pytest.raises(ValueError, match="unknown reward function 'nope'.*valid"):
        score_batch("nope", ["x"], ["y"])


@pytest.mark.parametrize("pred, gt, ok", [
    ("20mm", "2cm", True), ("2cm", "20mm", True), ("0.02m", "2cm", True), ("2", "2cm", True),
    ("3cm", "2cm", False), ("60^\\circ", "60°", True), ("60", "60°", True), ("60°", "60cm", False),
    ("3.464", "2\\sqrt{3}", True), ("3.46", "2\\sqrt{3}", False), ("2√3", "2\\sqrt{3}", True),
    ("100cm^2", "0.01m^2", True), ("\\frac{1}{2}", "0.5", True), ("145°", "145°", True), ("35°", "145°", False),
    ("4\\text{cm}", "4cm", True), ("x+1", "1+x", True),
])
def test_geoqa_matching(pred, gt, ok):
    assert geoqa_match(pred, gt) is ok


def test_geoqa_parse_quantity():
    q = parse_quantity("4 cm")
    assert q.dim == "length" and q.value == pytest.approx(0.04)
    assert parse_quantity("30°").dim == "angle"


def test_geoqa_reward_keys():
    assert REWARD_FUNCTIONS["geoqa"](F + "\\boxed{20 mm}", "2cm") == {"overall": 1.5, "format": 1.0, "accuracy": 1.0}
    assert REWARD_FUNCTIONS["geoqa"]("20", "2cm")["accuracy"] == 0.0  # no box


@pytest.mark.parametrize("pred, gt, choices, ok", [
    ("B", "145°", ["35°", "145°"], True), ("(B)", "145°", ["35°", "145°"], True), ("B. 145°", "145°", ["35°", "145°"], True),
    ("145°", "145°", ["35°", "145°"], True), ("A", "145°", ["35°", "145°"], False), ("145°", "B", ["35°", "145°"], True),
    ("\\text{B}", "B", None, True), ("C", "B", None, False), ("E", "B", ["1", "2"], False), ("6", "6", None, True),
])
def test_mc_matching(pred, gt, choices, ok):
    assert mc_match(pred, gt, choices) is ok


def test_mc_reward_uses_choices_from_record_fields():
    scores, _ = score_batch("mc", [F + "\\boxed{B}", F + "\\boxed{A}"], ["60", "60"], [{"choices": ["30", "60"]}] * 2)
    assert [s["overall"] for s in scores] == [1.5, 0.5]


def test_grounding_iou():
    assert parse_box('{"bbox_2d": [1, 2, 3, 4]}') == (1.0, 2.0, 3.0, 4.0)
    assert box_iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(1 / 3)
    assert box_iou((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0
    assert box_iou((10, 0, 0, 10), (0, 0, 10, 10)) == 0.0  # degenerate
    fn = REWARD_FUNCTIONS["grounding_iou"]
    s = fn(F + "\\boxed{[0, 0, 10, 10]} and later [50, 50, 60, 60]", "[0, 0, 10, 10]")
    assert s["overall"] == 1.0 and s["iou"] == 1.0 and s["format"] == 1.0
    s = fn("the box is [5, 0, 15, 10] then [0, 0, 10, 10]", "[0, 0, 10, 10]")  # first box counts
    assert s["overall"] == pytest.approx(1 / 3) and s["format"] == 0.0
    assert fn("no box", "[0, 0, 10, 10]")["overall"] == 0.0


def test_grader_exception_scores_zero_and_is_counted():
    scores, stats = score_batch("grounding_iou", ["[0,0,1,1]", "[0,0,1,1]"], ["[0,0,1,1]", "not a box"])
    assert scores[0]["overall"] == 1.0
    assert scores[1] == {"overall": 0.0, "format": 0.0, "accuracy": 0.0, "iou": 0.0}
    assert stats == {"reward/failures": 1.0, "reward/timeouts": 0.0, "reward/n": 2.0}
    before = failure_counts()["reward/failures"]
    assert guarded_call("grounding_iou", "[0,0,1,1]", "bad")["overall"] == 0.0
    assert failure_counts()["reward/failures"] == before + 1


def test_score_batch_length_mismatch():
    with pytest.raises(ValueError, match="2 responses but 1 ground truths"):
        score_batch("math", ["a", "b"], ["c"])
