"""Policy-gradient losses, KL estimators and loss aggregation (docs/algorithms.md, "Policy loss").

All functions take per-token tensors of shape [B, T] (B responses, T padded response length)
with a response ``mask`` [B, T] (1 = real token, 0 = padding) and return differentiable scalars
or per-token tensors. The formulas follow verl's ``core_algos`` (the code the paper's baselines
ran on):

* ratio = exp(clamp(logp - logp_old, -20, 20)).
* PPO-clip with decoupled eps_low / eps_high and the optional dual clip c (applied only where
  A < 0): loss = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)), then for A < 0
  min(that, -A c).
* GSPO: sequence ratio s_i = exp(mean_t(logp - logp_old)) (mean over the response mask),
  clipped with eps_low / eps_high; the per-sequence loss is broadcast to the sequence's tokens
  so every aggregation mode applies (seq-mean-token-mean gives exactly mean_i loss_i).
* GSPO-token: per-token ratio sg[s_i] * pi_t / sg[pi_t], whose value is s_i and whose gradient
  is s_i * grad log pi_t; it admits per-token advantages and equals GSPO's gradient when the
  advantage is per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fastrl.algorithms.loss_modes import AGG_MODES  # the one list, torch-free for fastrl.config
from fastrl.algorithms.registry import POLICY_LOSSES

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
POLICY_LOSS_KINDS: tuple[str, ...] = tuple(POLICY_LOSSES)  # the built-in names, from the registry
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl")

_LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: keeps the ratio finite when logp drifts far off
_K3_LOG_CLAMP = 20.0
_K3_VALUE_CLAMP = 10.0


def _check_pair(a: Tensor, b: Tensor, names: str, where: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{where}: {names} must have the same shape, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1; 0 when the mask is empty. [B, T] -> []."""
    m = mask.to(values.dtype)
    return (values * m).sum() / m.sum().clamp(min=1.0)


def aggregate(
    values: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    global_token_count: float | Tensor | None = None,
    global_seq_count: float | Tensor | None = None,
    norm_constant: float | None = None,
) -> Tensor:
    """Reduce a per-token loss [B, T] to a scalar.

    Modes (``m`` = mask, ``L_i`` = sum_t m_it, sums over masked tokens):

    * ``token-mean``: sum_it v_it / N_tok, with N_tok = ``global_token_count`` if given, else the
      local number of masked tokens. Passing the token count of the whole mini-batch (summed over
      data-parallel ranks) makes each rank return its share, and the shares summed over ranks
      equal the token-mean of the whole mini-batch. (A framework that *averages* gradients over
      W ranks needs the loss multiplied by W; that is the caller's business.)
    * ``seq-mean-token-mean``: sum_i (sum_t v_it / L_i) / N_seq.
    * ``seq-mean-token-sum``: sum_i (sum_t v_it) / N_seq.
      For both seq-mean modes N_seq = ``global_seq_count`` if given, else the number of local
      rows with at least one masked token (rows without tokens contribute nothing).
    * ``seq-mean-token-sum-norm`` (Dr.GRPO): sum_it v_it / C with the constant C =
      ``norm_constant`` (default T = ``mask.shape[-1]``, as verl). Use the generation length
      limit so that C stays constant through training.

    Args:
        values: [B, T] per-token values (differentiable).
        mask: [B, T] response mask, bool or 0/1.
        mode: one of ``AGG_MODES``.
        global_token_count / global_seq_count: optional denominators (see above), > 0.
        norm_constant: Dr.GRPO's constant, > 0.

    Returns:
        0-dim tensor.
    """
    where = "aggregate"
    _check_pair(values, mask, "values and mask", where)
    if values.dim() != 2:
        raise ValueError(f"{where}: values must be [B, T], got shape {tuple(values.shape)}")
    m = mask.to(values.dtype)
    if mode == "token-mean":
        denom = m.sum().clamp(min=1.0) if global_token_count is None else \
            _positive(global_token_count, "global_token_count", where)
        return (values * m).sum() / denom
    if mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        seq_sum = (values * m).sum(dim=-1)
        lengths = m.sum(dim=-1)
        per_seq = seq_sum / lengths.clamp(min=1.0) if mode == "seq-mean-token-mean" else seq_sum
        if global_seq_count is None:
            denom = (lengths > 0).to(values.dtype).sum().clamp(min=1.0)
        else:
            denom = _positive(global_seq_count, "global_seq_count", where)
        return per_seq.sum() / denom
    if mode == "seq-mean-token-sum-norm":
        c = float(mask.shape[-1]) if norm_constant is None else \
            _positive(norm_constant, "norm_constant", where)
        return (values * m).sum() / c
    raise ValueError(f"{where}: unknown mode {mode!r}; valid modes: {', '.join(AGG_MODES)}")


