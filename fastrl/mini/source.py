"""``model.source = tiny``: the tiny model of ``model.kind`` / ``model.tiny`` and its SFT warm start.

The run's policy then is this cached directory, built and trained here (``fastrl.training.setup``
only chooses the source and lets rank 0 call :func:`tiny_policy_dir`; the other ranks wait for it).
"""

from __future__ import annotations

from pathlib import Path

import torch

from fastrl.config import FastRLConfig
from fastrl.mini.builders import TinyModelSpec
from fastrl.mini.sft import SelectionSettings, default_cache_root, warm_start


def tiny_policy_dir(cfg: FastRLConfig, device: torch.device) -> Path:
    """The cached SFT warm start of ``cfg``'s tiny model on its generated task, trained on ``device``
    the first time it is asked for."""
    tiny = cfg.model.tiny
    return warm_start(
        cfg.data.task, TinyModelSpec.from_model_config(cfg.model), out_root=default_cache_root(), seed=cfg.data.seed,
        steps=tiny.sft_steps, lr=tiny.sft_lr, batch_size=tiny.sft_batch_size, template=cfg.data.template,
        answer_noise=tiny.sft_answer_noise, device=device, compute_dtype=cfg.model.dtype,
        selection=SelectionSettings(every=tiny.sft_select_every, num_prompts=tiny.sft_select_prompts,
                                    patience=tiny.sft_patience, min_steps=tiny.sft_min_steps),
    )
