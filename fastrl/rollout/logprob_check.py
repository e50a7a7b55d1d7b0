"""The post-sync log-prob check, engine-neutral (pure torch).

After new weights reach an engine that holds its own copy (``shares_trainer_weights`` False, e.g.
vllm), the trainer samples a few responses with the engine and compares the engine's per-token
log-probs with its own forward on the same tokens (``PolicyBundle.check_engine_logprobs``): a
difference above ``rollout.logprob_check_tol`` means the engine is not running the trainer's
weights (a sync that silently failed) and stops the run.
"""

from __future__ import annotations

from typing import Sequence

import torch

from fastrl import metric_keys as K



def pad_ragged(rows: Sequence[Sequence[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad ragged per-token values into ``values`` [B, T] float32 and ``mask`` [B, T] bool."""
    width = max((len(r) for r in rows), default=0)
    values = torch.zeros(len(rows), width, dtype=torch.float32)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, row in enumerate(rows):
        values[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
        mask[i, : len(row)] = True
    return values, mask


def logprob_check(
    engine_logps: torch.Tensor,
    trainer_logps: torch.Tensor,
    masks: torch.Tensor,
    tol: float,
    *,
    mean_tol: float | None = None,
) -> dict[str, float]:
    """Compare the rollout engine's per-token log-probs with the trainer's after a weight sync.

    Args:
        engine_logps: [B, T] the engine's log-prob of each response token.
        trainer_logps: [B, T] the trainer's log-prob of the same tokens (same weights).
        masks: [B, T] bool/0-1, True on real response tokens.
        tol: largest allowed absolute difference on any token.
        mean_tol: optional bound on the mean absolute difference over masked tokens.

    Returns:
        ``{"rollout/logprob_diff_max": ..., "rollout/logprob_diff_mean": ...}``.

    Raises:
        ValueError: shapes differ, the mask selects no token, or a log-prob is not finite.
        RuntimeError: the difference exceeds ``tol`` (or ``mean_tol``): the engine is not running
            the trainer's weights, e.g. a weight sync that silently failed.
    """
    if engine_logps.shape != trainer_logps.shape or engine_logps.shape != masks.shape:
        raise ValueError(
            "logprob_check: shapes differ: engine_logps "
            f"{tuple(engine_logps.shape)}, trainer_logps {tuple(trainer_logps.shape)}, "
            f"masks {tuple(masks.shape)}"
        )
    # Compared on the CPU in float64: the three may come from different devices.
    mask = masks.detach().to("cpu", torch.bool)
    if not bool(mask.any()):
        raise ValueError("logprob_check: the mask selects no token; nothing to compare")
    eng = engine_logps.detach().to("cpu", torch.float64)[mask]
    trn = trainer_logps.detach().to("cpu", torch.float64)[mask]
    for label, vals in (("engine", eng), ("trainer", trn)):
        if not bool(torch.isfinite(vals).all()):
            bad = int((~torch.isfinite(vals)).sum())
            raise ValueError(f"logprob_check: {bad} non-finite {label} log-probs under the mask")
    diff = (eng - trn).abs()
    stats = {
        K.ROLLOUT_LOGPROB_DIFF_MAX: float(diff.max()),
        K.ROLLOUT_LOGPROB_DIFF_MEAN: float(diff.mean()),
    }
    if stats[K.ROLLOUT_LOGPROB_DIFF_MAX] > tol or (
        mean_tol is not None and stats[K.ROLLOUT_LOGPROB_DIFF_MEAN] > mean_tol
    ):
        worst = int(diff.argmax())
        raise RuntimeError(
            "rollout engine log-probs differ from the trainer's after the weight sync: "
            f"max |diff| {stats['rollout/logprob_diff_max']:.3e} (tol {tol:.1e}), "
            f"mean |diff| {stats['rollout/logprob_diff_mean']:.3e}"
            f"{'' if mean_tol is None else f' (mean_tol {mean_tol:.1e})'}, "
            f"over {diff.numel()} tokens; worst token: engine {float(eng[worst]):.4f} vs "
            f"trainer {float(trn[worst]):.4f}. The engine is not running the trainer's weights."
        )
    return stats
