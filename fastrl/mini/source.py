"""``model.source = tiny``: the tiny model of ``model.kind`` / ``model.tiny`` and its SFT warm start.

The run's policy then is this cached directory, built and trained here: :func:`tiny_policy_dir`
is the ``tiny`` entry of ``fastrl.sources.MODEL_SOURCES`` (``fastrl.training.setup`` looks the
source up by name and lets rank 0 call it; the other ranks wait for it).
"""

from __future__ import annotations

from pathlib import Path

import torch

from fastrl.config import FastRLConfig, TinyModelConfig
from fastrl.mini.builders import TinyModelSpec
from fastrl.mini.sft import SelectionSettings, VariantMix, default_cache_root, warm_start
from fastrl.mini.tasks import VARIANTS
from fastrl.models.device import resolve_device


def tiny_policy_dir(tiny: TinyModelConfig, cfg: FastRLConfig, device: torch.device | None = None) -> Path:
    """The cached SFT warm start of ``cfg``'s tiny model (``tiny``: its ``model.tiny`` section) on
    its generated task, trained on ``device`` (None: ``model.device`` resolved) the first time it is
    asked for."""
    device = device or resolve_device(cfg.model.device)
    if tiny.sft_mix_variant and tiny.sft_mix_variant not in VARIANTS[cfg.data.task]:
        raise ValueError(f"model.tiny.sft_mix_variant = {tiny.sft_mix_variant!r} is not a variant of data.task = "
                         f"{cfg.data.task}; valid: {', '.join(VARIANTS[cfg.data.task])}")
    return warm_start(
        cfg.data.task, TinyModelSpec.from_model_config(cfg.model), out_root=default_cache_root(), seed=cfg.data.seed,
        steps=tiny.sft_steps, lr=tiny.sft_lr, batch_size=tiny.sft_batch_size, num_train=tiny.sft_num_train,
        template=cfg.data.template,
        answer_noise=tiny.sft_answer_noise, device=device, compute_dtype=cfg.model.dtype,
        selection=SelectionSettings(every=tiny.sft_select_every, num_prompts=tiny.sft_select_prompts,
                                    patience=tiny.sft_patience, min_steps=tiny.sft_min_steps,
                                    target=tiny.sft_target_accuracy, anneal_steps=tiny.sft_anneal_steps),
        mix=VariantMix(variant=tiny.sft_mix_variant, fraction=tiny.sft_mix_fraction),
    )
