"""Builds what a run needs from its config: the policy, its engines and the datasets.

Kept apart from the step pipeline so the pipeline reads as the paper's algorithm, and so tests
can build a trainer around a tiny policy without touching the loop. The policy's engine, prompt
encoder and scorer come from the policy kit (``fastrl.policy``), as they do for ``fastrl eval``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from fastrl.algorithms.registry import bind
from fastrl.config import FastRLConfig, check_engine_installed
from fastrl.data.schema import Record
from fastrl.data.splits import DataError, Split, TaskSplits
from fastrl.models.device import module_device
from fastrl.models.inputs import PromptInput
from fastrl.policy import PolicyKit, PolicySpec, assemble_policy_kit, load_model
from fastrl.rollout.base import RolloutEngine, SamplingConfig
from fastrl.sources import MODEL_SOURCES
from fastrl.tasks import TASKS
from fastrl.training import distributed as dist
from fastrl.training.backends import BACKENDS, backend_name
from fastrl.training.batch import RolloutBatch

__all__ = ["DataError", "PolicyBundle", "build_policy", "load_datasets", "load_dataset_splits", "resolve_policy_path"]


def resolve_policy_path(cfg: FastRLConfig, device: torch.device | None = None) -> str | Path:
    """The policy to train, from the factory ``model.source`` names in ``fastrl.sources``:
    ``model.path`` (``path``), a GGUF file's cached HF conversion (``gguf``), the tiny model's cached
    SFT warm start (``tiny``, trained on ``device``; default ``model.device`` resolved), or a
    plug-in's. Only rank 0 asks the source (a source that builds a cached directory builds it
    once); the others wait for its answer."""
    path = bind(MODEL_SOURCES, cfg.model.source, cfg.model)(cfg, device) if dist.is_main() else None
    return dist.broadcast_object(path)


@dataclass
class PolicyBundle:
    """The actor (DeepSpeed engine), its frozen reference, and the policy kit around the actor's
    module: rollout engine, prompt encoder and reward."""

    cfg: FastRLConfig
    path: Path
    actor: Any
    reference: torch.nn.Module | None
    kit: PolicyKit

    @property
    def engine(self) -> RolloutEngine:
        return self.kit.engine

    @property
    def processor(self) -> Any:
        """``load_policy``'s second value: the tokenizer, or a VL model's processor (its text
        tokenizer is ``fastrl.policy.text_tokenizer(processor)``)."""
        return self.kit.processor

    @property
    def encoder(self) -> Any:
        return self.kit.encoder

    @property
    def pad_id(self) -> int:
        return self.kit.pad_id

    @property
    def reward_name(self) -> str:
        return self.kit.spec.reward

    @property
    def template(self) -> str:
        return self.kit.spec.template

    def encode(self, record: Record, template: str | None = None) -> PromptInput:
        return self.kit.encode(record, template)

    def score(self, texts: Sequence[str], records: Sequence[Record],
              reward: str | None = None, errors: list[str] | None = None,
              ) -> tuple[list[dict[str, float]], dict[str, float]]:
        return self.kit.score(texts, records, reward, errors=errors)

    def sync_and_check(self, kept: RolloutBatch) -> dict[str, float]:
        """Wake the engine and push the new weights; for engines that hold their own copy, prove the
        sync by comparing engine and trainer log-probs on freshly sampled responses.

        The engine's weights wake first and its KV cache only after the push, so the cache's
        memory is still free while the (ZeRO-3-gathered) weights stream in."""
        self.engine.wake_up(("weights",))
        if not self.engine.shares_trainer_weights:
            self.engine.update_weights(self.actor.named_parameters_for_sync())
        self.engine.wake_up(("kv_cache",))
        if self.engine.shares_trainer_weights:
            return {}  # the engine samples from the trainer's own module: nothing to check
        return self.check_engine_logprobs(kept)

    def check_engine_logprobs(self, kept: RolloutBatch) -> dict[str, float]:
        """Engine vs trainer log-probs on responses the engine samples now for a few kept prompts."""
        from fastrl.models.forward import collate, response_logprobs
        from fastrl.rollout.logprob_check import logprob_check

        k = min(self.cfg.rollout.logprob_check_samples, len(kept))
        seen, prompts = set(), []
        for p in kept.prompts:
            if p.uid not in seen:
                seen.add(p.uid)
                prompts.append(p)
            if len(prompts) == k:
                break
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=self.cfg.rollout.max_new_tokens, seed=0)
        responses = self.engine.generate(prompts, 1, sampling)
        batch = collate([prompts[r.prompt_index] for r in responses], [r.response_ids for r in responses], self.pad_id)
        with torch.no_grad():
            trainer_logp = response_logprobs(self.actor.module, batch).float().cpu()  # compared on the CPU
        engine_logp = torch.zeros_like(trainer_logp)
        for row, r in enumerate(responses):
            engine_logp[row, : len(r.logprobs)] = torch.tensor(r.logprobs)
        rollout = self.cfg.rollout
        return logprob_check(engine_logp, trainer_logp, batch["response_mask"], tol=rollout.logprob_check_tol,
                             mean_tol=rollout.logprob_check_mean_tol)

    def export(self, out_dir: Path) -> Path:
        """Save the current policy as a self-contained HF model dir (weights and config, plus the
        source's tokenizer / processor / chat-template files, from its directory or, for a hub id,
        its hub snapshot), loadable by ``fastrl eval``, transformers and vLLM."""
        self.actor.export_hf(out_dir)
        if dist.is_main():
            copy_side_files(model_files_dir(self.path), out_dir)
            if not (out_dir / "tokenizer_config.json").is_file():  # a source without tokenizer files
                save_processor(self.processor, out_dir)
        dist.barrier()
        return out_dir

    def close(self) -> None:
        """Release the rollout engine (vLLM holds its own weights and KV cache)."""
        self.kit.close()

    def after_load(self) -> None:
        """After a checkpoint restore, engines holding their own weights must be re-synced."""
        if not self.engine.shares_trainer_weights:
            self.engine.wake_up()
            self.engine.update_weights(self.actor.named_parameters_for_sync())


# Small files of a model repo that make it self-contained: tokenizer, processor, chat template.
SIDE_FILE_PATTERNS = ("*.json", "*.txt", "*.jinja", "*.model", "*.tiktoken")


def is_weights_or_own_config(name: str) -> bool:
    """Files ``export_hf`` writes itself (weights, configs) or that describe the source's weights
    only: a copied ``model.safetensors.index.json`` would point at the source's shards."""
    return (name.endswith((".safetensors", ".bin", ".pt", ".index.json"))
            or name in ("config.json", "generation_config.json"))


