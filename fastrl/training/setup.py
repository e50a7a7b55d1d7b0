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

from fastrl.config import FastRLConfig, check_engine_installed
from fastrl.data.schema import Record
from fastrl.models.device import module_device, resolve_device
from fastrl.models.inputs import PromptInput
from fastrl.policy import PolicyKit, PolicySpec, assemble_policy_kit, load_model
from fastrl.rollout.base import RolloutEngine, SamplingConfig
from fastrl.training import distributed as dist
from fastrl.training.backends import BACKENDS, backend_name
from fastrl.training.batch import RolloutBatch


class DataError(ValueError):
    """A dataset named in the config cannot be used; the message names the file or key."""


def resolve_policy_path(cfg: FastRLConfig, device: torch.device | None = None) -> str | Path:
    """The policy to train: ``model.path`` for ``model.source = path`` (a folder, else a hub id);
    for ``gguf`` the cached HF conversion of the GGUF file (``fastrl.models.gguf``); for ``tiny``
    the tiny model's cached SFT warm start, which ``fastrl.mini`` builds and trains on ``device``
    (default: ``model.device`` resolved). Only rank 0 builds a cached directory; the others wait
    for it."""
    if cfg.model.source == "path":
        return Path(cfg.model.path) if Path(cfg.model.path).exists() else cfg.model.path
    path = _build_policy_dir(cfg, device) if dist.is_main() else None
    return Path(dist.broadcast_object(str(path) if path else None))


def _build_policy_dir(cfg: FastRLConfig, device: torch.device | None) -> Path:
    """The cached directory of a built source (rank 0 only): a GGUF conversion or a tiny warm start."""
    if cfg.model.source == "gguf":
        from fastrl.models.gguf import gguf_policy_dir

        return gguf_policy_dir(cfg.model.path)
    from fastrl.mini.source import tiny_policy_dir

    return tiny_policy_dir(cfg, device or resolve_device(cfg.model.device))


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
        return logprob_check(engine_logp, trainer_logp, batch["response_mask"], tol=self.cfg.rollout.logprob_check_tol)

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


@dataclass
class DatasetSplits:
    """A run's records by split, with where each came from; checked as a whole, no model needed."""

    train: _Split
    val: _Split
    ood: dict[str, _Split]


def load_dataset_splits(cfg: FastRLConfig) -> DatasetSplits:
    """The configured task's splits, checked as a whole: no empty file, no uid twice within a
    split (nor one uid for two different records across splits: the trainer's prompt cache is keyed
    by uid), and every ground truth gradable by ``data.reward``. Each error names the file(s) and
    row(s). Training records get the release's question id (``row_id``: the row over the training
    files, file after file)."""
    d = cfg.data
    if d.task == "files":
        if not d.train_files:
            raise DataError("data.task = files needs data.train_files (paths to canonical parquet/jsonl)")
        train = _load_split(d.train_files, "data.train_files")
        for row, r in enumerate(train.records):  # the release's question_id: start offset + row
            r.row_id = row
        val = _load_split(d.val_files, "data.val_files")
        ood = {}
        for f in d.ood_variants:
            name = Path(f).stem
            if name in ood:
                raise DataError(f"data.ood_variants: {ood[name].where[0][0]!r} and {f!r} have the same benchmark name "
                                f"{name!r} (the file stem); rename one")
            ood[name] = _load_split([f], "data.ood_variants")
    else:
        from fastrl.mini.tasks import generate_task

        def generated(split: str, num: int, variant: str) -> _Split:
            records = generate_task(d.task, split=split, num=num, seed=d.seed, variant=variant)
            label = f"{d.task} {split}" if variant == d.variant else f"{d.task}:{variant} {split}"
            return _Split(records, [(label, i) for i in range(len(records))])

        train = generated("train", d.num_train, d.variant)
        val = generated("val", d.num_val, d.variant)
        ood = {v: generated("val", d.num_val, v) for v in d.ood_variants}
        if not train.records:
            raise DataError(f"data.task = {d.task!r} generated no training records (data.num_train = {d.num_train})")
    splits = {"train": train, "val": val, **{f"ood {k}": v for k, v in ood.items()}}
    _refuse_conflicting_uids(splits)
    for split in splits.values():
        _check_ground_truths(split, d.reward)
    return DatasetSplits(train, val, ood)


def check_enough_prompts(cfg: FastRLConfig, num_train: int, after: str = "") -> None:
    """A step's prompts are distinct (its groups are keyed by prompt uid), so a training set
    smaller than trainer.prompts_per_step cannot fill one step: refused, with the numbers."""
    need = cfg.trainer.prompts_per_step
    if num_train < need:
        source = ", ".join(cfg.data.train_files) if cfg.data.task == "files" else \
            f"data.task={cfg.data.task} with data.num_train={cfg.data.num_train}"
        raise DataError(f"{source}: {num_train} training prompts{after} < trainer.prompts_per_step={need} "
                        f"(a step rolls out that many distinct prompts); use more training prompts or lower "
                        f"trainer.prompts_per_step")


def limit_prompts(
    splits: DatasetSplits, within_limit: Callable[[list[Record], str], list[Record]] | None,
) -> tuple[list[Record], list[Record], dict[str, list[Record]]]:
    """Each file (or generated split) of ``splits`` cut to ``within_limit(records, where)``."""
    def cut(split: _Split) -> list[Record]:
        if within_limit is None:
            return list(split.records)
        by_file: dict[str, list[Record]] = {}
        for rec, (where, _) in zip(split.records, split.where):
            by_file.setdefault(where, []).append(rec)
        return [r for where, records in by_file.items() for r in within_limit(records, where)]

    return cut(splits.train), cut(splits.val), {k: cut(v) for k, v in splits.ood.items()}


@dataclass
class _Split:
    """A split's records and where each came from: (file, row)."""

    records: list[Record]
    where: list[tuple[str, int]]


def _load_split(files: Sequence[str], key: str) -> _Split:
    """Every file of a split (an empty file is an error), with no uid twice across them."""
    from fastrl.data.loaders import load_records_report

    split = _Split([], [])
    first: dict[str, tuple[str, int]] = {}
    for f in files:
        report = load_records_report(f)
        if not report.records:
            raise DataError(f"{key}: {f!r} has no records (an empty file); fill it or remove it from {key}")
        for rec, row in zip(report.records, report.rows):
            if rec.uid in first:
                f0, row0 = first[rec.uid]
                raise DataError(f"{key}: uid {rec.uid!r} is in {f0!r} row {row0} and in {f!r} row {row}; uids must be "
                                "unique (prompts are cached by uid, so one would be trained on the other's prompt)")
            first[rec.uid] = (f, row)
            split.records.append(rec)
            split.where.append((f, row))
    return split


def _refuse_conflicting_uids(splits: dict[str, _Split]) -> None:
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


def _check_ground_truths(split: _Split, reward: str) -> None:
    from fastrl.data.schema import RecordError
    from fastrl.rewards import ground_truth_problem

    for rec, (f, row) in zip(split.records, split.where):
        problem = ground_truth_problem(reward, rec.answer)
        if problem is not None:
            raise RecordError(f"{problem}; data.reward = {reward} could never score a response to it",
                              file=f, row=row, field="answer", uid=rec.uid)
