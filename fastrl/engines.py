"""The rollout-engine registry: engine name -> factory, like the component registries
(``fastrl.algorithms.registry``).

A factory is called as ``factory(spec, context)`` with the policy kit's
:class:`fastrl.policy.PolicySpec` and a :class:`fastrl.rollout.base.EngineContext` (the loaded HF
model, the trainer's own module in training; its text tokenizer; the pad id; the stop tokens), and
returns a :class:`fastrl.rollout.base.RolloutEngine`. It reads its own section of the spec
(``spec.hf``, ``spec.vllm``: ``rollout.hf.*`` / ``rollout.vllm.*`` of a run config); nothing
engine-specific exists outside it.

This module imports no torch and nothing of fastrl but the registry machinery (``fastrl.config``
validates ``rollout.engine`` against it; the engines import it for their own lists): the built-in
entries are ``"module:attribute"`` strings imported on first use. A plug-in engine::

    from fastrl.algorithms.registry import register
    from fastrl.engines import ROLLOUT_ENGINES

    @register(ROLLOUT_ENGINES, "my_engine")
    def my_engine(spec, context): ...
"""

from __future__ import annotations

from typing import Any

from fastrl.algorithms.registry import Entry, Registry, get

# The vLLM engine's weight-sync methods (fastrl.rollout.vllm explains each; rollout.vllm.sync_method).
VLLM_SYNC_METHODS: tuple[str, ...] = ("auto", "load_weights", "vllm_reload", "cpu_repack")

ROLLOUT_ENGINES = Registry("rollout engine", {
    "hf": Entry("fastrl.rollout.hf:build_hf_engine"),
    "vllm": Entry("fastrl.rollout.vllm:build_vllm_engine"),
})


def build_engine(spec: Any, context: Any) -> Any:
    """The engine ``spec.engine`` names, built by its registered factory (a ``PolicySpec`` and an
    ``EngineContext`` in, a ``RolloutEngine`` out; untyped here so this module imports neither)."""
    return get(ROLLOUT_ENGINES, spec.engine)(spec, context)
