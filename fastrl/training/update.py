"""Log-prob passes and the policy update over a kept set, split identically on any number of ranks.

Data-parallel layout. The kept set (already aligned by the pruner to a multiple of
``world_size * micro_batch_size``) is shuffled with a generator seeded identically on every rank,
split into mini-batches whose sizes are multiples of the world size, and each mini-batch is dealt
out ``members[rank::world]`` (:func:`rank_plan`: this rank's rows of the kept batch, which the
trainer selects into a batch of its own, and its shards as positions into them). Every rank
therefore does the same number of micro-batches and
backward calls, and the union over ranks of each mini-batch is the same as on one rank: a 2-rank
step sums to the 1-rank gradient. Loss normalisation uses global counts (all-reduced), so the
token-mean is over the whole mini-batch across ranks, not per micro-batch.

Columns. :func:`compute_logprobs` returns an [N, R] column of the batch (``old_logprobs`` /
``ref_logprobs``); a micro-batch's loss inputs are slices of the batch's padded columns.

Devices. :func:`compute_logprobs` returns its log-probs on the CPU (small, and what the ranks
all-gather); :func:`update_policy` moves every tensor the loss combines with the policy's
log-probs (old and reference log-probs, advantages, response mask) to the device of those
log-probs, i.e. of the model's logits, so a CUDA policy meets no CPU tensor in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from fastrl.algorithms import losses, registry
from fastrl.models.forward import collate, response_logprobs
from fastrl.training import distributed as dist
from fastrl import metric_keys as K
from fastrl.training.batch import RolloutBatch

if TYPE_CHECKING:
    from fastrl.config import AlgorithmConfig


@dataclass(frozen=True)
class LossSettings:
    kind: str
    clip_low: float
    clip_high: float
    dual_clip: float | None
    agg: str
    kl_coef: float
    kl_kind: str
    # Dr.GRPO's constant C of agg = seq-mean-token-sum-norm; None: losses.aggregate's default.
    norm_constant: float | None = None

    @classmethod
    def from_config(cls, algorithm: AlgorithmConfig) -> LossSettings:
        """The loss settings of an ``AlgorithmConfig`` (``cfg.algorithm``)."""
        a = algorithm
        return cls(a.policy_loss, a.clip_low, a.clip_high, a.dual_clip, a.loss_agg, a.kl_coef, a.kl_kind,
                   norm_constant=a.loss_norm_constant)


def minibatch_sizes(total: int, num_minibatches: int, world: int) -> list[int]:
    """Split ``total`` trajectories into at most ``num_minibatches`` sizes, each a multiple of ``world``.

    >>> minibatch_sizes(12, 4, 2)
    [4, 4, 2, 2]
    """
    if total % world:
        raise ValueError(f"kept count {total} is not a multiple of the world size {world}")
    units = total // world
    k = max(1, min(num_minibatches, units))
    base, extra = divmod(units, k)
    return [(base + (1 if i < extra else 0)) * world for i in range(k)]


def plan_minibatches(
    num_kept: int,
    *,
    mode: str,
    updates_per_step: int,
    mini_batch_size: int,
    world: int,
    generator: torch.Generator,
) -> list[list[int]]:
    """Global mini-batches (lists of positions into the kept batch), identical on every rank."""
    order = torch.randperm(num_kept, generator=generator).tolist()
    if mode == "fixed_updates":
        sizes = minibatch_sizes(num_kept, updates_per_step, world)
    elif mode == "fixed_minibatch":
        per = max(world, mini_batch_size - mini_batch_size % world)
        sizes = minibatch_sizes(num_kept, -(-num_kept // per), world)
    else:
        raise ValueError(f"trainer.update_mode = {mode!r}: use fixed_updates or fixed_minibatch")
    out, start = [], 0
    for s in sizes:
        out.append(order[start : start + s])
        start += s
    return out


def shard(members: Sequence[int], rank: int, world: int) -> list[int]:
    return list(members[rank::world])


def micro_batches(indices: Sequence[int], size: int) -> list[list[int]]:
    return [list(indices[i : i + size]) for i in range(0, len(indices), size)]


@dataclass(frozen=True)
class RankPlan:
    """This rank's part of the global mini-batch plan.

    ``rows``: its positions in the kept batch, ascending (the order of its log-prob passes: the
    caller selects them, ``kept.select(rows)``); ``minibatches``: per optimizer step, its shard
    ``members[rank::world]`` as positions into ``rows``, in shard order; ``global_sizes``: each
    mini-batch's trajectories over all ranks (the loss's sequence count)."""

    rows: list[int]
    minibatches: list[list[int]]
    global_sizes: list[int]


def rank_plan(minibatches: Sequence[Sequence[int]], rank: int, world: int) -> RankPlan:
    shards = [shard(members, rank, world) for members in minibatches]
    rows = sorted(i for s in shards for i in s)
    position = {row: j for j, row in enumerate(rows)}
    return RankPlan(rows, [[position[i] for i in s] for s in shards], [len(m) for m in minibatches])


def _batch_tensors(batch: RolloutBatch, rows: Sequence[int], pad_id: int) -> dict:
    """The collated forward inputs of ``rows`` (pixel values built for these rows only)."""
    return collate(batch.prompts.inputs(rows), batch.response_ids_of(rows), pad_id)


def forward_count(rows: int, micro_batch_size: int) -> int:
    """The forward passes :func:`compute_logprobs` makes for ``rows`` rows (one per micro-batch)."""
    return -(-rows // micro_batch_size)


@torch.no_grad()
def compute_logprobs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    *,
    micro_batch_size: int,
    pad_id: int,
    forwards: int = 0,
    filler: RolloutBatch | None = None,
) -> torch.Tensor:
    """Per-token log-probs of every response of ``batch``, in micro-batches of consecutive rows:
    a [N, R] float32 CPU column (0 off the response mask).

    ``forwards``: make at least this many forward passes. Under ZeRO-3 each forward all-gathers
    the partitioned weights (a collective), so the ranks of one pass must make the same number: a
    rank with fewer rows than another forwards ``filler``'s first row (default: its own first) in
    extra passes of their own and discards them. The real rows' micro-batches are unchanged."""
    was_training = model.training
    model.eval()
    out = torch.zeros((len(batch), batch.width), dtype=torch.float32)
    mbs = micro_batches(range(len(batch)), micro_batch_size)
    for mb in mbs:
        tensors = _batch_tensors(batch, mb, pad_id)
        logp = response_logprobs(model, tensors).float().cpu()  # one device->host copy per micro-batch
        on_response = tensors["response_mask"].bool()
        out[mb[0] : mb[-1] + 1, : logp.shape[1]] = torch.where(on_response, logp, 0.0)
    source = filler if filler is not None else batch
    for _ in range(forwards - len(mbs)):  # padding passes: same collectives, results dropped
        response_logprobs(model, _batch_tensors(source, [0], pad_id))
    model.train(was_training)
    return out


