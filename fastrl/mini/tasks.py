"""Generated mini tasks for the ``mini`` and ``smoke`` scales (docs/architecture.md, Scales).

Two tasks mirror the paper's data and are graded by the paper's reward unchanged (accuracy via
mathruler's boxed-answer grading + 0.5 x format ``<thinking>...</thinking>`` then ``\\boxed{}``):

- ``mini-math`` (text): multi-step integer arithmetic, e.g. ``compute 7 + 12 - 5 .``
- ``mini-geo`` (vision): a small rendered grid of red and blue squares; the answer needs the
  picture (a count of squares of one colour) plus one arithmetic step given in the text.

A third stands in for RefCOCO (Table 8) and is graded by the continuous ``grounding_iou`` reward
(template ``fastrl_grounding``):

- ``mini-box`` (vision): a 56x56 picture with one filled rectangle of the asked colour (and maybe a
  distractor of another colour); the answer is its pixel box ``[ x1 , y1 , x2 , y2 ]``.

Every record carries several worked solutions (``meta["routes"]``) that reach the answer by
different routes and in different words, and one of them as ``meta["solution"]`` (the SFT
target). Different routes give responses to the same question different token *sets*, the way
real reasoning traces differ; that is what MDAP's Jaccard distance needs to see (a solution
written in a handful of characters would make every pair of responses look alike).

Everything is deterministic from ``seed``. Train and validation are disjoint: a problem's split
is a hash of its content, not of the seed, so no seed can leak validation problems into
training. ``variant=`` selects held-out generators the policy never trains on (the
"out-of-domain" benchmarks): ``mini-math``: ``long`` (four operands), ``swap`` (``a - b + c``);
``mini-geo``: ``total`` (count both colours); ``mini-box``: ``small`` (7-pixel squares, smaller
than any training rectangle), ``green`` (a colour never asked for in training).
``variant="ood"`` is an alias of the task's primary held-out variant (``OOD_ALIAS``).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable

from PIL import Image, ImageDraw

from fastrl.data.schema import IMAGE_PLACEHOLDER, Record
from fastrl.data.splits import Split, TaskSplits
from fastrl.tasks import GENERATED_TASKS

TASKS: tuple[str, ...] = GENERATED_TASKS  # registered in fastrl.tasks (data.task) by these names
VARIANTS: dict[str, tuple[str, ...]] = {
    "mini-math": ("default", "long", "swap"),
    "mini-geo": ("default", "total"),
    "mini-box": ("default", "small", "green"),
}
# ``variant="ood"`` names each task's primary held-out generator.
OOD_ALIAS: dict[str, str] = {"mini-math": "long", "mini-geo": "total", "mini-box": "small"}
SPLITS: tuple[str, ...] = ("train", "val")

# Fraction of each problem space that belongs to the validation split (by content hash).
VAL_BUCKETS = 10  # 1 bucket of 10 -> ~10 % of problems are validation problems

# A draw is rejected when it belongs to the other split or repeats a problem; this many
# rejections in a row mean the split has (almost) no unseen problem left.
MAX_CONSECUTIVE_MISSES = 20_000

# Numbers every generator may write, as whole tokens of the mini tokenizer.
MAX_NUMBER = 99

# mini-math operand range (measured: [0, 15] lets a 0.9M-parameter model learn a+b-c within
# minutes of SFT; [0, 50] was far slower).
MATH_MAX_OPERAND = 15

# mini-geo picture: a GEO_GRID x GEO_GRID board of GEO_CELL-pixel cells. One cell is one
# 14-pixel vision patch, so a 56x56 picture is 16 patches, 4 image tokens after the 2x2 merge.
GEO_GRID = 4
GEO_CELL = 14
GEO_IMAGE_SIZE = GEO_GRID * GEO_CELL
GEO_MAX_PER_COLOUR = 6
GEO_MAX_ADD = 9
GEO_COLOURS: dict[str, tuple[int, int, int]] = {"red": (220, 30, 30), "blue": (30, 60, 220)}
GEO_BACKGROUND = (255, 255, 255)
GEO_MARGIN = 2  # pixels of background around each filled square

# mini-box picture: the same 56x56 size as mini-geo, because the tiny VL's image processor keeps
# images at TinyModelSpec.image_size (56 by default: 16 patches, 4 image tokens). Rectangle edges
# lie on a BOX_STEP-pixel lattice, so each coordinate takes one of 9 values (0, 7, ..., 56): a
# tiny model can learn that in an SFT warm start, and a near miss still earns partial IoU.
# Boxes are ``[x1, y1, x2, y2]`` with x2, y2 exclusive (width = x2 - x1), all within 0..56.
BOX_IMAGE_SIZE = GEO_IMAGE_SIZE
BOX_STEP = 7
BOX_SIZES: tuple[int, ...] = (14, 21, 28, 35)  # default target widths/heights (2..5 steps)
BOX_SMALL_SIZES: tuple[int, ...] = (7,)  # held-out "small": one step, never seen in training
BOX_DISTRACTOR_SIZES: tuple[int, ...] = (7, 14, 21)
BOX_DISTRACTOR_PROB = 0.5
BOX_COLOURS: dict[str, tuple[int, int, int]] = {**GEO_COLOURS, "green": (30, 170, 60)}
BOX_TRAIN_COLOURS: tuple[str, ...] = ("red", "blue")
BOX_PLACEMENT_TRIES = 50  # distractor placements tried before drawing the target alone

THINK_OPEN = "<thinking>"
THINK_CLOSE = "</thinking>"
BOXED_OPEN = "\\boxed{"
BOXED_CLOSE = "}"

# Every word and symbol any template below may write (numbers 0..MAX_NUMBER come on top).
# The mini tokenizer's vocabulary is built from this list; a test checks the generators stay
# inside it.
TASK_WORDS: tuple[str, ...] = (
    # symbols
    "+", "-", "=", ".", ",", ":", "?",
    # mini-math
    "compute", "first", "then", "add", "subtract", "and", "to", "get", "from", "plus", "minus",
    "is", "so", "the", "answer", "positive", "negative", "part", "numbers", "sum", "of", ";",
    "next", "after", "that", "giving", "which", "makes", "combine", "with", "put", "on", "top",
    "take", "away", "remove", "two", "differ", "by", "number", "second", "third", "fourth", "leaves",
    "imagine", "a", "box", "balls", "apples", "coins", "ball", "apple", "coin", "you", "more", "now", "fall", "out", "remain",
    # mini-geo
    "how", "many", "red", "blue", "squares", "are", "in", "picture", "count", "there", "i",
    "see", "we", "need", "has", "all", "total", "looking", "at", "grid", "cells", "extra", "filled",
    # mini-box (grounding): answers are pixel boxes "[ x1 , y1 , x2 , y2 ]"
    "[", "]", "where", "find", "locate", "left", "right", "bottom", "edge", "edges", "corner", "x", "y",
    "column", "row", "columns", "rows", "pixels", "pixel", "it", "its", "spans", "starts", "ends",
    "goes", "wide", "tall", "width", "height", "green", "object", "rectangle", "coordinates", "give",
)

Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class _Problem:
    """One generated problem before it becomes a Record (``key`` decides its split)."""

    key: str
    problem: str
    answer: int | str  # mini-box: the box string "[ x1 , y1 , x2 , y2 ]"
    routes: tuple[str, ...]
    image: Image.Image | None = None


def _stable_int(*parts: object) -> int:
    """A process-independent 64-bit integer from ``parts`` (``hash()`` is salted per process)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def split_of(name: str, variant: str, key: str) -> str:
    """The split a problem belongs to, from its content alone (never from the seed)."""
    return "val" if _stable_int("split", name, variant, key) % VAL_BUCKETS == 0 else "train"