def _positive(x: float | Tensor, name: str, where: str) -> float | Tensor:
    v = float(x) if not isinstance(x, Tensor) else float(x.detach())
    if not v > 0:
        raise ValueError(f"{where}: {name} = {v} must be > 0")
    return x


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL estimate between the policy and the reference. [B, T], [B, T] -> [B, T].

    * ``k1``: logp - ref_logp.
    * ``k2``: 0.5 (logp - ref_logp)^2.
    * ``k3`` / ``low_var_kl``: kl = clamp(ref_logp - logp, -20, 20); clamp(exp(kl) - kl - 1, -10, 10)
      (Schulman's unbiased low-variance estimator with verl's clamps).
    """
    where = "kl_penalty"
    _check_pair(logp, ref_logp, "logp and ref_logp", where)
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp).square()
    if kind in ("k3", "low_var_kl"):
        kl = torch.clamp(ref_logp - logp, min=-_K3_LOG_CLAMP, max=_K3_LOG_CLAMP)
        kld = torch.exp(kl) - kl - 1.0
        return torch.clamp(kld, min=-_K3_VALUE_CLAMP, max=_K3_VALUE_CLAMP)
    raise ValueError(f"{where}: unknown kind {kind!r}; valid kinds: {', '.join(KL_KINDS)}")


def _token_advantages(advantages: Tensor, shape: torch.Size, where: str) -> Tensor:
    if advantages.dim() == 1 and advantages.shape[0] == shape[0]:
        return advantages[:, None].expand(shape)
    if advantages.shape == shape:
        return advantages
    raise ValueError(f"{where}: advantages must be [B] or [B, T] = {tuple(shape)}, got "
                     f"{tuple(advantages.shape)}")


def _sequence_advantages(advantages: Tensor, mask: Tensor, where: str) -> Tensor:
    """[B] advantages for GSPO; [B, T] is accepted only if constant over each row's mask."""
    if advantages.dim() == 1:
        return advantages
    m = mask.to(torch.bool)
    lengths = m.sum(dim=-1).clamp(min=1)
    seq = (advantages * m).sum(dim=-1) / lengths
    dev = ((advantages - seq[:, None]).abs() * m).amax(dim=-1) if advantages.numel() else seq
    bad = dev > 1e-6 * (1.0 + seq.abs())
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"{where}: kind='gspo' needs one advantage per sequence, but row {i} of the "
                         f"[B, T] advantages varies over its tokens; use kind='gspo_token'")
    return seq


def _check_loss_inputs(logp: Tensor, old_logp: Tensor, mask: Tensor, settings: ClipSettings, where: str) -> None:
    clip_low, clip_high, dual_clip = settings.clip_low, settings.clip_high, settings.dual_clip
    _check_pair(logp, old_logp, "logp and old_logp", where)
    _check_pair(logp, mask, "logp and mask", where)
    if logp.dim() != 2:
        raise ValueError(f"{where}: logp must be [B, T], got shape {tuple(logp.shape)}")
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(f"{where}: need 0 <= clip_low < 1 and clip_high >= 0, got "
                         f"clip_low={clip_low}, clip_high={clip_high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"{where}: dual_clip = {dual_clip} must be > 1")


def _sequence_log_ratio(log_diff: Tensor, mask: Tensor) -> Tensor:
    """GSPO's log s_i = mean_t(logp - logp_old) over the response mask, clamped. [B, T] -> [B]."""
    m = mask.to(log_diff.dtype)
    lengths = m.sum(dim=-1).clamp(min=1.0)
    return torch.clamp((log_diff * m).sum(dim=-1) / lengths, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)


def _clipped_loss(
    ratio: Tensor, adv: Tensor, log_diff: Tensor, mask: Tensor, settings: ClipSettings,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped surrogate of every policy loss, given its per-token ``ratio`` and ``adv`` [B, T]:
    max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)), with the dual clip min(., -A c) where A < 0,
    aggregated by ``agg``; plus the detached metrics (see :func:`ppo_clip_loss`)."""
    dual_clip = settings.dual_clip
    loss1 = -adv * ratio
    loss2 = -adv * torch.clamp(ratio, 1.0 - settings.clip_low, 1.0 + settings.clip_high)
    clipped = torch.maximum(loss1, loss2)
    clip_active = loss2 > loss1
    lower_active = torch.zeros_like(clip_active)
    per_token = clipped
    if dual_clip is not None:
        loss3 = -adv * dual_clip
        lower_active = (clipped > loss3) & (adv < 0)
        per_token = torch.where(adv < 0, torch.minimum(loss3, clipped), clipped)
    loss = aggregate(per_token, mask, settings.agg, global_token_count=settings.global_token_count,
                     global_seq_count=settings.global_seq_count, norm_constant=settings.norm_constant)
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        mb = mask.to(torch.bool)
        r = ratio.detach()
        any_tok = bool(mb.any())
        metrics = {
            "clipfrac": masked_mean(clip_active.to(ratio.dtype), m).detach(),
            "clipfrac_lower": masked_mean(lower_active.to(ratio.dtype), m).detach(),
            "ppo_kl": masked_mean(-log_diff.detach(), m),
            "ratio_mean": masked_mean(r, m),
            "ratio_max": r[mb].max() if any_tok else r.new_zeros(()),
            "ratio_min": r[mb].min() if any_tok else r.new_zeros(()),
        }
    return loss, metrics


@dataclass(frozen=True)
class ClipSettings:
    """What every registered policy loss takes besides its tensors (one object, so a plug-in loss
    has the same typed interface as the built-in ones).

    clip_low / clip_high: eps_low / eps_high, the ratio is clipped to [1 - eps_low, 1 + eps_high].
    dual_clip: c > 1 for PPO's dual clip (only where A < 0), or None.
    agg: aggregation mode, see :func:`aggregate` (with the optional global denominators).
    norm_constant: Dr.GRPO's constant C of ``agg = seq-mean-token-sum-norm`` (see :func:`aggregate`).
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    agg: str = "token-mean"
    global_token_count: float | Tensor | None = None
    global_seq_count: float | Tensor | None = None
    norm_constant: float | None = None


