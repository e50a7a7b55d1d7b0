"""Names of the loss aggregation modes, kept free of torch so that ``fastrl.config`` can check
``algorithm.loss_agg`` against them without importing the loss code (see ``losses.aggregate``)."""

from __future__ import annotations

AGG_MODES: tuple[str, ...] = (
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
)
# The Dr.GRPO mode: sum of the masked per-token values over a constant C (``norm_constant``).
CONSTANT_NORM_MODE = "seq-mean-token-sum-norm"
