"""fastrl.mini.tasks: deterministic, split-disjoint generated tasks with worked solutions."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fastrl.data.schema import IMAGE_PLACEHOLDER
from fastrl.mini.tasks import (
    GEO_CELL,
    GEO_COLOURS,
    GEO_GRID,
    OOD_ALIAS,
    VARIANTS,
    generate_task,
    render_grid,
)

BOXED = re.compile(r"\\boxed\{ (\d+) \}$")


def _as_dicts(records):
    return [(r.uid, r.problem, r.answer, r.meta["solution"], tuple(r.meta["routes"])) for r in records]


@pytest.mark.parametrize("name", ["mini-math", "mini-geo"])
def test_deterministic_and_seed_dependent(name: str) -> None:
    a = generate_task(name, split="train", num=20, seed=3)
    b = generate_task(name, split="train", num=20, seed=3)
    c = generate_task(name, split="train", num=20, seed=4)
    assert _as_dicts(a) == _as_dicts(b)
    assert _as_dicts(a) != _as_dicts(c)
    if name == "mini-geo":
        assert all(np.array_equal(np.asarray(x.images[0]), np.asarray(y.images[0])) for x, y in zip(a, b))


@pytest.mark.parametrize("name", ["mini-math", "mini-geo"])
def test_train_and_val_are_disjoint_whatever_the_seed(name: str) -> None:
    train = {r.uid for s in (0, 1) for r in generate_task(name, split="train", num=300, seed=s)}
    val = {r.uid for s in (0, 1) for r in generate_task(name, split="val", num=60, seed=s)}
    assert train and val and not (train & val)


def test_uids_unique_within_a_call() -> None:
    recs = generate_task("mini-math", split="val", num=200, seed=0)
    assert len({r.uid for r in recs}) == 200


@pytest.mark.parametrize("variant", VARIANTS["mini-math"])
def test_math_answers_and_routes_are_correct(variant: str) -> None:
    for r in generate_task("mini-math", split="val", num=40, seed=1, variant=variant):
        expr = r.problem.removeprefix("compute ").removesuffix(" .")
        assert int(r.answer) == eval(expr)  # noqa: S307 - generated digits and +/- only
        assert r.meta["solution"] in r.meta["routes"]
        assert len(set(r.meta["routes"])) == len(r.meta["routes"]) >= 3
        for route in r.meta["routes"]:
            assert route.startswith("<thinking> ") and " </thinking> " in route
            assert BOXED.search(route).group(1) == r.answer
        assert r.images == [] and r.source.startswith("mini-math")
        assert r.meta["variant"] == variant and r.meta["split"] == "val"


def test_math_variants_differ_from_default() -> None:
    ops = {v: {tuple(re.findall(r"[+-]", r.problem)) for r in generate_task("mini-math", split="val", num=30, seed=0,
                                                                             variant=v)}
           for v in VARIANTS["mini-math"]}
    assert ops["default"] == {("+", "-")}
    assert ops["long"] == {("+", "-", "+")}
    assert ops["swap"] == {("-", "+")}


def _count(img, colour: str) -> int:
    """Count filled cells of ``colour`` by reading each cell's centre pixel."""
    arr = np.asarray(img)
    rgb = GEO_COLOURS[colour]
    return sum(
        tuple(arr[r * GEO_CELL + GEO_CELL // 2, c * GEO_CELL + GEO_CELL // 2]) == rgb
        for r in range(GEO_GRID) for c in range(GEO_GRID)
    )


@pytest.mark.parametrize("variant", VARIANTS["mini-geo"])
def test_geo_answer_needs_the_picture(variant: str) -> None:
    recs = generate_task("mini-geo", split="train", num=30, seed=2, variant=variant)
    for r in recs:
        assert r.problem.count(IMAGE_PLACEHOLDER) == 1 and len(r.images) == 1
        img = r.images[0]
        assert img.size == (GEO_GRID * GEO_CELL, GEO_GRID * GEO_CELL) and img.mode == "RGB"
        add = int(re.search(r"add (\d+) \.$", r.problem).group(1))
        if variant == "default":
            colour = "red" if "red squares" in r.problem else "blue"
            count = _count(img, colour)
        else:
            count = _count(img, "red") + _count(img, "blue")
        assert int(r.answer) == count + add
        for route in r.meta["routes"]:
            assert BOXED.search(route).group(1) == r.answer
    # The text alone does not determine the answer: equal texts, different answers.
    by_text: dict[str, set[str]] = {}
    for r in generate_task("mini-geo", split="train", num=300, seed=0, variant=variant):
        by_text.setdefault(r.problem, set()).add(r.answer)
    assert any(len(a) > 1 for a in by_text.values())


def test_ood_alias_and_errors() -> None:
    for name, target in OOD_ALIAS.items():
        assert generate_task(name, split="val", num=2, seed=0, variant="ood")[0].meta["variant"] == target
    with pytest.raises(ValueError, match="unknown task"):
        generate_task("mini-chess", split="train", num=1, seed=0)
    with pytest.raises(ValueError, match="unknown split"):
        generate_task("mini-math", split="test", num=1, seed=0)
    with pytest.raises(ValueError, match="unknown variant"):
        generate_task("mini-math", split="train", num=1, seed=0, variant="total")
    with pytest.raises(ValueError, match="ran out of distinct problems"):
        generate_task("mini-math", split="val", num=5000, seed=0)


def test_render_grid_rejects_bad_cells() -> None:
    with pytest.raises(ValueError, match="cells"):
        render_grid("rb")