def _item(t: torch.Tensor | float) -> float:
    """A 0-dim tensor's (or a number's) value as a Python float: the one place the update reads
    a scalar back from the device."""
    return float(t.detach()) if isinstance(t, torch.Tensor) else float(t)


def loss_inputs(
    batch: RolloutBatch,
    mb: Sequence[int],
    tensors: dict,
    *,
    with_ref: bool,
    width: int,
    device: torch.device,
) -> dict[str, torch.Tensor | None]:
    """Old/ref log-probs [b, width], advantages [b] and response mask [b, width] of micro-batch
    ``mb``: slices of the batch's padded columns (no padding here), float32 on ``device`` (the
    device of the policy's log-probs)."""
    idx = torch.as_tensor(list(mb), dtype=torch.long)
    return {
        "old": batch.old_logprobs[idx, :width].to(device),
        "ref": batch.ref_logprobs[idx, :width].to(device) if with_ref else None,
        "adv": batch.advantages[idx].float().to(device),
        "mask": tensors["response_mask"].float().to(device),
    }


def _micro_batch_step(actor, batch: RolloutBatch, mb: Sequence[int], policy_loss_fn: Callable, settings: LossSettings,
                      denominators: dict, shares: torch.Tensor, *, with_ref: bool, pad_id: int,
                      check_finite: Callable[[torch.Tensor], None]) -> dict[str, float]:
    """Forward, loss and backward of micro-batch ``mb``; adds its (pg, kl, total) losses to
    ``shares`` and returns its metrics."""
    tensors = _batch_tensors(batch, mb, pad_id)
    logp, entropy = response_logprobs(actor.module, tensors, with_entropy=True)
    inputs = loss_inputs(batch, mb, tensors, with_ref=with_ref, width=logp.shape[1], device=logp.device)
    mask = inputs["mask"]
    clip = losses.ClipSettings(clip_low=settings.clip_low, clip_high=settings.clip_high, dual_clip=settings.dual_clip,
                               agg=settings.agg, **denominators)
    loss, pg_metrics = policy_loss_fn(logp, inputs["old"], inputs["adv"], mask, clip)
    metrics = {K.actor_key(k): _item(v) for k, v in pg_metrics.items()}
    shares[0] += _item(loss)
    if inputs["ref"] is not None:
        kl = losses.aggregate(losses.kl_penalty(logp, inputs["ref"], kind=settings.kl_kind), mask,
                              mode=settings.agg, **denominators)
        loss = loss + settings.kl_coef * kl
        shares[1] += _item(kl)
    shares[2] += _item(loss)
    check_finite(loss)
    actor.backward(loss)
    metrics[K.ACTOR_ENTROPY] = _item((entropy.detach() * mask).sum() / mask.sum().clamp_min(1))
    return metrics


