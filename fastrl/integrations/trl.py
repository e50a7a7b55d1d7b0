"""FastRL's pruners (MDAP, ...) inside TRL's ``GRPOTrainer`` (extra ``.[trl]``, TRL 1.16).

Five lines of user code (docs/trl.md)::

    from fastrl.integrations.trl import FastRLGRPOTrainer, make_pruner
    trainer = FastRLGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                                pruner=make_pruner("mdap", tau=0.8), update_mode="fixed_updates")
    trainer.train()

Where it hooks (TRL 1.16, ``trl/trainer/grpo_trainer.py``): ``_prepare_inputs`` calls
``_generate_and_score_completions`` once per generation batch, which returns the batch with its
advantages; this subclass prunes that batch (any pruner of ``fastrl.algorithms.registry.PRUNERS``)
and DROPS the pruned rows before TRL shuffles and splits it into per-step slices, so every
forward/backward of the update runs on kept rows only. Two ways to re-form the slices
(``update_mode``, docs/algorithms.md "Update semantics"):

- ``fixed_updates`` (App. C.1): TRL's schedule unchanged, ``steps_per_generation`` slices per
  generation batch; the kept rows (refilled to a multiple of ``steps_per_generation``) are split
  into that many equal, smaller slices.
- ``fixed_minibatch`` (the release): every slice holds ``per_device_train_batch_size`` rows, so a
  pruned batch lasts fewer optimizer steps (kept / (per_device_train_batch_size x
  gradient_accumulation_steps)); kept rows are refilled to a multiple of one optimizer step. The
  next batch is generated when the kept rows run out, from the prompts the dataloader hands over
  at that step (each generation batch is drawn once; the ones that arrive while kept rows remain
  are passed over, so an "epoch" counts prompts drawn, not prompts rolled out).

``num_items_in_batch`` (the token count ``loss_type`` dapo/cispo/vespo divide by) is recomputed
over the kept rows, so those losses stay a token mean over one optimizer step's kept tokens;
grpo/bnpo/dr_grpo/sapo/luspo normalise within each slice and need nothing.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, Literal

import torch
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler, shuffle_sequence_dict

from fastrl import metric_keys as K
from fastrl.algorithms import registry as R
from fastrl.algorithms.pruning import PruneBatch, PruneResult
from fastrl.algorithms.registry import Pruner

UpdateMode = Literal["fixed_updates", "fixed_minibatch"]
UPDATE_MODES: tuple[str, ...] = ("fixed_updates", "fixed_minibatch")
# Batch keys that are not one row per completion: pruning cannot drop rows from them.
_MULTIMODAL_KEYS = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes",
                    "num_images", "num_tiles", "image_position_ids", "token_type_ids", "mm_token_type_ids")
METRIC_PREFIX = "fastrl/"  # TRL logs "fastrl/prune/kept_fraction", ...


def make_pruner(name: str, **section: Any) -> Pruner:
    """The registered pruner ``name`` built from its config section's fields (``mdap``: tau, rule)."""
    entry = R.PRUNERS.entry(name)
    if entry.section is None:
        if section:
            raise ValueError(f"pruner {name!r} takes no settings; got {', '.join(section)}")
        return R.PRUNERS[name]()
    return R.PRUNERS[name](entry.config(**section))  # type: ignore[misc]


