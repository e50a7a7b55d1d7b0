"""The rollout-engine registry: engine name -> factory, like the component registries
(``fastrl.algorithms.registry``).

A factory is called as ``factory(spec, model, processor)`` with the policy kit's
:class:`fastrl.policy.PolicySpec`, the loaded HF model (the trainer's own module in training) and
its tokenizer or processor, and returns a :class:`fastrl.rollout.base.RolloutEngine`. It reads its
own section of the spec (``spec.hf``, ``spec.vllm``: ``rollout.hf.*`` / ``rollout.vllm.*`` of a run
config) and nothing else engine-specific exists outside it.

This module imports no torch (``fastrl.config`` validates ``rollout.engine`` against it); the
built-in entries are ``"module:attribute"`` strings imported on first use. A plug-in engine::

    from fastrl.algorithms.registry import register
    from fastrl.rollout.registry import ROLLOUT_ENGINES

    @register(ROLLOUT_ENGINES, "my_engine")
    def my_engine(spec, model, processor): ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastrl.algorithms.registry import Entry, Registry, get

if TYPE_CHECKING:
    import torch

    from fastrl.policy import PolicySpec
    from fastrl.rollout.base import RolloutEngine

ROLLOUT_ENGINES = Registry("rollout engine", {
    "hf": Entry("fastrl.rollout.hf:build_hf_engine"),
    "vllm": Entry("fastrl.rollout.vllm:build_vllm_engine"),
})


def build_engine(spec: PolicySpec, model: torch.nn.Module, processor: Any) -> RolloutEngine:
    """The engine ``spec.engine`` names, built by its registered factory."""
    return get(ROLLOUT_ENGINES, spec.engine)(spec, model, processor)
