"""The one trainer: the step pipeline of docs/architecture.md, composed from registered components.

Every method (GRPO, DAPO, GSPO, CPPO, GRESO, FastRL and its variants) is this class with a
different choice of prompt selector, group filter, pruner, rollout scaler and policy loss.
Each stage is a short method timed under its stable name.

Data parallelism: every rank holds the same prompt stream and the same components (seeded
identically). Rank r generates for prompts ``r::world`` and scores its own responses; responses,
their rewards and engine log-probs are all-gathered, so advantages, pruning, ARS and GRESO are computed on the global batch and are
identical on every rank. Only the log-prob passes and the update are sharded (fastrl.training.update).
Stages pass columnar batches (fastrl.training.batch): old/ref log-probs are columns, selected with
their rows, never looked up through an index map.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Sequence

import numpy as np
import torch

from fastrl import metric_keys as K
from fastrl.algorithms.pruning import PruneResult
from fastrl.config import FastRLConfig, check_loggers_installed, to_dict
from fastrl.data.prompt_limit import PromptLimit, PromptTooLongError
from fastrl.data.schema import Record
from fastrl.models.inputs import PromptTokens
from fastrl.rollout.base import PromptInput, Response, SamplingConfig
from fastrl.training import distributed as dist
from fastrl.training.batch import PromptColumn, ResponseColumns, RolloutBatch
from fastrl.training.components import Components, build_components, prune_view
from fastrl.logs import progress_bar
from fastrl.training.errors import TrainingError
from fastrl.training.faults import fault_point
from fastrl.training.identity import write_identity
from fastrl.training.lock import RunDirError, RunLock
from fastrl.training.metrics import RunLogger, StageTimer, progress_postfix, step_line
from fastrl.training.run_dir import FINAL_DIR, Opening, open_with_lock, write_summary
from fastrl.training.setup import (PolicyBundle, build_policy, check_enough_prompts, limit_prompts,
                                   load_dataset_splits)
from fastrl.training.update import (LossSettings, compute_logprobs, forward_count, plan_minibatches, rank_plan,
                                   update_policy)

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    step: int = 0  # optimizer-independent count of finished rollout steps
    epoch: int = 0
    position: int = 0  # index into this epoch's prompt order
    reward_failing_steps: int = 0  # steps in a row whose reward failed too often (check_reward_failures)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class Trainer:
    """``Trainer(cfg).fit()`` trains one run in ``cfg.trainer.run_dir`` under the run-directory
    contract of fastrl.training.run_dir: the run dir is locked (rank 0) from here until ``close()``;
    a start that would change a run's identity fails here, before any model is built; a finished
    run builds nothing and ``fit()`` returns its summary. ``force_new`` moves an existing run aside."""

    def __init__(self, cfg: FastRLConfig, *, force_new: bool = False) -> None:
        self.cfg = cfg
        dist.init_distributed()
        if cfg.trainer.torch_threads > 0:
            torch.set_num_threads(cfg.trainer.torch_threads)
        seed_everything(cfg.trainer.seed)
        _check_world_fits(cfg, dist.world_size())
        # First: a bad hyper-parameter (checked by its component) fails before any model is built.
        self.components: Components = build_components(cfg)
        self.run_dir = Path(cfg.trainer.run_dir)
        self._lock = RunLock(self.run_dir)
        self.policy: PolicyBundle | None = None
        self.logger: RunLogger | None = None
        self._closed = False
        self.finished: dict[str, Any] | None = self._open_run_dir(force_new)
        if self.finished is not None:
            return
        try:
            check_loggers_installed(cfg.trainer.loggers)
            splits = load_dataset_splits(cfg)  # bad data fails here, before any model is built
            check_enough_prompts(cfg, len(splits.train.records))
            self.policy = build_policy(cfg)
            # Token ids and image references of every record, never pixel tensors (a float32
            # Qwen2.5-VL image is megabytes): those are built per batch (``materialize``).
            self._encoded: dict[str, PromptTokens] = {}
            self.prompt_limit = PromptLimit(cfg.data.max_prompt_length, cfg.data.prompt_length_policy)
            self.train_records, self.val_records, self.ood_records = limit_prompts(
                splits, within_limit=self._within_prompt_limit)
            check_enough_prompts(cfg, len(self.train_records), after=" within data.max_prompt_length")
            self.ood_formats = ood_formats(cfg, self.ood_records, own=splits.own_ood_formats)
            if dist.is_main():  # the run's identity, written once (model and data were built)
                write_identity(self.run_dir, cfg)
            dist.barrier()
        except BaseException:
            self.close()
            raise
        self.state = TrainState()
        self.logger = RunLogger(self.run_dir, loggers=cfg.trainer.loggers, enabled=dist.is_main(), config=to_dict(cfg))

    def _open_run_dir(self, force_new: bool) -> dict[str, Any] | None:
        """Rank 0 takes the lock and decides (fastrl.training.run_dir.open_run); every rank gets
        the outcome, so a refusal ends every rank with the same one-line error."""
        opening = Opening()
        if dist.is_main():
            try:
                opening = open_with_lock(self._lock, self.run_dir, self.cfg, force_new=force_new)
            except (ValueError, OSError) as exc:  # RunDirError, a damaged log, an unwritable dir
                opening = Opening(error=str(exc))
        opening = dist.broadcast_object(opening)
        if opening.error is not None or opening.finished is not None:
            self._lock.release()
        if opening.error is not None:
            raise RunDirError(opening.error)
        return opening.finished

    # ------------------------------------------------------------------ data
    def prompt_tokens(self, record: Record) -> PromptTokens:
        """The record's prompt token ids and image references (cached per uid)."""
        if record.uid not in self._encoded:
            self._encoded[record.uid] = self.policy.kit.tokenize(record)
        return self._encoded[record.uid]

    def encode(self, record: Record) -> PromptInput:
        """The record's full prompt (pixel values included), built now and not kept."""
        return self.policy.kit.materialize(self.prompt_tokens(record))

    def materialize(self, records: Sequence[Record]) -> dict[str, PromptInput]:
        """Full prompts of one batch, one per distinct uid, shared by all its responses."""
        out: dict[str, PromptInput] = {}
        for r in records:
            if r.uid not in out:
                out[r.uid] = self.encode(r)
        return out

    def _within_prompt_limit(self, records: list[Record], where: str) -> list[Record]:
        """``records`` whose prompt fits data.max_prompt_length (measured by the real encoding,
        whose tokens stay cached); the rest dropped and counted, or an error (data.prompt_length_policy)."""
        lengths = [len(self.prompt_tokens(r)) for r in records]
        keep = self.prompt_limit.keep(records, lengths, [r.uid for r in records], where=where)
        if records and not keep:
            raise PromptTooLongError(f"{where}: all {len(records)} prompts are over data.max_prompt_length="
                                     f"{self.prompt_limit.max_prompt_length} tokens; raise it")
        kept = [records[i] for i in keep]
        for i in sorted(set(range(len(records))) - set(keep)):
            self._encoded.pop(records[i].uid, None)
        return kept

    def _epoch_order(self, epoch: int) -> list[int]:
        n = len(self.train_records)
        if not self.cfg.data.shuffle:
            return list(range(n))
        g = torch.Generator().manual_seed(self.cfg.data.seed * 1_000_003 + epoch)
        return torch.randperm(n, generator=g).tolist()

    def next_records(self, count: int, exclude: Collection[str] = ()) -> list[Record]:
        """The next ``count`` training prompts: distinct, and none whose uid is in ``exclude`` (the
        prompts already in this step's batch), so a group never holds two rollouts of one prompt.
        As the release's loader (drop_last, reshuffled per epoch), a draw never straddles two
        epochs: when fewer than ``count`` eligible prompts are left in this epoch's order, they are
        skipped and the next epoch begins; prompts in ``exclude`` are passed over."""
        if count + len(exclude) > len(self.train_records):
            raise TrainingError(
                f"step {self.state.step} needs {count} more distinct prompts besides the {len(exclude)} already in "
                f"its batch, but there are {len(self.train_records)} training prompts; use more training prompts "
                f"or lower trainer.prompts_per_step (now {self.cfg.trainer.prompts_per_step})")
        while True:
            order = self._epoch_order(self.state.epoch)
            rest = order[self.state.position:]
            eligible = [i for i in rest if self.train_records[i].uid not in exclude][:count]
            if len(eligible) == count:
                self.state.position += rest.index(eligible[-1]) + 1
                if self.state.position >= len(order):
                    self.state.epoch, self.state.position = self.state.epoch + 1, 0
                return [self.train_records[i] for i in eligible]
            self.state.epoch, self.state.position = self.state.epoch + 1, 0

    # ------------------------------------------------------------------ stages
    def select_prompts(self, count: int, exclude: Collection[str] = ()) -> tuple[list[Record], int]:
        """``count`` prompts the selector accepts, drawing further prompts for the ones it skips
        (GRESO's own trainer refills: a step never shrinks), none of them in ``exclude`` (uids
        already in the step's batch). Returns (prompts, prompts drawn)."""
        g = torch.Generator().manual_seed(self.cfg.trainer.seed * 7919 + self.state.step)
        chosen: list[Record] = []
        drawn = 0
        limit = _MAX_DRAWS_PER_PROMPT * count
        while len(chosen) < count:
            if drawn >= limit:
                raise TrainingError(
                    f"the prompt selector {self.cfg.algorithm.prompt_selector!r} accepted {len(chosen)} of {drawn} "
                    f"prompts drawn at step {self.state.step}; raise algorithm.greso.floor "
                    f"(now {self.cfg.algorithm.greso.floor}) or use more training prompts")
            records = self.next_records(count - len(chosen), {*exclude, *(r.uid for r in chosen)})
            drawn += len(records)
            mask = self.components.prompt_selector.select([r.uid for r in records], g)
            chosen.extend(r for r, keep in zip(records, mask) if keep)
        return chosen, drawn

    def generate(self, records: list[Record], timer: StageTimer) -> tuple[RolloutBatch, dict[str, float], str | None]:
        """Rollout for the given prompts (sharded over ranks), each rank rewarding its own responses,
        then all-gathered with their rewards. Returns the batch, the reward's failure counts
        summed over ranks and its first failure (lowest rank first; None without failures). A rank builds pixel values only for its own prompts (and, later, for
        the rows it forwards: ``RolloutBatch.prompts``)."""
        rank, world = dist.rank(), dist.world_size()
        mine = list(range(rank, len(records), world))
        # One row per record: token ids cached per uid; pixels built on demand, released with the batch.
        column = PromptColumn([self.prompt_tokens(r) for r in records], build=self.policy.kit.materialize)
        prompts = column.inputs(mine)
        ns = [self.components.rollout_scaler.n_for(records[i].uid) for i in mine]
        sampling = SamplingConfig(
            temperature=self.cfg.rollout.temperature,
            top_p=self.cfg.rollout.top_p,
            top_k=self.cfg.rollout.top_k,
            max_new_tokens=self.cfg.rollout.max_new_tokens,
            seed=None,
        )
        with timer.stage("gen"):
            # Every rank calls the engine, even with no prompts: hf under ZeRO-3 runs collectives.
            responses: list[Response] = self.policy.engine.generate(prompts, ns, sampling)
        with timer.stage("reward"):  # each rank scores its own responses; only the scores travel
            errors: list[str] = []
            scores, stats = self.policy.score([r.text for r in responses], [records[mine[r.prompt_index]] for r in responses],
                                              errors=errors)
        local = ResponseColumns.from_rows(
            [mine[r.prompt_index] for r in responses], [r.response_ids for r in responses],
            [r.text for r in responses], [r.logprobs for r in responses], [r.finish_reason for r in responses],
            rewards=torch.tensor([s["overall"] for s in scores], dtype=torch.float32),
            accuracies=torch.tensor([s["accuracy"] for s in scores], dtype=torch.float32))
        parts = dist.all_gather_object((local, stats, errors[:1]))
        gathered = ResponseColumns.merge([part for part, _, _ in parts])  # prompt order, stable within a prompt
        rows = gathered.prompt_index.tolist()
        batch = RolloutBatch.from_columns(column.select(rows), [records[i].uid for i in rows],
                                          [records[i] for i in rows], gathered)
        first_error = next((e for _, _, part_errors in parts for e in part_errors), None)
        return batch, {k: float(sum(part_stats[k] for _, part_stats, _ in parts)) for k in stats}, first_error

    def rollout_with_filter(self, timer: StageTimer) -> tuple[RolloutBatch, dict[str, float]]:
        """Select prompts, roll out, reward; with DAPO, regenerate until the batch is full. The
        metrics include the reward's failure counts of the last rollout; a reward that keeps
        failing stops the run here (``check_reward_failures``)."""
        buffer = self.components.new_group_buffer(self.cfg.trainer.prompts_per_step)
        prompts_seen = prompts_drawn = 0
        reward_stats: dict[str, float] = {}
        first_error: str | None = None
        while not buffer.full:
            records, drawn = self.select_prompts(self.cfg.trainer.prompts_per_step, buffer.kept_uids)
            prompts_seen += len(records)
            prompts_drawn += drawn
            batch, reward_stats, first_error = self.generate(records, timer)
            self.components.prompt_selector.record_groups(_accuracy_groups(batch))
            groups = batch.group_indices()
            buffer.add(batch.accuracies, batch.uids, payloads={u: batch.select(i) for u, i in groups.items()})
        self.check_reward_failures(reward_stats, first_error)
        # The rollout is over: the engine frees its memory for the update (PolicyBundle.sync_and_check wakes it).
        self.policy.engine.sleep()
        batch = RolloutBatch.concat([part for _, part in buffer.take()])
        return batch, {**buffer.metrics(), K.ROLLOUT_PROMPTS_SEEN: float(prompts_seen),
                       K.ROLLOUT_PROMPTS_DRAWN: float(prompts_drawn), **reward_stats}

    def check_reward_failures(self, stats: dict[str, float], first_error: str | None) -> None:
        """Count the steps in a row whose reward failed (raised or timed out) on more than
        data.reward_max_failure_share of their responses; at data.reward_max_failing_steps, stop
        the run (before this step's update) with the reward's name and its first error."""
        d = self.cfg.data
        failures, n = stats.get(K.REWARD_FAILURES, 0.0), stats.get(K.REWARD_N, 0.0)
        failing = n > 0 and failures / n > d.reward_max_failure_share
        self.state.reward_failing_steps = self.state.reward_failing_steps + 1 if failing else 0
        if self.state.reward_failing_steps >= d.reward_max_failing_steps:
            raise TrainingError(
                f"reward {d.reward!r} failed on {failures:.0f} of {n:.0f} responses at step {self.state.step + 1}, "
                f"more than data.reward_max_failure_share={d.reward_max_failure_share} for "
                f"{self.state.reward_failing_steps} steps in a row; first error: {first_error}")

    def compute_advantages(self, batch: RolloutBatch) -> None:
        """Sets the batch's advantages column."""
        batch.advantages = self.components.advantage(batch.rewards, batch.uids)

    def align_to(self) -> int:
        """MDAP's refill unit d: the optimizer mini-batch in trajectories (fixed_minibatch, as the
        release), or world x micro-batch in fixed_updates mode (the kept set is split evenly)."""
        t = self.cfg.trainer
        if t.update_mode == "fixed_minibatch":
            return t.effective_mini_batch
        return dist.world_size() * t.micro_batch_size

    def prune(self, batch: RolloutBatch) -> PruneResult:
        g = torch.Generator().manual_seed(self.cfg.trainer.seed * 104_729 + self.state.step)
        result = self.components.pruner(prune_view(batch), align_to=self.align_to(), generator=g)
        world = dist.world_size()
        if len(result.kept) % world:
            raise TrainingError(
                f"step {self.state.step}: {len(result.kept)} kept responses cannot be split over {world} ranks "
                f"(the batch of {len(batch)} had too few pruned responses to refill to a multiple of "
                f"{self.align_to()}); use trainer.prompts_per_step and rollout.n whose product is a multiple "
                f"of the world size")
        return result

    def prune_first(self) -> bool:
        """Prune before the old/ref log-prob passes exactly when the release does: KL is a loss
        term here (or absent), so only CPPO keeps its released order (full batch, then prune)."""
        return self.components.pruner.prune_first

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """One rollout batch: generate, then learn from it, then update ARS/GRESO statistics."""
        timer = StageTimer()
        step_start, step_cpu = time.perf_counter(), time.process_time()
        n_before = self.components.rollout_scaler.n
        batch, rollout_metrics = self.rollout_with_filter(timer)
        kept, learn_metrics = self.learn(batch, timer)
        self.state.step += 1
        scaler_metrics = self.update_statistics(batch, kept)
        timer.seconds["step"] = time.perf_counter() - step_start
        timer.cpu_seconds["step"] = time.process_time() - step_cpu
        return {
            **rollout_metrics,
            **self._batch_metrics(batch, kept, n_before),
            **learn_metrics,
            **scaler_metrics,
            **timer.metrics(),
            K.EPOCH: self.state.epoch,
        }

    def learn(self, batch: RolloutBatch, timer: StageTimer) -> tuple[RolloutBatch, dict[str, float]]:
        """Advantages -> prune -> old/ref log-probs on the KEPT set (CPPO: on the full batch, before
        pruning, as released) -> mini-batch updates -> weight sync.

        ``batch`` is the global rollout batch (identical on every rank); returns the kept batch.
        The log-probs are columns of the batch, so CPPO's order is a ``select`` of computed rows.
        """
        cfg = self.cfg
        with timer.stage("adv"):
            self.compute_advantages(batch)
        rank, world = dist.rank(), dist.world_size()
        if not self.prune_first():
            # CPPO as released: old/ref log-probs of the whole batch (each rank a shard, then
            # gathered), pruning after; the kept rows carry theirs.
            batch = self.with_logprobs(batch, timer, gather=True)
        with timer.stage("prune"):
            result = self.prune(batch)
            kept = batch.select(result.kept.tolist())
        prune_metrics = {**result.metrics(len(batch)), **self.components.pruner.metrics()}
        g = torch.Generator().manual_seed(cfg.trainer.seed * 15_485_863 + self.state.step)
        plan = rank_plan(plan_minibatches(
            len(kept), mode=cfg.trainer.update_mode, updates_per_step=cfg.trainer.updates_per_step,
            mini_batch_size=cfg.trainer.effective_mini_batch, world=world, generator=g,
        ), rank, world)
        local = kept.select(plan.rows)  # the rows this rank forwards
        if local.old_logprobs is None:
            local = self.with_logprobs(local, timer, gather=False)
        probs_diff = rollout_probs_diff(local)
        with timer.stage("update_actor"):
            actor_metrics = update_policy(
                self.policy.actor, local, plan, settings=self.loss_settings(),
                micro_batch_size=cfg.trainer.micro_batch_size, pad_id=self.policy.pad_id,
                check_finite=self._check_finite,
            )
        with timer.stage("update_weights"):
            sync_metrics = self.policy.sync_and_check(kept)
        return kept, {**prune_metrics, **actor_metrics, **sync_metrics, **probs_diff}

    def with_logprobs(self, batch: RolloutBatch, timer: StageTimer, *, gather: bool) -> RolloutBatch:
        """``batch`` with its old (and, with a reference model, reference) log-prob columns.
        ``gather``: each rank computes rows ``rank::world`` and the ranks all-gather them (the
        batch is the same on every rank); else this rank computes every row of ``batch``."""
        rank, world = dist.rank(), dist.world_size()
        part = batch.select(range(rank, len(batch), world)) if gather else batch
        mbs = self.cfg.trainer.micro_batch_size
        # Rows rank::world differ by one between ranks (9 rows: 5 and 4); under ZeRO-3 every rank
        # must make the same number of forwards, the largest share's, padding with batch row 0.
        # Without gather every rank's rows are its equal share of the update plan.
        forwards = forward_count(-(-len(batch) // world), mbs) if gather else 0
        filler = batch.select([0]) if gather and len(batch) else None
        models = {"old_logprobs": ("old_log_prob", self.policy.actor.module),
                  "ref_logprobs": ("ref", self.policy.reference)}
        columns: dict[str, torch.Tensor] = {}
        for column, (stage, model) in models.items():
            if model is None:
                continue
            with timer.stage(stage):
                logp = compute_logprobs(model, part, micro_batch_size=mbs, pad_id=self.policy.pad_id,
                                        forwards=forwards, filler=filler)
                columns[column] = _gather_rows(logp, len(batch)) if gather else logp
        return batch.with_columns(**columns)

    def loss_settings(self) -> LossSettings:
        return LossSettings.from_config(self.cfg.algorithm)

    def _check_finite(self, loss: torch.Tensor, what: str) -> None:
        if not torch.isfinite(loss).all():
            raise TrainingError(
                f"{what} is {loss.item()} at step {self.state.step} (run {self.run_dir}); lower trainer.optim.lr "
                f"(now {self.cfg.trainer.optim.lr}) or check rewards/advantages for NaN"
            )

    def update_statistics(self, batch: RolloutBatch, kept: RolloutBatch) -> dict[str, float]:
        """The step's end, told to the rollout scaler (with the per-question final counts: kept +
        refill) and to the prompt selector; returns what they report."""
        scaler, selector = self.components.rollout_scaler, self.components.prompt_selector
        # the per-question final counts: every question of the batch, kept responses after the refill
        final_counts = {**{u: 0 for u in batch.uids}, **Counter(kept.uids)}
        scaler.end_step(final_counts, step=self.state.step, epoch=self.state.epoch,
                        progress=min(self.state.step / self.cfg.trainer.total_steps, 1.0))
        selector.end_step(self.state.epoch)
        return {**scaler.metrics(), **selector.metrics()}

    def _batch_metrics(self, batch: RolloutBatch, kept: RolloutBatch, n_used: int) -> dict[str, float]:
        groups = batch.group_indices()
        mixed = sum(1 for idx in groups.values() if 0 < float(batch.accuracies[idx].sum()) < len(idx))
        return {
            K.REWARD_MEAN: float(batch.rewards.mean()),
            K.REWARD_ACCURACY: float(batch.accuracies.mean()),
            K.ROLLOUT_N: float(n_used),
            K.ROLLOUT_NUM_PROMPTS: float(len(groups)),
            K.ROLLOUT_NUM_RESPONSES: float(len(batch)),
            K.ROLLOUT_MIXED_GROUPS: mixed / max(len(groups), 1),
            K.ROLLOUT_RESPONSE_LENGTH: batch.num_response_tokens() / max(len(batch), 1),
            K.PRUNE_KEPT: float(len(kept)),
            K.PRUNE_KEPT_FRACTION: len(kept) / max(len(batch), 1),
            K.TOKENS_GENERATED: float(batch.num_response_tokens()),
            K.TOKENS_TRAINED: float(kept.num_response_tokens()),
        }

    # ------------------------------------------------------------------ validation
    def validate(self, records: Sequence[Record] | None = None, fmt: tuple[str, str] | None = None,
                 k: int | None = None) -> dict[str, float]:
        """Accuracy on the validation prompts at the validation sampling: avg@k over rollout.val_n samples
        per problem (``val/accuracy``) and the paper's n = 1 (``val/accuracy_n1``, each first sample);
        ``{}`` without validation prompts. ``fmt``: another benchmark's (template, reward) instead of
        the training set's; ``k``: samples per problem (default rollout.val_n)."""
        records = list(records if records is not None else self.val_records)
        if not records:  # no validation set: no val/* metrics at all (never a 0.0 that was not measured)
            return {}
        rank, world = dist.rank(), dist.world_size()
        mine = records[rank::world]
        sampling = SamplingConfig(
            temperature=self.cfg.rollout.val_temperature, top_p=self.cfg.rollout.val_top_p,
            max_new_tokens=self.cfg.rollout.max_new_tokens, seed=self.cfg.trainer.seed,
        )
        k = self.cfg.rollout.val_n if k is None else k
        if fmt is None:
            full = self.materialize(mine)
            prompts = [full[r.uid] for r in mine]
        else:
            prompts = [self.policy.encode(r, fmt[0]) for r in mine]  # not cached: scored once
        responses = self.policy.engine.generate(prompts, k, sampling)  # every rank: see generate
        texts, graded = [r.text for r in responses], [mine[r.prompt_index] for r in responses]
        scores = self.policy.score(texts, graded, None if fmt is None else fmt[1])[0]
        local = [(r.prompt_index * world + rank, s["accuracy"], s["overall"]) for r, s in zip(responses, scores)]
        return validation_metrics([x for part in dist.all_gather_object(local) for x in part], k)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {
            "train_state": vars(self.state).copy(),
            **self.components.state_dict(),
            "config": to_dict(self.cfg),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = TrainState(**state["train_state"])
        self.components.load_state_dict(state)

    def save(self) -> None:
        from fastrl.training.checkpoint import save_checkpoint

        save_checkpoint(self.run_dir, self.state.step, self.policy.actor, self.state_dict(),
                        keep=self.cfg.trainer.keep_checkpoints)

    def maybe_resume(self) -> bool:
        """Continue from the newest checkpoint that loads (a damaged one falls back to the one
        before it, with a warning). ``trainer.resume=false`` / ``force_new`` moved the old run aside."""
        from fastrl.training.checkpoint import load_latest

        if not self.cfg.trainer.resume:
            return False
        loaded = load_latest(self.run_dir, self.policy.actor)
        if loaded is None:
            return False
        self.load_state_dict(loaded[1])
        self.policy.after_load()
        self.logger.truncate_after(self.state.step)
        return True

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """Train to ``trainer.total_steps``, validate, save, export ``final/``; returns the summary
        (also ``<run_dir>/summary.json``). A finished run returns its saved summary, untouched."""
        if self.finished is not None:
            log.warning(self.finished["message"])
            return dict(self.finished)
        try:
            return self._fit()
        finally:
            self.close()

    def _fit(self) -> dict[str, Any]:
        cfg = self.cfg.trainer
        resumed = self.maybe_resume()
        start_wall = time.perf_counter()
        summary: dict[str, Any] = {"resumed_from_step": self.state.step if resumed else None}
        if not resumed:
            # a fresh start owns the log: lines of an earlier, killed attempt would be summed twice
            self.logger.truncate_after(-1)
            self._say_validating("before training")
            before = self.validate(k=self.cfg.rollout.val_n_at_ends)
            if before:
                self.logger.log(0, {K.before_key(k): v for k, v in before.items()} | {K.PHASE: K.PHASE_VAL})
                summary["acc_before"] = before[K.VAL_ACCURACY]
                summary["acc_before_n1"] = before[K.VAL_ACCURACY_N1]
                summary["acc_before_se"] = before[K.VAL_ACCURACY_SE]
        talk = cfg.progress and dist.is_main()
        bar = progress_bar(cfg.total_steps, self.cfg.method, initial=self.state.step, unit="step") if talk else None
        first_step, loop_start = self.state.step, time.perf_counter()
        while self.state.step < cfg.total_steps:
            metrics = self.train_step()
            if cfg.val_every and self.state.step % cfg.val_every == 0 and self.state.step < cfg.total_steps:
                metrics.update(self.validate())
            self.logger.log(self.state.step, metrics)
            fault_point("after_step_line")
            if talk:  # a line per step (above the bar in a terminal), for log files as well
                log.info(step_line(self.state.step, cfg.total_steps, metrics, time.perf_counter() - loop_start,
                                   self.state.step - first_step))
            if bar is not None:
                bar.set_postfix(progress_postfix(metrics), refresh=False)
                bar.update(1)
            if cfg.save_every and self.state.step % cfg.save_every == 0:
                self.save()
        if bar is not None:
            bar.close()
        train_wall_s = time.perf_counter() - start_wall
        ends = self.cfg.rollout.val_n_at_ends
        self._say_validating("after training")
        after = self.validate(k=ends)
        for name, records in self.ood_records.items():
            ood = self.validate(records, self.ood_formats[name], k=ends)
            if ood:
                after.update({K.ood_accuracy_key(name): ood[K.VAL_ACCURACY], K.ood_num_key(name): ood[K.VAL_NUM]})
        if cfg.save_every:
            self.save()
        final_model = str(self.policy.export(self.run_dir / FINAL_DIR))
        fault_point("before_final_line")
        # Last: the final line marks the run finished (experiments.logs.is_finished), so it comes
        # after the checkpoint and final/ it promises.
        self.logger.log(self.state.step, {**after, K.PHASE: K.PHASE_VAL_FINAL})
        fault_point("before_summary")
        summary.update({"acc_after": after.get(K.VAL_ACCURACY), "acc_after_n1": after.get(K.VAL_ACCURACY_N1),
                        "acc_after_se": after.get(K.VAL_ACCURACY_SE),
                        "train_wall_s": train_wall_s, "steps": self.state.step,
                        **{k: v for k, v in after.items() if k.startswith(K.OOD_PREFIX)},
                        "final_model": final_model})
        if dist.is_main():
            write_summary(self.run_dir, summary)
        return summary

    def _say_validating(self, when: str) -> None:
        if self.val_records and dist.is_main():
            log.info("validation %s: %d problems x %d samples%s", when, len(self.val_records),
                     self.cfg.rollout.val_n_at_ends,
                     f", then {len(self.ood_records)} OOD benchmark(s)" if self.ood_records and when.startswith("after")
                     else "")

    def close(self) -> None:
        """Release the engine, the log and the run-dir lock (idempotent)."""
        if not self._closed:
            self._closed = True
            if self.policy is not None:
                self.policy.close()
            if self.logger is not None:
                self.logger.close()
        self._lock.release()


def validation_metrics(samples: Sequence[tuple[int, float, float]], k: int) -> dict[str, float]:
    """The validation metrics from (problem, accuracy, reward) per sample, in each problem's sampling order: avg@k
    over all samples, the first sample's accuracy (n = 1) and avg@k's standard error."""
    from fastrl.evaluation.metrics import avg_at_k_standard_error

    by_problem: dict[int, list[float]] = {}
    for problem, accuracy, _ in samples:
        by_problem.setdefault(problem, []).append(accuracy)
    n1 = [accs[0] for accs in by_problem.values()]
    acc = sum(a for _, a, _ in samples) / max(len(samples), 1)
    rew = sum(o for _, _, o in samples) / max(len(samples), 1)
    return {K.VAL_ACCURACY: acc, K.VAL_ACCURACY_N1: sum(n1) / max(len(n1), 1), K.VAL_REWARD: rew,
            K.VAL_NUM: float(len(n1)), K.VAL_SAMPLES_PER_PROBLEM: float(k),
            K.VAL_ACCURACY_SE: avg_at_k_standard_error(list(by_problem.values()))}


def ood_formats(cfg: FastRLConfig, ood: dict[str, list[Record]], *, own: bool) -> dict[str, tuple[str, str]]:
    """(template, reward) per OOD benchmark: with ``own`` (the task says so: files) each its own
    benchmark's (fastrl.evaluation.benchmarks); else the training pair (a generated task's variants)."""
    from fastrl.evaluation.benchmarks import benchmark_format

    training = (cfg.data.template, cfg.data.reward)
    if not own:
        return {name: training for name in ood}
    formats = {name: benchmark_format(name, records, training) for name, records in ood.items()}
    if dist.is_main():
        for name, (template, reward) in formats.items():
            print(f"ood benchmark {name}: template {template}, reward {reward}", flush=True)
    return formats


def rollout_probs_diff(batch: RolloutBatch) -> dict[str, float]:
    """|p_engine - p_trainer| per token over the batch's rows with engine log-probs (as verl logs
    it), the trainer's being its old log-probs: a large value means the samples do not come from
    the policy being trained (engine bug, stale weights)."""
    lengths = batch.response_lengths.tolist()
    rows = [i for i in batch.has_engine_logprobs.nonzero().flatten().tolist() if lengths[i]]
    if not rows:
        return {}
    # Row by row, as the values were always computed (a vectorised exp over [N, R] rounds its
    # tail elements differently).
    flat = torch.cat([(batch.engine_logprobs[i, : lengths[i]].exp() - batch.old_logprobs[i, : lengths[i]].exp()).abs()
                      for i in rows])
    return {K.ROLLOUT_PROBS_DIFF_MAX: float(flat.max()), K.ROLLOUT_PROBS_DIFF_MEAN: float(flat.mean())}


def _accuracy_groups(batch: RolloutBatch) -> dict[str, list[float]]:
    return {uid: [float(batch.accuracies[i]) for i in idx] for uid, idx in batch.group_indices().items()}


def _check_world_fits(cfg: FastRLConfig, world: int) -> None:
    """Every optimizer mini-batch (and hence MDAP's refill unit) must split evenly over the ranks."""
    t = cfg.trainer
    if t.update_mode == "fixed_minibatch" and t.effective_mini_batch % world:
        raise ValueError(
            f"trainer.mini_batch_size / trainer.mini_batch_divisor = {t.mini_batch_size} / {t.mini_batch_divisor} = "
            f"{t.effective_mini_batch} trajectories per optimizer step cannot be split over {world} ranks; "
            f"make it a multiple of {world} (e.g. trainer.mini_batch_size={t.mini_batch_divisor * world * max(1, t.effective_mini_batch // world)})")
    if (t.prompts_per_step * cfg.rollout.n) % world:
        raise ValueError(f"trainer.prompts_per_step x rollout.n = {t.prompts_per_step} x {cfg.rollout.n} is not a "
                         f"multiple of the world size {world}")


def _gather_rows(local: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Every rank's rows ``rank::world`` of a [num_rows, ...] column, merged (a no-op on one rank)."""
    world = dist.world_size()
    if world == 1:
        return local
    out = local.new_zeros((num_rows, *local.shape[1:]))
    for r, part in enumerate(dist.all_gather_object(local.cpu())):
        out[r::world] = part
    return out


# GRESO refill: give up (with an error) after drawing this many prompts per prompt needed.
_MAX_DRAWS_PER_PROMPT = 100