def prune_batch_of(output: dict[str, Any], num_generations: int) -> PruneBatch:
    """TRL's generated batch as a :class:`PruneBatch`: rows i*G .. i*G+G-1 are prompt i's group
    (TRL's RepeatSampler), the response tokens are the completion ids under the completion mask."""
    ids, mask = output["completion_ids"], output["completion_mask"].bool()
    n = ids.shape[0]
    uids: list[Hashable] = [i // num_generations for i in range(n)]
    tokens = [ids[i][mask[i]].tolist() for i in range(n)]
    adv = output["advantages"].detach().float().cpu()
    return PruneBatch(advantages=adv, uids=uids, question_ids=list(uids), response_ids=tokens,
                      rewards=torch.zeros(n), columns={})


def take_rows(output: dict[str, Any], kept: torch.Tensor) -> dict[str, Any]:
    """The batch with only rows ``kept``: every per-row tensor/list indexed, 0-dim entries kept."""
    n = output["completion_ids"].shape[0]
    out: dict[str, Any] = {}
    for key, value in output.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0:
            if value.shape[0] != n:
                raise ValueError(f"fastrl.integrations.trl: batch key {key!r} has {value.shape[0]} rows, not {n}")
            out[key] = value[kept.to(value.device)]
        elif isinstance(value, list):
            out[key] = [value[i] for i in kept.tolist()]
        else:
            out[key] = value
    return out


def prune_metrics(result: PruneResult, num_responses: int) -> dict[str, float]:
    """Kept fraction, kept count, batch size n and the pruner's own metrics (buckets, refill, ...)."""
    kept = len(result.kept)
    out = {K.PRUNE_KEPT_FRACTION: kept / max(num_responses, 1), K.PRUNE_KEPT: float(kept),
           K.ROLLOUT_NUM_RESPONSES: float(num_responses)}
    out.update(result.metrics(num_responses))
    return {METRIC_PREFIX + k: v for k, v in out.items()}


class FastRLGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that prunes each generated batch with ``pruner`` (module docstring)."""

    def __init__(self, *args: Any, pruner: Pruner, update_mode: UpdateMode = "fixed_updates",
                 **kwargs: Any) -> None:
        if update_mode not in UPDATE_MODES:
            raise ValueError(f"update_mode = {update_mode!r} is not one of {', '.join(UPDATE_MODES)}")
        if not getattr(pruner, "prune_first", True):
            raise ValueError("pruners with prune_first = False (CPPO as released) are not supported in TRL: "
                             "set algorithm.cppo.prune_first = True")
        self.pruner, self.update_mode = pruner, update_mode
        self._kept_queue: list[dict[str, Any]] = []
        super().__init__(*args, **kwargs)
        if self.accelerator.num_processes != 1:
            raise ValueError("FastRLGRPOTrainer runs on one process: TRL splits a prompt's group across "
                             "processes, and the pruner needs whole groups (see docs/trl.md)")
        if update_mode == "fixed_minibatch" and self.num_iterations != 1:
            raise ValueError("update_mode = fixed_minibatch needs num_iterations = 1 (each kept row trains once)")

    # ------------------------------------------------------------------ where the batch is pruned
    def _align_to(self) -> int:
        if self.update_mode == "fixed_updates":
            return self.args.steps_per_generation
        return self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return output
        present = [k for k in _MULTIMODAL_KEYS if k in output]
        if present:
            raise ValueError(f"FastRLGRPOTrainer prunes text batches only; this batch holds {', '.join(present)}")
        batch = prune_batch_of(output, self.num_generations)
        result = self.pruner(batch, align_to=self._align_to(), generator=None)
        kept = take_rows(output, result.kept)
        mask = kept["completion_mask"] if "tool_mask" not in kept else kept["completion_mask"] * kept["tool_mask"]
        kept["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        for key, value in prune_metrics(result, len(batch)).items():
            self._metrics["train"][key].append(value)
        self.fastrl_last_prune = (batch, result)
        return kept

    # ------------------------------------------------------------------ the per-step slices
    def _get_train_sampler(self, dataset: Any = None) -> Any:
        if self.update_mode == "fixed_updates":
            return super()._get_train_sampler(dataset)
        return RepeatSampler(data_source=self.train_dataset if dataset is None else dataset,
                             mini_repeat_count=self.num_generations,
                             batch_size=self.args.generation_batch_size // self.num_generations,
                             repeat_count=1, shuffle=self.shuffle_dataset, seed=self.args.seed)

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        if self.update_mode == "fixed_updates":
            generate_every = self.args.steps_per_generation * self.num_iterations
            if self._step % generate_every == 0 or self._buffered_inputs is None:
                kept = shuffle_sequence_dict(self._generate_and_score_completions(generation_batch))
                self._buffered_inputs = split_rows(kept, self.args.steps_per_generation)
            return self._buffered_inputs[self._step % self.args.steps_per_generation]
        if not self._kept_queue:
            kept = shuffle_sequence_dict(self._generate_and_score_completions(generation_batch))
            rows = kept["completion_ids"].shape[0]
            num_slices = max(1, math.ceil(rows / self.args.per_device_train_batch_size))
            # dapo/cispo/vespo divide by num_items * GA / steps_per_generation: rescale so that is the
            # mean kept-token count of one optimizer step over the num_slices this batch lasts.
            kept["num_items_in_batch"] = kept["num_items_in_batch"] * self.args.steps_per_generation / num_slices
            self._kept_queue = split_rows(kept, num_slices)
        return self._kept_queue.pop(0)


def split_rows(batch: dict[str, Any], num_slices: int) -> list[dict[str, Any]]:
    """``batch`` cut into ``num_slices`` consecutive slices whose sizes differ by at most one row
    (equal when the row count is a multiple); 0-dim entries are shared."""
    rows = batch["completion_ids"].shape[0]
    if rows < num_slices:
        raise ValueError(f"fastrl.integrations.trl: {rows} kept rows cannot fill {num_slices} per-step slices; "
                         "raise the generation batch or lower steps_per_generation")
    bounds = [rows * s // num_slices for s in range(num_slices + 1)]
    return [take_rows(batch, torch.arange(bounds[s], bounds[s + 1])) for s in range(num_slices)]
