"""SFT answer noise: only the boxed answer changes, by 1-3, and it is part of the cache key."""

from __future__ import annotations

import random

import pytest

from fastrl.mini.builders import TinyModelSpec
from fastrl.mini.sft import cache_key, noisy_route, sft_inputs, warm_start
from fastrl.mini.tasks import generate_task


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
