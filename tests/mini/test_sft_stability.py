"""The warm start's accuracy is a property of its recipe, not of one machine's rounding (smoke size).

The smoke recipe is the visual slots' recipe in small: train until held-out greedy accuracy reaches
a target, then anneal the lr to 0 over more steps and keep the last step. It is built five more times
under stand-ins for another machine's floating point: initial weights scaled by 1 + 1e-6 N(0, 1)
(three seeds), two torch threads, float64 loss accumulation. The perturbed copies' weights differ
from the base build (so the perturbation is real), the base sits between floor and ceiling (so
agreement is not forced by either), and every copy's greedy accuracy on all 324 distinct validation
problems lies within +-3 points of the band's centre (max - min <= 6 points): the criterion of
docs/results.md "Warm starts".
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

pytestmark = pytest.mark.slow  # six SFT builds of up to 1,500 steps: about 40 s each on one core

# Measured Dec 4 on this size (mini-math, 1-layer qwen2, lr 3e-3 cosine, batch 16): held-out greedy
# accuracy reaches a plateau near 0.5 by ~900 steps. Greedy accuracy on the 324 val problems, base
# and three 1e-6 copies: 50.0 / 52.2, 49.7, 51.9 at the last of 1,500 steps (range 2.5 points);
# 48.1 / 45.0 with the earlier stop-on-no-gain selection (one copy); 46.9 / 43.2, 44.4, 40.7
# stopping at the first held-out reading >= 0.45 (range 6.2). A plateau's end point is stable; a
# stop at a crossing is not. 128 problems were too few: the same copies differ there by 4.7 points.
# Dec 6, the recipe below (first held-out check >= 0.45, then 500 annealed steps; slots.yaml's visual
# mini recipe in small): 47.5 / 51.5, 50.6, 48.5 (range 4.0; the target was reached at step 700-800),
# float64 loss 47.5. Without the anneal it is the crossing stop above (range 6.2).
RECIPE = dict(seed=0, steps=1500, lr=3e-3, batch_size=16, num_train=256, eval_settings=EvalSettings(num_prompts=0),
              selection=SelectionSettings(every=100, num_prompts=256, target=0.45, anneal_steps=500))
COPIES = {
    "base": dict(),
    **{f"init_1e-6_seed{k}": dict(perturbation=Perturbation(init_scale=1e-6, seed=k)) for k in (1, 2, 3)},
    "threads_2": dict(num_threads=2),
    "loss_float64": dict(perturbation=Perturbation(loss_float64=True)),
}
VAL_PROBLEMS = 324  # every distinct mini-math val problem


def _greedy_val_accuracy(path: Path, num: int = VAL_PROBLEMS) -> float:
    kit = load_policy_kit(PolicySpec(path=path, hf=HFEngineConfig(batch_size=128), reward="math",
                                     template="fastrl_math"), torch.device("cpu"))
    records = generate_task("mini-math", split="val", num=num, seed=1234)
    out = kit.engine.generate([kit.encode(r) for r in records], 1, SamplingConfig(temperature=0.0, max_new_tokens=48))
    scores, _ = kit.score([r.text for r in out], [records[r.prompt_index] for r in out])
    return float(np.mean([s["accuracy"] for s in scores]))


def test_perturbed_copies_agree_within_3_points(tmp_path: Path) -> None:
    paths = {name: warm_start("mini-math", TEXT_SPEC, out_root=tmp_path / name, **RECIPE, **extra)  # type: ignore[arg-type]
             for name, extra in COPIES.items()}
    weights = {name: load_file(str(p / "model.safetensors")) for name, p in paths.items()}
    # The 1e-6 initial-weight perturbation always changes the floats; two threads and float64
    # accumulation may not at this size (measured at mini too: bit-identical on this machine).
    for seed in (1, 2, 3):
        copy = weights[f"init_1e-6_seed{seed}"]
        assert any(not torch.equal(copy[k], weights["base"][k]) for k in weights["base"])
    acc = {name: _greedy_val_accuracy(p) for name, p in paths.items()}
    assert 0.2 <= acc["base"] <= 0.9, acc
    assert max(acc.values()) - min(acc.values()) <= 0.06 + 1e-9, acc  # all within +-3 points of the centre