def model_files_dir(path: str | Path) -> Path:
    """The directory holding a model's files: ``path`` itself, or the HF-cache snapshot of a hub
    id (fetching only the small side files when online; the weights are never downloaded here)."""
    if Path(path).is_dir():
        return Path(path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(path), allow_patterns=list(SIDE_FILE_PATTERNS)))


def copy_side_files(src: Path, out_dir: Path) -> list[str]:
    """Copy ``src``'s tokenizer / processor / template files that ``out_dir`` lacks; returns their names."""
    import shutil

    copied = []
    for f in sorted(src.iterdir()):
        if f.is_file() and not is_weights_or_own_config(f.name) and not (out_dir / f.name).exists():
            shutil.copy2(f, out_dir / f.name)
            copied.append(f.name)
    return copied


def save_processor(processor: Any, out_dir: Path) -> None:
    """``save_pretrained`` of a tokenizer, an HF processor, or ``VLProcessorParts``' two parts."""
    parts = [processor] if hasattr(processor, "save_pretrained") else [processor.tokenizer, processor.image_processor]
    for part in parts:
        part.save_pretrained(str(out_dir))


def policy_spec(cfg: FastRLConfig, path: str | Path) -> PolicySpec:
    """The kit's spec of this run's policy at ``path``; each rank's vLLM engine samples with its own seed."""
    return PolicySpec.from_config(cfg, path, seed=cfg.trainer.seed + dist.rank())


def policy_device(cfg: FastRLConfig) -> torch.device:
    """Where the policy trains: the backend's device for ``model.device`` (DeepSpeed's accelerator,
    checked against it; else ``model.device`` resolved, auto = CUDA when available)."""
    return BACKENDS[backend_name(cfg.trainer)].device(cfg.model.device)


def place_reference(reference: torch.nn.Module | None, actor: Any) -> torch.nn.Module | None:
    """Put a plain (not ZeRO-3-wrapped) reference model on the actor's device; the reference
    pass then sees batches on the same device as the actor's passes."""
    if reference is None or _is_deepspeed_engine(reference):
        return reference  # absent, or a ZeRO-3 engine that placed itself
    return reference.to(module_device(actor.model))


def _is_deepspeed_engine(module: torch.nn.Module) -> bool:
    ds = sys.modules.get("deepspeed")
    return ds is not None and isinstance(module, ds.DeepSpeedEngine)