def _boxed(answer: int | str) -> str:
    return f"{BOXED_OPEN} {answer} {BOXED_CLOSE}"


def _wrap(thinking: str, answer: int | str) -> str:
    """The paper's response format: reasoning inside ``<thinking>``, then the boxed answer."""
    return f"{THINK_OPEN} {thinking} {THINK_CLOSE} {_boxed(answer)}"


# ---------------------------------------------------------------------------------------------
# mini-math


def _math_terms(variant: str, rng: random.Random) -> list[tuple[str, int]]:
    """Signed operands ``[(op, value), ...]`` whose running value never goes below zero.

    The first op is always ``+``; intermediate and final values stay within [0, MAX_NUMBER].
    """
    hi = MATH_MAX_OPERAND
    while True:
        if variant == "default":  # a + b - c
            terms = [("+", rng.randint(0, hi)), ("+", rng.randint(0, hi)), ("-", rng.randint(0, hi))]
        elif variant == "long":  # a + b - c + d
            terms = [("+", rng.randint(0, hi)), ("+", rng.randint(0, hi)), ("-", rng.randint(0, hi)),
                     ("+", rng.randint(0, hi))]
        elif variant == "swap":  # a - b + c
            terms = [("+", rng.randint(0, hi)), ("-", rng.randint(0, hi)), ("+", rng.randint(0, hi))]
        else:
            raise ValueError(f"mini-math: unknown variant {variant!r}; valid: {VARIANTS['mini-math']}")
        running = [terms[0][1]]
        for op, v in terms[1:]:
            running.append(running[-1] + v if op == "+" else running[-1] - v)
        if min(running) >= 0 and max(running) <= MAX_NUMBER:
            return terms


