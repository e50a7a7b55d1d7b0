"""The rollout-engine registry: engine name -> factory, like the component registries
(``fastrl.algorithms.registry``).

A factory is called as ``factory(spec, context)`` with the policy kit's
:class:`fastrl.policy.PolicySpec` and a :class:`fastrl.rollout.base.EngineContext` (the loaded HF
model, the trainer's own module in training; its text tokenizer; the pad id; the stop tokens), and
returns a :class:`fastrl.rollout.base.RolloutEngine`. An engine registered with a config section
(``rollout.<section>``, a dataclass that owns its defaults and ``check()``) is called
``factory(section, spec, context)`` with that one typed instance (``spec.section(name)``: the run
config's ``rollout.<section>``, or ``fastrl eval``'s flags); nothing engine-specific exists
outside it.

This module imports no torch and nothing of fastrl but the registry machinery and the built-in
sections (``fastrl.config`` builds ``rollout``'s schema from it): the built-in entries are
``"module:attribute"`` strings imported on first use. A plug-in engine with its own section::

    from fastrl.algorithms.registry import register
    from fastrl.engines import ROLLOUT_ENGINES

    @register(ROLLOUT_ENGINES, "my_engine", section="my_engine", config=MyEngineConfig)  # rollout.my_engine.*
    def my_engine(config, spec, context): ...
"""

from __future__ import annotations

from typing import Any

from fastrl.algorithms.registry import Entry, Registry, SectionGroup, get
from fastrl.sections import VLLM_SYNC_METHODS, HFEngineConfig, VLLMEngineConfig

__all__ = ["ENGINE_PACKAGES", "ROLLOUT", "ROLLOUT_ENGINES", "VLLM_SYNC_METHODS", "build_engine"]

ROLLOUT_ENGINES = Registry("rollout engine", {
    "hf": Entry("fastrl.rollout.hf:build_hf_engine", "hf", HFEngineConfig),
    "vllm": Entry("fastrl.rollout.vllm:build_vllm_engine", "vllm", VLLMEngineConfig),
})
# rollout's own keys (fastrl.config.RolloutConfig's fields): no engine section may take them.
ROLLOUT_KEYS: tuple[str, ...] = (
    "engine", "n", "temperature", "top_p", "top_k", "max_new_tokens", "val_temperature", "val_top_p", "val_n",
    "val_n_final", "logprob_check_tol", "logprob_check_mean_tol", "logprob_check_samples",
)
ROLLOUT = SectionGroup("rollout", ROLLOUT_KEYS, (ROLLOUT_ENGINES,))
# engine -> (the package it needs, how to install it): checked when a run or an evaluation starts
# (fastrl.config.check_engine_installed), not when a config is read, so a paper config stays
# readable on a CPU box. A plug-in engine may add its own.
ENGINE_PACKAGES: dict[str, tuple[str, str]] = {"vllm": ("vllm", "pip install vllm, on a CUDA machine")}


def build_engine(spec: Any, context: Any) -> Any:
    """The engine ``spec.engine`` names, built by its registered factory (a ``PolicySpec`` and an
    ``EngineContext`` in, a ``RolloutEngine`` out; untyped here so this module imports neither)."""
    entry = ROLLOUT_ENGINES.entry(spec.engine)
    factory = get(ROLLOUT_ENGINES, spec.engine)
    if entry.section is None:
        return factory(spec, context)
    return factory(spec.section(entry.section), spec, context)
