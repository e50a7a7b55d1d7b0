"""The warm start's accuracy is a property of its recipe, not of one machine's rounding (smoke size).

The held-out-selection recipe (fastrl.mini.sft.SelectionSettings) is built three more times under
stand-ins for another machine's floating point: initial weights scaled by 1 + 1e-6 N(0, 1), two
torch threads, float64 loss accumulation. The perturbed copy's weights differ from the base build
(so the perturbation is real), the base sits between floor and ceiling (so agreement is not forced by
either), and every copy's greedy validation accuracy stays within 3 points of the base's: the
criterion of docs/results.md "Warm starts", measured at mini size by dev/sft_stability.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from fastrl.config import HFEngineConfig
from fastrl.mini.sft import EvalSettings, Perturbation, SelectionSettings, warm_start
from fastrl.mini.tasks import generate_task
from fastrl.policy import PolicySpec, load_policy_kit
from fastrl.rollout.base import SamplingConfig

from .conftest import TEXT_SPEC

pytestmark = pytest.mark.slow  # four SFT builds of ~1,000 steps: about a minute each on 2 cores

# Measured at this size (mini-math, 1-layer qwen2): held-out greedy accuracy climbs from 0 to a
# plateau near 0.55 by ~900 steps and stays there to 1,500 (lr 3e-3, cosine, batch 16).
RECIPE = dict(seed=0, steps=1000, lr=3e-3, batch_size=16, num_train=256, eval_settings=EvalSettings(num_prompts=0),
              selection=SelectionSettings(every=50, num_prompts=64, patience=3, min_steps=600))
COPIES = {
    "base": dict(),
    "init_1e-6": dict(perturbation=Perturbation(init_scale=1e-6, seed=1)),
    "threads_2": dict(num_threads=2),
    "loss_float64": dict(perturbation=Perturbation(loss_float64=True)),
}


def _greedy_val_accuracy(path: Path, num: int = 128) -> float:
    kit = load_policy_kit(PolicySpec(path=path, hf=HFEngineConfig(batch_size=128), reward="math",
                                     template="fastrl_math"), torch.device("cpu"))
    records = generate_task("mini-math", split="val", num=num, seed=1234)
    out = kit.engine.generate([kit.encode(r) for r in records], 1, SamplingConfig(temperature=0.0, max_new_tokens=48))
    scores, _ = kit.score([r.text for r in out], [records[r.prompt_index] for r in out])
    return float(np.mean([s["accuracy"] for s in scores]))


# Not strict: the outcome is the machine's floats. Measured Dec 2 (AVX-512): the 1e-6 copy scores 46.1 %
# vs the base's 50.0 % (3.9 points, 5 of 128 problems); the CI machine of Dec 3 passed it (strict: an
# XPASS failure). Only the band's AssertionError is expected; any other error still fails the suite.
@pytest.mark.xfail(strict=False, raises=AssertionError,
                   reason="open (issue 26): at smoke size a perturbed copy lands within 3 points on some machines "
                   "and not others; the held-out selection recipe meets the band at mini in-domain "
                   "(docs/results.md, Warm starts that reproduce) but not here on every machine yet")
def test_perturbed_copies_agree_within_3_points(tmp_path: Path) -> None:
    paths = {name: warm_start("mini-math", TEXT_SPEC, out_root=tmp_path / name, **RECIPE, **extra)  # type: ignore[arg-type]
             for name, extra in COPIES.items()}
    weights = {name: load_file(str(p / "model.safetensors")) for name, p in paths.items()}
    # The 1e-6 initial-weight perturbation always changes the floats; two threads and float64
    # accumulation may not at this size (measured at mini too: bit-identical on this machine).
    assert any(not torch.equal(weights["init_1e-6"][k], weights["base"][k]) for k in weights["base"])
    acc = {name: _greedy_val_accuracy(p) for name, p in paths.items()}
    assert 0.2 <= acc["base"] <= 0.9, acc
    deviation = {name: abs(a - acc["base"]) for name, a in acc.items()}
    assert max(deviation.values()) <= 0.03 + 1e-9, acc