def _apply(op: str, x: int, y: int) -> int:
    return x + y if op == "+" else x - y


# Wording choices. Each record's routes draw one phrasing per slot, so across records the SFT
# data holds several phrasings of every route and a policy sampled at T=1 varies its wording the
# way an LLM does; that spreads token sets apart beyond what the route alone does.
_THEN = ("then", "next", "after that")
_GET = ("to get", "giving", "which makes")
_ADD = ("add {x} and {y}", "combine {x} with {y}")
_ADD_TO = ("add {y} to {x}", "put {y} on top of {x}")
_SUB = ("subtract {y} from {x}", "take away {y} from {x}", "remove {y} from {x}")
_ORDINALS = ("first", "second", "third", "fourth")


def _route_chain(terms: list[tuple[str, int]], rng: random.Random) -> tuple[str, int]:
    """Left to right, one equation per step: ``7 + 12 = 19 . 19 - 5 = 14 .``"""
    acc = terms[0][1]
    steps = []
    for op, v in terms[1:]:
        new = _apply(op, acc, v)
        steps.append(f"{acc} {op} {v} = {new} .")
        acc = new
    return " ".join(steps), acc


def _route_words(terms: list[tuple[str, int]], rng: random.Random) -> tuple[str, int]:
    """Left to right in words: ``first add 7 and 12 to get 19 , then take away 5 from 19 ...``"""
    acc = terms[0][1]
    steps = []
    for i, (op, v) in enumerate(terms[1:]):
        new = _apply(op, acc, v)
        if op == "+":
            verb = rng.choice(_ADD if i == 0 else _ADD_TO).format(x=acc, y=v)
        else:
            verb = rng.choice(_SUB).format(x=acc, y=v)
        lead = "first" if i == 0 else rng.choice(_THEN)
        steps.append(f"{lead} {verb} {rng.choice(_GET)} {new}")
        acc = new
    return " , ".join(steps) + " .", acc


def _route_positional(terms: list[tuple[str, int]], rng: random.Random) -> tuple[str, int]:
    """Refers to operands by position: ``the first two numbers sum to 19 ; minus the third ...``"""
    acc = _apply(terms[1][0], terms[0][1], terms[1][1])
    verb = "sum to" if terms[1][0] == "+" else "differ by"
    steps = [f"the first two numbers {verb} {acc}"]
    for i, (op, v) in enumerate(terms[2:], start=2):
        acc = _apply(op, acc, v)
        word = "plus" if op == "+" else "minus"
        steps.append(f"{word} the {_ORDINALS[i]} number {rng.choice(('leaves', 'is', 'makes'))} {acc}")
    return " ; ".join(steps) + " ;", acc


