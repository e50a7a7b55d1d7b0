"""A method = five registered components (DESIGN.md §2), built here from the config.

The algorithm core (fastrl.algorithms) holds the pure rules; this module binds their
hyper-parameters from the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from fastrl.algorithms import registry
from fastrl.config import FastRLConfig


@dataclass
class Components:
    prompt_selector: Any
    # (target_groups) -> a fresh DynamicSamplingBuffer-like accumulator for one step
    new_group_buffer: Callable[[int], Any]
    pruner: Callable[..., torch.Tensor]
    rollout_scaler: Any
    advantage: Callable[..., torch.Tensor]


def build_components(cfg: FastRLConfig) -> Components:
    a = cfg.algorithm
    pruner_kwargs: dict[str, dict[str, Any]] = {
        "none": {},
        "mdap": {"tau": a.mdap.tau, "rule": a.mdap.rule},
        "cppo": {"prune_rate": a.cppo.prune_rate},
        "random": {"prune_rate": a.random.prune_rate},
        "advantage_only": {},
    }
    scaler_kwargs: dict[str, dict[str, Any]] = {
        "fixed": {"n": cfg.rollout.n},
        "ars": {"n_init": cfg.rollout.n, "rule": "release", "n_floor": a.ars.n_floor} if a.ars.rule == "release" else {
            "n_init": cfg.rollout.n, "rule": "retention", "n_min": a.ars.n_min, "n_max": a.ars.n_max,
            "beta": a.ars.beta, "headroom": a.ars.headroom, "rho_high": a.ars.rho_high,
            "grow_step": a.ars.grow_step, "per_prompt": a.ars.per_prompt,
        },
    }
    selector_kwargs: dict[str, dict[str, Any]] = {
        "all": {},
        "greso": {
            "p_easy": a.greso.p_easy, "p_hard": a.greso.p_hard, "alpha": a.greso.alpha,
            "step_size": a.greso.step_size, "p_min": a.greso.p_min, "p_max": a.greso.p_max,
            "floor": a.greso.floor,
        },
    }
    buffer_cls = registry.get(registry.GROUP_FILTERS, a.group_filter)
    return Components(
        prompt_selector=registry.get(registry.PROMPT_SELECTORS, a.prompt_selector)(**selector_kwargs[a.prompt_selector]),
        new_group_buffer=lambda target: buffer_cls(target, max_tries=a.dapo.max_tries),
        pruner=registry.build_pruner(a.pruner, **pruner_kwargs[a.pruner]),
        rollout_scaler=registry.get(registry.ROLLOUT_SCALERS, a.rollout_scaler)(**scaler_kwargs[a.rollout_scaler]),
        advantage=registry.get(registry.ADVANTAGE_ESTIMATORS, a.advantage),
    )
