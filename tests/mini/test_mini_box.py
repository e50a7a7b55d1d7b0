"""mini-box: the generated grounding task (Table 8 at mini/smoke scale).

The answer must be the target rectangle's pixel box read back from the picture, every worked
solution must score IoU 1 under ``grounding_iou`` after a tokenizer round trip, and every text stays
inside the mini vocabulary (TASK_WORDS + numbers): a word outside it would be ``<unk>``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastrl.data.schema import IMAGE_PLACEHOLDER
from fastrl.data.templates import build_prompt_text
from fastrl.mini.tasks import (
    BOX_COLOURS,
    BOX_IMAGE_SIZE,
    BOX_SIZES,
    BOX_STEP,
    OOD_ALIAS,
    VARIANTS,
    format_box,
    generate_task,
    render_boxes,
)
from fastrl.mini.tokenizer import build_mini_tokenizer
from fastrl.rewards import score_batch
from fastrl.rewards.grounding import parse_box

BOX_VARIANTS = VARIANTS["mini-box"]


@pytest.fixture(scope="module")
def tok():
    return build_mini_tokenizer()


def _colour_of(problem: str) -> str:
    return next(c for c in BOX_COLOURS if f" {c} rectangle" in problem)


def _pixel_box(img, colour: str) -> tuple[int, int, int, int]:
    """Bounding box (x2, y2 exclusive) of the pixels painted exactly ``colour``."""
    arr = np.asarray(img)
    ys, xs = np.nonzero(np.all(arr == np.array(BOX_COLOURS[colour], dtype=arr.dtype), axis=-1))
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _key(records):
    return [(r.uid, r.problem, r.answer, tuple(r.meta["routes"]), np.asarray(r.images[0]).tobytes()) for r in records]


def test_deterministic_and_seed_dependent() -> None:
    a = generate_task("mini-box", split="train", num=20, seed=3)
    assert _key(a) == _key(generate_task("mini-box", split="train", num=20, seed=3))
    assert _key(a) != _key(generate_task("mini-box", split="train", num=20, seed=4))


def test_train_and_val_are_disjoint_whatever_the_seed() -> None:
    train = {r.uid for s in (0, 1) for r in generate_task("mini-box", split="train", num=300, seed=s)}
    val = {r.uid for s in (0, 1) for r in generate_task("mini-box", split="val", num=60, seed=s)}
    assert train and val and not (train & val)
    # A mini-scale run draws 2000 training problems without exhausting the split.
    assert len(generate_task("mini-box", split="train", num=2000, seed=1)) == 2000


@pytest.mark.parametrize("variant", BOX_VARIANTS)
def test_answer_is_the_target_box_in_the_picture(variant: str) -> None:
    recs = generate_task("mini-box", split="val", num=40, seed=2, variant=variant)
    for r in recs:
        assert r.problem.startswith(IMAGE_PLACEHOLDER) and r.problem.count(IMAGE_PLACEHOLDER) == 1
        img = r.images[0]
        assert img.size == (BOX_IMAGE_SIZE, BOX_IMAGE_SIZE) and img.mode == "RGB"
        colour = _colour_of(r.problem)
        box = _pixel_box(img, colour)
        assert r.answer == format_box(box) and parse_box(r.answer) == tuple(float(v) for v in box)
        assert all(v % BOX_STEP == 0 and 0 <= v <= BOX_IMAGE_SIZE for v in box)
        assert r.source == ("mini-box" if variant == "default" else f"mini-box:{variant}")
        assert r.meta["variant"] == variant and r.meta["split"] == "val" and r.meta["solution"] in r.meta["routes"]
    # Some pictures carry a distractor of another colour, so "the only coloured thing" is not enough.
    assert any(len({tuple(px) for px in np.asarray(r.images[0]).reshape(-1, 3)}) > 2 for r in recs)


def test_held_out_variants_differ_from_training() -> None:
    sizes = {v: {(b[2] - b[0], b[3] - b[1]) for r in generate_task("mini-box", split="val", num=50, seed=0, variant=v)
                 for b in [parse_box(r.answer)]} for v in BOX_VARIANTS}
    assert sizes["small"] == {(7.0, 7.0)}
    assert all(w in BOX_SIZES and h in BOX_SIZES for w, h in sizes["default"])
    colours = {v: {_colour_of(r.problem) for r in generate_task("mini-box", split="val", num=50, seed=0, variant=v)}
               for v in BOX_VARIANTS}
    assert colours["default"] == {"red", "blue"} and colours["green"] == {"green"}
    ood = generate_task("mini-box", split="val", num=1, seed=0, variant="ood")[0]
    assert ood.meta["variant"] == OOD_ALIAS["mini-box"]
    with pytest.raises(ValueError, match="unknown variant"):
        generate_task("mini-box", split="train", num=1, seed=0, variant="total")


@pytest.mark.parametrize("variant", BOX_VARIANTS)
def test_texts_stay_in_the_mini_vocabulary(tok, variant: str) -> None:
    """Questions and every worked solution: no <unk>, decode back to the same text."""
    for r in generate_task("mini-box", split="train", num=100, seed=0, variant=variant):
        question = r.problem.replace(IMAGE_PLACEHOLDER, "")
        assert tok.unk_token_id not in tok.encode(question, add_special_tokens=False), question
        assert len(set(r.meta["routes"])) == len(r.meta["routes"]) >= 4
        for route in r.meta["routes"]:
            ids = tok.encode(route, add_special_tokens=False)
            assert tok.unk_token_id not in ids, route
            assert tok.decode(ids) == route
            # The smoke/mini rollouts allow 48 new tokens; the solution and its EOS must fit.
            assert len(ids) + 1 <= 48, route


def test_worked_solutions_score_full_iou_and_near_misses_partial(tok) -> None:
    recs = generate_task("mini-box", split="val", num=10, seed=0)
    texts, answers = [], []
    for r in recs:
        for route in r.meta["routes"]:
            texts.append(tok.decode(tok.encode(route, add_special_tokens=False) + [tok.eos_token_id],
                                    skip_special_tokens=True))
            answers.append(r.answer)
    scores, _ = score_batch("grounding_iou", texts, answers)
    assert all(s["overall"] == 1.0 and s["format"] == 1.0 for s in scores)
    r = recs[0]
    x1, y1, x2, y2 = (int(v) for v in parse_box(r.answer))
    shifted = format_box((x1 + BOX_STEP, y1, x2 + BOX_STEP, y2))
    miss, _ = score_batch("grounding_iou", [r.meta["solution"].replace(r.answer, shifted)], [r.answer])
    assert 0.0 <= miss[0]["overall"] < 1.0


def test_prompt_uses_the_grounding_template() -> None:
    r = generate_task("mini-box", split="val", num=1, seed=0)[0]
    text = build_prompt_text(r, "fastrl_grounding")
    assert text.startswith(r.problem) and "bounding box" in text


def test_render_boxes_rejects_boxes_outside_the_picture() -> None:
    with pytest.raises(ValueError, match="outside the picture"):
        render_boxes([((0, 0, BOX_IMAGE_SIZE + 7, 14), "red")])
    with pytest.raises(ValueError, match="empty"):
        render_boxes([((14, 0, 14, 14), "red")])