def _route_prose(terms: list[tuple[str, int]], rng: random.Random) -> tuple[str, int]:
    """Running prose: ``7 plus 12 is 19 , 19 minus 5 is 14 , so the answer is 14 .``"""
    acc = terms[0][1]
    parts = []
    for op, v in terms[1:]:
        new = _apply(op, acc, v)
        parts.append(f"{acc} {'plus' if op == '+' else 'minus'} {v} is {new} ,")
        acc = new
    return f"{' '.join(parts)} so the answer is {acc} .", acc


def _route_regroup(terms: list[tuple[str, int]], rng: random.Random) -> tuple[str, int]:
    """Positives first, then negatives: ``positive part : 7 + 12 = 19 . negative part : 5 . ...``"""
    pos = [v for op, v in terms if op == "+"]
    neg = [v for op, v in terms if op == "-"]
    psum, nsum = sum(pos), sum(neg)
    out = [f"positive part : {' + '.join(map(str, pos))} = {psum} ." if len(pos) > 1
           else f"positive part : {psum} ."]
    out.append(f"negative part : {' + '.join(map(str, neg))} = {nsum} ." if len(neg) > 1
               else f"negative part : {nsum} .")
    out.append(f"{psum} - {nsum} = {psum - nsum} .")
    return " ".join(out), psum - nsum


def _route_story(terms: list[tuple[str, int]], rng: random.Random) -> tuple[str, int]:
    """The sum as a story about objects: ``imagine a box with 7 coins . you put in 12 more ...``

    Shares few tokens with the symbolic routes besides the numbers, as a differently worded
    reasoning trace does.
    """
    obj = rng.choice(("balls", "apples", "coins"))
    acc = terms[0][1]
    parts = [f"imagine a box with {acc} {obj} ."]
    for op, v in terms[1:]:
        acc = _apply(op, acc, v)
        if op == "+":
            parts.append(f"you put in {v} more , now there are {acc} .")
        else:
            parts.append(f"{v} {obj if v != 1 else obj[:-1]} fall out , so {acc} remain .")
    return " ".join(parts), acc


_MATH_ROUTES: tuple[Callable[[list[tuple[str, int]], random.Random], tuple[str, int]], ...] = (
    _route_chain, _route_words, _route_positional, _route_prose, _route_regroup, _route_story,
)


def _math_problem(variant: str, rng: random.Random) -> _Problem:
    terms = _math_terms(variant, rng)
    expr = " ".join([str(terms[0][1])] + [f"{op} {v}" for op, v in terms[1:]])
    answer = _apply_all(terms)
    routes = []
    for route in _MATH_ROUTES:
        thinking, value = route(terms, rng)
        if value != answer:  # a route that disagrees with the expression is a generator bug
            raise AssertionError(f"mini-math route {route.__name__} gave {value} for {expr} = {answer}")
        routes.append(_wrap(thinking, answer))
    return _Problem(key=expr, problem=f"compute {expr} .", answer=answer, routes=tuple(routes))


def _apply_all(terms: list[tuple[str, int]]) -> int:
    acc = terms[0][1]
    for op, v in terms[1:]:
        acc = _apply(op, acc, v)
    return acc


# ---------------------------------------------------------------------------------------------
# mini-geo