def ppo_clip_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, settings: ClipSettings = ClipSettings(),
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO-clip with per-token ratio exp(clamp(logp - logp_old, -20, 20)) (GRPO, DAPO).

    Args:
        logp: [B, T] log-probs of the response tokens under the current policy (with grad).
        old_logp: [B, T] log-probs under the rollout (old) policy; treated as constants.
        advantages: [B] per sequence or [B, T] per token.
        mask: [B, T] response mask.
        settings: clip range, dual clip, aggregation and its denominators (:class:`ClipSettings`).

    Returns:
        ``(loss, metrics)``: 0-dim loss; metrics are detached 0-dim tensors, masked token means
        over this batch: ``clipfrac`` (tokens whose clipped branch is active), ``clipfrac_lower``
        (dual clip active; 0 without dual clip), ``ppo_kl`` (mean of logp_old - logp),
        ``ratio_mean``, ``ratio_max``, ``ratio_min`` (the importance ratio used, per token).
    """
    where = "ppo_clip_loss"
    _check_loss_inputs(logp, old_logp, mask, settings, where)
    log_diff = logp - old_logp.detach()
    adv = _token_advantages(advantages, logp.shape, where).detach()
    ratio = torch.exp(torch.clamp(log_diff, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    return _clipped_loss(ratio, adv, log_diff, mask, settings)


def _no_dual_clip(dual_clip: float | None, where: str) -> None:
    if dual_clip is not None:
        raise ValueError(f"{where}: dual_clip={dual_clip} applies only to the ppo_clip loss; set it to None")


def gspo_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, settings: ClipSettings = ClipSettings(),
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: the sequence ratio s_i = exp(mean_t(logp - logp_old)) broadcast to the sequence's
    tokens; advantages one per sequence ([B], or [B, T] constant over each row). Arguments and
    metrics as :func:`ppo_clip_loss` (no dual clip)."""
    where = "gspo_loss"
    _check_loss_inputs(logp, old_logp, mask, settings, where)
    _no_dual_clip(settings.dual_clip, where)
    log_diff = logp - old_logp.detach()
    adv = _sequence_advantages(advantages.detach(), mask, where)[:, None].expand(logp.shape)
    ratio = torch.exp(_sequence_log_ratio(log_diff, mask))[:, None].expand(logp.shape)
    return _clipped_loss(ratio, adv, log_diff, mask, settings)


def gspo_token_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, settings: ClipSettings = ClipSettings(),
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO-token: per-token ratio sg[s_i] * pi_t / sg[pi_t] (value s_i, gradient s_i * grad log pi_t);
    admits per-token advantages. Arguments and metrics as :func:`ppo_clip_loss` (no dual clip)."""
    where = "gspo_token_loss"
    _check_loss_inputs(logp, old_logp, mask, settings, where)
    _no_dual_clip(settings.dual_clip, where)
    log_diff = logp - old_logp.detach()
    adv = _token_advantages(advantages, logp.shape, where).detach()
    ratio = torch.exp(logp - logp.detach() + _sequence_log_ratio(log_diff, mask).detach()[:, None])
    return _clipped_loss(ratio, adv, log_diff, mask, settings)


def policy_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, kind: str = "ppo_clip", **settings: object,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The registered policy loss ``kind`` (``ppo_clip`` | ``gspo`` | ``gspo_token``, or a plug-in's)
    with ``settings`` as keywords (the fields of :class:`ClipSettings`): see :func:`ppo_clip_loss`."""
    if kind not in POLICY_LOSSES:
        raise ValueError(f"policy_loss: unknown kind {kind!r}; valid kinds: {', '.join(POLICY_LOSSES)}")
    return POLICY_LOSSES[kind](logp, old_logp, advantages, mask, ClipSettings(**settings))  # type: ignore[arg-type]