def build_policy(cfg: FastRLConfig) -> PolicyBundle:
    from fastrl.training.actor import Actor, build_reference

    check_engine_installed(cfg.rollout.engine)
    device = policy_device(cfg)
    path = resolve_policy_path(cfg, device)
    spec = policy_spec(cfg, path)
    model, processor = load_model(spec)
    model = BACKENDS[backend_name(cfg.trainer)].place(model, device)
    actor = Actor(model, cfg.trainer, cfg.model)
    reference = place_reference(
        build_reference(path, cfg.trainer, cfg.model)
        if cfg.algorithm.kl_coef > 0 else None,  # no reference model at all without a KL term
        actor,
    )
    # Built after the actor: the HF engine samples from the actor's (possibly DeepSpeed-wrapped)
    # module, and vLLM claims its GPU memory only once the trainer holds its own.
    kit = assemble_policy_kit(spec, actor.module, processor)
    return PolicyBundle(cfg=cfg, path=Path(path), actor=actor, reference=reference, kit=kit)


def load_datasets(
    cfg: FastRLConfig, within_limit: Callable[[list[Record], str], list[Record]] | None = None,
) -> tuple[list[Record], list[Record], dict[str, list[Record]]]:
    """Train, validation and out-of-domain records (``load_dataset_splits``), each file or generated
    split then cut to ``within_limit(records, where)`` (the trainer's prompt-length limit)."""
    return limit_prompts(load_dataset_splits(cfg), within_limit)


def load_dataset_splits(cfg: FastRLConfig) -> TaskSplits:
    """The splits of the task ``data.task`` names (``fastrl.tasks``: ``files``, a generated mini
    task, or a plug-in's), checked as a whole: no empty file, no uid twice within a split (nor one
    uid for two different records across splits: the trainer's prompt cache is keyed by uid), and
    every ground truth gradable by ``data.reward``. Each error names the file(s) and row(s)."""
    splits: TaskSplits = bind(TASKS, cfg.data.task, cfg.data)(cfg.data)
    if not splits.train.records:
        raise DataError(f"data.task = {cfg.data.task!r} gave no training records (data.num_train = "
                        f"{cfg.data.num_train})")
    named = {"train": splits.train, "val": splits.val, **{f"ood {k}": v for k, v in splits.ood.items()}}
    _refuse_conflicting_uids(named)
    for split in named.values():
        _check_ground_truths(split, cfg.data.reward)
    return splits


def check_enough_prompts(cfg: FastRLConfig, num_train: int, after: str = "") -> None:
    """A step's prompts are distinct (its groups are keyed by prompt uid), so a training set
    smaller than trainer.prompts_per_step cannot fill one step: refused, with the numbers."""
    need = cfg.trainer.prompts_per_step
    if num_train < need:
        source = ", ".join(cfg.data.train_files) or f"data.task={cfg.data.task} with data.num_train={cfg.data.num_train}"
        raise DataError(f"{source}: {num_train} training prompts{after} < trainer.prompts_per_step={need} "
                        f"(a step rolls out that many distinct prompts); use more training prompts or lower "
                        f"trainer.prompts_per_step")


def limit_prompts(
    splits: TaskSplits, within_limit: Callable[[list[Record], str], list[Record]] | None,
) -> tuple[list[Record], list[Record], dict[str, list[Record]]]:
    """Each file (or generated split) of ``splits`` cut to ``within_limit(records, where)``."""
    def cut(split: Split) -> list[Record]:
        if within_limit is None:
            return list(split.records)
        by_file: dict[str, list[Record]] = {}
        for rec, (where, _) in zip(split.records, split.where):
            by_file.setdefault(where, []).append(rec)
        return [r for where, records in by_file.items() for r in within_limit(records, where)]

    return cut(splits.train), cut(splits.val), {k: cut(v) for k, v in splits.ood.items()}


def _refuse_conflicting_uids(splits: dict[str, Split]) -> None:
    """One uid may appear in two splits only for the same record (problem, answer, choices and
    image count): the prompt cache would otherwise serve one split the other's prompt."""
    seen: dict[str, tuple[str, Record, tuple[str, int]]] = {}
    for name, split in splits.items():
        for rec, where in zip(split.records, split.where):
            prev = seen.setdefault(rec.uid, (name, rec, where))
            p_name, p_rec, p_where = prev
            if p_name != name and _identity(p_rec) != _identity(rec):
                raise DataError(f"uid {rec.uid!r} names different records in {p_name} ({p_where[0]!r} row {p_where[1]}) "
                                f"and {name} ({where[0]!r} row {where[1]}); give one of them another uid")


def _identity(rec: Record) -> tuple[Any, ...]:
    return rec.problem, rec.answer, rec.choices, len(rec.images)


def _check_ground_truths(split: Split, reward: str) -> None:
    from fastrl.data.schema import RecordError
    from fastrl.rewards import ground_truth_problem

    for rec, (f, row) in zip(split.records, split.where):
        problem = ground_truth_problem(reward, rec.answer)
        if problem is not None:
            raise RecordError(f"{problem}; data.reward = {reward} could never score a response to it",
                              file=f, row=row, field="answer", uid=rec.uid)