def render_grid(cells: str) -> Image.Image:
    """Draw a GEO_GRID x GEO_GRID board; ``cells`` is a row-major string over {``.``, ``r``, ``b``}.

    Returns an RGB image of GEO_IMAGE_SIZE x GEO_IMAGE_SIZE pixels.
    """
    if len(cells) != GEO_GRID * GEO_GRID or set(cells) - {".", "r", "b"}:
        raise ValueError(f"render_grid: expected {GEO_GRID * GEO_GRID} cells over '.rb', got {cells!r}")
    img = Image.new("RGB", (GEO_IMAGE_SIZE, GEO_IMAGE_SIZE), GEO_BACKGROUND)
    draw = ImageDraw.Draw(img)
    for idx, c in enumerate(cells):
        if c == ".":
            continue
        row, col = divmod(idx, GEO_GRID)
        x0, y0 = col * GEO_CELL + GEO_MARGIN, row * GEO_CELL + GEO_MARGIN
        x1, y1 = (col + 1) * GEO_CELL - 1 - GEO_MARGIN, (row + 1) * GEO_CELL - 1 - GEO_MARGIN
        draw.rectangle((x0, y0, x1, y1), fill=GEO_COLOURS["red" if c == "r" else "blue"])
    return img


def _geo_problem(variant: str, rng: random.Random) -> _Problem:
    if variant not in VARIANTS["mini-geo"]:
        raise ValueError(f"mini-geo: unknown variant {variant!r}; valid: {VARIANTS['mini-geo']}")
    n_red = rng.randint(0, GEO_MAX_PER_COLOUR)
    n_blue = rng.randint(0, GEO_MAX_PER_COLOUR)
    slots = rng.sample(range(GEO_GRID * GEO_GRID), n_red + n_blue)
    grid = ["."] * (GEO_GRID * GEO_GRID)
    for s in slots[:n_red]:
        grid[s] = "r"
    for s in slots[n_red:]:
        grid[s] = "b"
    cells = "".join(grid)
    add = rng.randint(0, GEO_MAX_ADD)
    counts = {"red": n_red, "blue": n_blue}
    img = render_grid(cells)
    if variant == "default":
        colour = rng.choice(("red", "blue"))
        other = "blue" if colour == "red" else "red"
        k = counts[colour]
        answer = k + add
        problem = f"{IMAGE_PLACEHOLDER} how many {colour} squares are in the picture ? add {add} ."
        thinkings = (
            f"there are {k} {colour} squares . {k} + {add} = {answer} .",
            f"first count the {colour} squares to get {k} . then add {add} to {k} to get {answer} .",
            f"i see {k} {colour} squares and {counts[other]} {other} squares . "
            f"we need {colour} , so {k} + {add} = {answer} .",
            f"the picture has {k} {colour} squares , and {k} plus {add} is {answer} .",
            f"looking at the grid , {k} cells are {colour} ; with {add} extra that makes {answer} ;",
        )
        key = f"{cells}|{colour}|{add}"
    else:  # total: both colours, a held-out question type
        total = n_red + n_blue
        answer = total + add
        problem = f"{IMAGE_PLACEHOLDER} how many squares are in the picture ? add {add} ."
        thinkings = (
            f"there are {n_red} red squares and {n_blue} blue squares . {n_red} + {n_blue} = {total} . "
            f"{total} + {add} = {answer} .",
            f"first count all squares to get {total} . then add {add} to {total} to get {answer} .",
            f"i see {n_red} red and {n_blue} blue , so the total is {total} , and {total} plus {add} "
            f"is {answer} .",
            f"looking at the grid , {total} cells are filled ; with {add} extra that makes {answer} ;",
        )
        key = f"{cells}|all|{add}"
    routes = tuple(_wrap(t, answer) for t in thinkings)
    return _Problem(key=key, problem=problem, answer=answer, routes=routes, image=img)


# ---------------------------------------------------------------------------------------------
# mini-box


def format_box(box: Box) -> str:
    """``(x1, y1, x2, y2)`` -> ``"[ x1 , y1 , x2 , y2 ]"`` (spaced: every piece is one mini token)."""
    return "[ " + " , ".join(str(v) for v in box) + " ]"


