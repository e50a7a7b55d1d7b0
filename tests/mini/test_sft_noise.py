"""SFT answer noise: only the boxed answer changes (an integer by 1-3, a box by one edge one lattice
step), and it is part of the cache key."""

from __future__ import annotations

import random

import pytest

from fastrl.mini.builders import TinyModelSpec
from fastrl.mini.sft import cache_key, noisy_route, sft_inputs, warm_start
from fastrl.mini.tasks import BOX_IMAGE_SIZE, BOX_STEP, generate_task


def test_noisy_route_changes_only_the_box():
    rng = random.Random(0)
    for rec in generate_task("mini-math", split="train", num=40, seed=3):
        for text in rec.meta["routes"]:
            noisy = noisy_route(text, rng)
            head, _, box = text.rpartition("\\boxed{")
            nhead, _, nbox = noisy.rpartition("\\boxed{")
            assert head == nhead
            right, wrong = int(box.strip(" }")), int(nbox.strip(" }"))
            assert 1 <= abs(right - wrong) <= 3 and 0 <= wrong <= 99


def _box(text: str) -> list[int]:
    head, _, box = text.rpartition("\\boxed{")
    return [int(v) for v in box.strip(" }[]").split(" , ")]


def test_noisy_box_moves_one_edge_one_step_and_stays_a_box():
    rng = random.Random(0)
    moved_edges = set()
    for rec in generate_task("mini-box", split="train", num=60, seed=3):
        for text in rec.meta["routes"]:
            noisy = noisy_route(text, rng)
            assert text.rpartition("\\boxed{")[0] == noisy.rpartition("\\boxed{")[0]
            right, wrong = _box(text), _box(noisy)
            diffs = [(i, w - r) for i, (r, w) in enumerate(zip(right, wrong)) if w != r]
            assert len(diffs) == 1 and abs(diffs[0][1]) == BOX_STEP
            moved_edges.add(diffs[0][0])
            x1, y1, x2, y2 = wrong
            assert 0 <= x1 < x2 <= BOX_IMAGE_SIZE and 0 <= y1 < y2 <= BOX_IMAGE_SIZE
    assert moved_edges == {0, 1, 2, 3}


def test_noise_names_what_it_cannot_shift():
    with pytest.raises(ValueError, match="boxed integer or box"):
        noisy_route("<thinking> x </thinking> \\boxed{ seven }", random.Random(0))


def test_noise_is_part_of_the_cache_key_and_zero_keeps_old_keys():
    kw = dict(seed=0, steps=10, lr=1e-3, batch_size=4, num_train=10, template="fastrl_math", warmup_frac=0.1,
              weight_decay=0.0)
    spec = TinyModelSpec()
    clean = sft_inputs("mini-math", spec, **kw)
    assert "answer_noise" not in clean
    assert cache_key(clean) != cache_key(sft_inputs("mini-math", spec, answer_noise=0.3, **kw))


def test_noise_out_of_range_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="answer_noise"):
        warm_start("mini-math", TinyModelSpec(), out_root=tmp_path, seed=0, steps=1, lr=1e-3, answer_noise=1.5)
