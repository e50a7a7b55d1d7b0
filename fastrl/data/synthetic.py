"""Generated mini tasks for the ``mini`` and ``smoke`` scales (DESIGN.md §1).

Two tasks mirror the paper's data and are graded by the paper's reward unchanged (accuracy via
mathruler's boxed-answer grading + 0.5 x format ``<thinking>...</thinking>`` then ``\\boxed{}``):

- ``mini-math`` (text): multi-step integer arithmetic, e.g. ``compute 7 + 12 - 5 .``
- ``mini-geo`` (vision): a small rendered grid of red and blue squares; the answer needs the
  picture (a count of squares of one colour) plus one arithmetic step given in the text.

Every record carries several worked solutions (``meta["routes"]``) that reach the answer by
different routes and in different words, and one of them as ``meta["solution"]`` (the SFT
target). Different routes give responses to the same question different token *sets*, the way
real reasoning traces differ; that is what MDAP's Jaccard distance needs to see (a solution
written in a handful of characters would make every pair of responses look alike).

Everything is deterministic from ``seed``. Train and validation are disjoint: a problem's split
is a hash of its content, not of the seed, so no seed can leak validation problems into
training. ``variant=`` selects held-out generators the policy never trains on (the
"out-of-domain" benchmarks): ``mini-math``: ``long`` (four operands), ``swap`` (``a - b + c``);
``mini-geo``: ``total`` (count both colours). ``variant="ood"`` is an alias of the task's primary
held-out variant (``OOD_ALIAS``).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Callable

from PIL import Image, ImageDraw

from fastrl.data.schema import IMAGE_PLACEHOLDER, Record

TASKS: tuple[str, ...] = ("mini-math", "mini-geo")
VARIANTS: dict[str, tuple[str, ...]] = {
    "mini-math": ("default", "long", "swap"),
    "mini-geo": ("default", "total"),
}
# ``variant="ood"`` names each task's primary held-out generator.
OOD_ALIAS: dict[str, str] = {"mini-math": "long", "mini-geo": "total"}
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


@dataclass(frozen=True)
class _Problem:
    """One generated problem before it becomes a Record (``key`` decides its split)."""

    key: str
    problem: str
    answer: int
    routes: tuple[str, ...]
    image: Image.Image | None = None


def _stable_int(*parts: object) -> int:
    """A process-independent 64-bit integer from ``parts`` (``hash()`` is salted per process)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def split_of(name: str, variant: str, key: str) -> str:
    """The split a problem belongs to, from its content alone (never from the seed)."""
    return "val" if _stable_int("split", name, variant, key) % VAL_BUCKETS == 0 else "train"


def _boxed(answer: int) -> str:
    return f"{BOXED_OPEN} {answer} {BOXED_CLOSE}"


def _wrap(thinking: str, answer: int) -> str:
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
# public entry point

_MAKERS: dict[str, Callable[[str, random.Random], _Problem]] = {
    "mini-math": _math_problem,
    "mini-geo": _geo_problem,
}


def generate_task(name: str, *, split: str, num: int, seed: int, variant: str = "default") -> list[Record]:
    """Generate ``num`` distinct problems of task ``name`` from ``split``.

    Deterministic in (name, split, num, seed, variant); a larger ``num`` extends a smaller one's
    list (same seed) rather than reshuffling it. ``Record.answer`` is the integer answer
    as a string; ``Record.meta`` holds ``solution`` (one worked solution, the SFT target, chosen
    by the seed), ``routes`` (all worked solutions), ``variant`` and ``split``. mini-geo records
    have one PIL image and one ``<image>`` placeholder in ``problem``.

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