def render_boxes(boxes: list[tuple[Box, str]]) -> Image.Image:
    """Draw filled rectangles ``[(box, colour name), ...]`` in order on a white picture.

    Each box covers pixels x1 <= x < x2, y1 <= y < y2. Returns an RGB image of
    BOX_IMAGE_SIZE x BOX_IMAGE_SIZE pixels.
    """
    img = Image.new("RGB", (BOX_IMAGE_SIZE, BOX_IMAGE_SIZE), GEO_BACKGROUND)
    draw = ImageDraw.Draw(img)
    for (x1, y1, x2, y2), colour in boxes:
        if not (0 <= x1 < x2 <= BOX_IMAGE_SIZE and 0 <= y1 < y2 <= BOX_IMAGE_SIZE):
            raise ValueError(f"render_boxes: box {(x1, y1, x2, y2)} is empty or outside the picture")
        draw.rectangle((x1, y1, x2 - 1, y2 - 1), fill=BOX_COLOURS[colour])  # PIL's corners are inclusive
    return img


def _random_box(sizes: tuple[int, ...], rng: random.Random) -> Box:
    """A rectangle with width and height from ``sizes`` and corners on the BOX_STEP lattice."""
    w, h = rng.choice(sizes), rng.choice(sizes)
    x1 = BOX_STEP * rng.randint(0, (BOX_IMAGE_SIZE - w) // BOX_STEP)
    y1 = BOX_STEP * rng.randint(0, (BOX_IMAGE_SIZE - h) // BOX_STEP)
    return (x1, y1, x1 + w, y1 + h)


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _box_routes(colour: str, box: Box, other: str | None) -> tuple[str, ...]:
    """Worked solutions for "where is the ``colour`` rectangle": edges, corners, size arithmetic,
    spans, a scan of the picture. Each ends with the boxed box; all stay short (<= 40 tokens)."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    answer = format_box(box)
    seen = f"there is a {colour} rectangle and a {other} rectangle ; we need {colour} :" if other \
        else f"there is a {colour} rectangle :"
    thinkings = (
        f"its left edge is at x {x1} and its right edge at x {x2} ; "
        f"its top edge is at y {y1} and its bottom edge at y {y2} .",
        f"the {colour} rectangle has its top left corner at {x1} , {y1} and its bottom right corner at {x2} , {y2} .",
        f"left {x1} , width {w} , so {x1} + {w} = {x2} ; top {y1} , height {h} , so {y1} + {h} = {y2} .",
        f"looking at the picture , the {colour} object spans columns {x1} to {x2} and rows {y1} to {y2} .",
        f"{seen} it starts at {x1} , {y1} and ends at {x2} , {y2} .",
    )
    return tuple(_wrap(t, answer) for t in thinkings)


_BOX_QUESTIONS = (
    "where is the {c} rectangle in the picture ?",
    "find the {c} rectangle .",
    "give the coordinates of the {c} rectangle .",
)


def _box_problem(variant: str, rng: random.Random) -> _Problem:
    """One picture, one question about the target colour's rectangle; answer = its box string."""
    if variant not in VARIANTS["mini-box"]:
        raise ValueError(f"mini-box: unknown variant {variant!r}; valid: {VARIANTS['mini-box']}")
    colour = "green" if variant == "green" else rng.choice(BOX_TRAIN_COLOURS)
    target = _random_box(BOX_SMALL_SIZES if variant == "small" else BOX_SIZES, rng)
    other: str | None = None
    distractor: Box | None = None
    if rng.random() < BOX_DISTRACTOR_PROB:
        other = rng.choice([c for c in BOX_TRAIN_COLOURS if c != colour])
        for _ in range(BOX_PLACEMENT_TRIES):
            cand = _random_box(BOX_DISTRACTOR_SIZES, rng)
            if not _overlap(cand, target):
                distractor = cand
                break
        if distractor is None:  # no room beside a large target: draw it alone
            other = None
    shapes = [(target, colour)] + ([(distractor, other)] if distractor and other else [])
    question = rng.choice(_BOX_QUESTIONS).format(c=colour)
    drawn = ",".join(map(str, distractor)) if distractor else "-"
    key = f"{colour}:{','.join(map(str, target))}|{other or '-'}:{drawn}"
    return _Problem(key=key, problem=f"{IMAGE_PLACEHOLDER} {question}", answer=format_box(target),
                    routes=_box_routes(colour, target, other), image=render_boxes(shapes))


# ---------------------------------------------------------------------------------------------
# public entry point

_MAKERS: dict[str, Callable[[str, random.Random], _Problem]] = {
    "mini-math": _math_problem,
    "mini-geo": _geo_problem,
    "mini-box": _box_problem,
}


def generate_task(name: str, *, split: str, num: int, seed: int, variant: str = "default") -> list[Record]:
    """Generate ``num`` distinct problems of task ``name`` from ``split``.

    Deterministic in (name, split, num, seed, variant); a larger ``num`` extends a smaller one's
    list (same seed) rather than reshuffling it. ``Record.answer`` is the integer answer
    as a string (mini-box: the box ``"[ x1 , y1 , x2 , y2 ]"`` that ``grounding_iou`` grades);
    ``Record.meta`` holds ``solution`` (one worked solution, the SFT target, chosen
    by the seed), ``routes`` (all worked solutions), ``variant`` and ``split``. mini-geo and
    mini-box records have one PIL image and one ``<image>`` placeholder in ``problem``.

    Raises ValueError for an unknown task/split/variant, ``num < 0``, or a ``num`` larger than
    the split can supply without repeating a problem.
    """
    if name not in _MAKERS:
        raise ValueError(f"generate_task: unknown task {name!r}; valid: {TASKS}")
    if split not in SPLITS:
        raise ValueError(f"generate_task: unknown split {split!r} for {name}; valid: {SPLITS}")
    if variant == "ood":
        variant = OOD_ALIAS[name]
    if variant not in VARIANTS[name]:
        raise ValueError(
            f"generate_task: unknown variant {variant!r} for {name}; valid: {VARIANTS[name]} or 'ood'"
        )
    if num < 0:
        raise ValueError(f"generate_task: num must be >= 0 for {name}/{split}, got {num}")
    rng = random.Random(_stable_int("generate_task", name, split, variant, seed))
    make = _MAKERS[name]
    records: list[Record] = []
    seen: set[str] = set()
    misses = 0  # consecutive rejections
    while len(records) < num:
        p = make(variant, rng)
        if p.key in seen or split_of(name, variant, p.key) != split:
            misses += 1
            if misses > MAX_CONSECUTIVE_MISSES:
                raise ValueError(
                    f"generate_task: {name}/{variant}/{split} ran out of distinct problems after "
                    f"{len(records)} (asked for {num})"
                )
            continue
        seen.add(p.key)
        misses = 0
        solution = p.routes[rng.randrange(len(p.routes))]
        records.append(
            Record(
                uid=f"{name}:{variant}:{p.key.replace(' ', '')}",
                problem=p.problem,
                answer=str(p.answer),
                source=name if variant == "default" else f"{name}:{variant}",
                images=[p.image] if p.image is not None else [],
                meta={"solution": solution, "routes": list(p.routes), "variant": variant, "split": split},
            )
        )
    return records


def generated_splits(data: Any) -> TaskSplits:
    """The generated tasks' entry of ``fastrl.tasks.TASKS``: ``data.num_train`` training and
    ``data.num_val`` validation problems of task ``data.task`` (variant ``data.variant``), and
    ``data.num_val`` validation problems of each ``data.ood_variants`` variant."""
    def generated(split: str, num: int, variant: str) -> Split:
        records = generate_task(data.task, split=split, num=num, seed=data.seed, variant=variant)
        label = f"{data.task} {split}" if variant == data.variant else f"{data.task}:{variant} {split}"
        return Split(records, [(label, i) for i in range(len(records))])

    return TaskSplits(train=generated("train", data.num_train, data.variant),
                      val=generated("val", data.num_val, data.variant),
                      ood={v: generated("val", data.num_val, v) for v in data.ood_variants})