def update_policy(
    actor,
    batch: RolloutBatch,
    plan: RankPlan,
    *,
    settings: LossSettings,
    micro_batch_size: int,
    pad_id: int,
    check_finite: Callable[[torch.Tensor, str], None],
) -> dict[str, float]:
    """One optimizer step per mini-batch of ``plan``; returns step-averaged metrics.

    ``batch`` holds this rank's rows (``plan.rows`` of the kept batch) with their old (and, for a
    KL term, reference) log-prob columns.

    ``actor/pg_loss``, ``actor/kl_loss`` and ``actor/loss`` are the mini-batch losses (the shares of
    all micro-batches on all ranks summed), averaged over the step's mini-batches; the other
    ``actor/*`` metrics are averages over this rank's micro-batches.
    """
    policy_loss_fn = registry.get(registry.POLICY_LOSSES, settings.kind)
    sums: dict[str, float] = {}  # per micro-batch metrics
    step_sums: dict[str, float] = {}  # per optimizer-step metrics (grad norm, lr, losses)
    count = 0
    use_ref = batch.ref_logprobs is not None and settings.kl_coef > 0
    for mb_index, (local, global_size) in enumerate(zip(plan.minibatches, plan.global_sizes)):
        lengths = batch.response_lengths[torch.as_tensor(local, dtype=torch.long)].to(torch.float64)
        global_tokens = float(dist.all_reduce_sum(lengths.sum()))
        # Global denominators: each micro-batch contributes its share of the mini-batch mean.
        # The Dr.GRPO mode divides by norm_constant instead: a set constant makes the shares add
        # up to the mini-batch loss; its default (each micro-batch's padded width) does not.
        denominators = {"global_token_count": global_tokens, "global_seq_count": float(global_size),
                        "norm_constant": settings.norm_constant}
        shares = torch.zeros(3, dtype=torch.float64)  # pg, kl, total: this rank's shares
        for mb in micro_batches(local, micro_batch_size):
            metrics = _micro_batch_step(actor, batch, mb, policy_loss_fn, settings, denominators, shares,
                                        with_ref=use_ref, pad_id=pad_id,
                                        check_finite=lambda loss: check_finite(loss, f"policy loss (mini-batch {mb_index})"))
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
        pg, kl, total = (float(x) for x in dist.all_reduce_sum(shares))
        step_metrics = {K.ACTOR_PG_LOSS: pg, K.ACTOR_KL_LOSS: kl, K.ACTOR_LOSS: total, **actor.step()}
        for k, v in step_metrics.items():
            step_sums[k] = step_sums.get(k, 0.0) + v
    out = {k: v / max(count, 1) for k, v in sums.items()}
    out.update({k: v / len(plan.minibatches) for k, v in step_sums.items()})
    out[K.ACTOR_OPTIMIZER_STEPS] = float(len(plan.minibatches))
    return out
