"""The built-in seams' config sections: ``rollout.hf``, ``rollout.vllm`` and ``model.tiny``.

Like ``fastrl.algorithms.sections`` for the components: an engine, a model source or a task
registered with a section (``fastrl.engines``, ``fastrl.sources``, ``fastrl.tasks``) declares the
section's dataclass, which owns its defaults and its ``check()``. ``fastrl.config`` puts every
registered section under its group (``rollout.<section>``, ``model.<section>``,
``data.<section>``) and calls ``check()`` when the config is read: it raises ``ValueError`` with
a message that starts with the field's name, which the config reports as the dotted key
(``rollout.hf.batch_size = 0 must be >= 1``).

This module imports no torch and nothing of fastrl: the registries and the config read it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The vLLM engine's weight-sync methods (fastrl.rollout.vllm explains each; rollout.vllm.sync_method).
VLLM_SYNC_METHODS: tuple[str, ...] = ("auto", "load_weights", "vllm_reload", "cpu_repack")


@dataclass
class HFEngineConfig:
    """``rollout.hf``: the transformers ``generate`` engine (fastrl.rollout.hf)."""

    batch_size: int = 64  # sequences per generate call

    def check(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size = {self.batch_size} must be >= 1")


@dataclass
class VLLMEngineConfig:
    """``rollout.vllm``: the colocated vLLM engine (fastrl.rollout.vllm)."""

    gpu_memory_utilization: float = 0.5
    # Prompt + response tokens per sequence. None: data.max_prompt_length + rollout.max_new_tokens.
    max_model_len: int | None = None
    enforce_eager: bool = True
    # None: model.dtype; "auto": the checkpoint's own.
    dtype: str | None = None
    # auto = cpu_repack on CPU (re-packs vLLM's oneDNN weight handles after an in-place reload),
    # load_weights on GPU; vllm_reload is vLLM's own in-place reload (stale tied lm_head on CPU).
    sync_method: str = "auto"
    # Sleep (level 1: weights offloaded to CPU, KV cache freed) from the end of each rollout to the
    # weight sync, where vLLM supports it (CUDA); elsewhere one log line says it stays awake.
    sleep: bool = True

    def check(self) -> None:
        if self.sync_method not in VLLM_SYNC_METHODS:
            raise ValueError(f"sync_method = {self.sync_method!r} is not one of {', '.join(VLLM_SYNC_METHODS)}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization = {self.gpu_memory_utilization} must be in (0, 1]")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len = {self.max_model_len} must be >= 2 (or null: "
                             "data.max_prompt_length + rollout.max_new_tokens)")


@dataclass
class TinyModelConfig:
    """``model.tiny``: the tiny mini/smoke-scale model of ``model.source = tiny`` and its SFT warm
    start, both built by ``fastrl.mini`` (its architecture family is ``model.kind``)."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    num_kv_heads: int = 2
    intermediate_size: int = 256
    sft_steps: int = 600
    sft_lr: float = 3e-3
    sft_batch_size: int = 32
    # Generated training-split problems the SFT draws from. 2,000 leaves 12 % of mini-box's validation
    # targets (colour and box) unseen, 4,000 2 % (docs/results.md, "Warm starts of Tables 3 and 8").
    sft_num_train: int = 2000
    # Fraction of SFT examples whose boxed answer is wrong (reasoning intact; an integer off by 1-3, a
    # box with one edge one lattice step off): see fastrl.mini.sft.noisy_route.
    sft_answer_noise: float = 0.0
    # Held-out selection (fastrl.mini.sft.SelectionSettings): every sft_select_every steps, greedy
    # accuracy on sft_select_prompts unseen training-split problems; the best step is kept, and
    # training stops after sft_patience evaluations without a gain (0: never) past sft_min_steps.
    # sft_select_every = 0 keeps the last step (the recipe of run dirs made before it existed).
    sft_select_every: int = 0
    sft_select_prompts: int = 256
    sft_patience: int = 0
    sft_min_steps: int = 0
    # > 0: a converged warm start: training stops at the first evaluation past sft_min_steps with at
    # least this held-out accuracy, and fails if sft_steps end below it (sft_patience is then unused).
    sft_target_accuracy: float = 0.0
    # > 0 (with sft_target_accuracy): after the target is reached, this many more steps with the lr
    # falling linearly to 0, keeping the last; the annealed start's sampled accuracy is a property of
    # the recipe, the first step past the target's is not (SelectionSettings.anneal_steps).
    sft_anneal_steps: int = 0
    # A share of the SFT problems from another generator variant of data.task (fastrl.mini.sft.VariantMix):
    # sft_mix_fraction of them from sft_mix_variant, the rest from default ("" and 0: default only).
    sft_mix_variant: str = ""
    sft_mix_fraction: float = 0.0

    def check(self) -> None:
        for key in ("sft_select_every", "sft_patience", "sft_min_steps", "sft_anneal_steps"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} = {getattr(self, key)} must be >= 0")
        if not 0.0 <= self.sft_target_accuracy <= 1.0:
            raise ValueError(f"sft_target_accuracy = {self.sft_target_accuracy} must lie in [0, 1]")
        if self.sft_target_accuracy > 0 and self.sft_select_every <= 0:
            raise ValueError("sft_target_accuracy needs model.tiny.sft_select_every > 0 (the held-out checks)")
        if self.sft_anneal_steps > 0 and self.sft_target_accuracy <= 0:
            raise ValueError("sft_anneal_steps anneals after the held-out target: set model.tiny.sft_target_accuracy > 0 "
                             "(or sft_anneal_steps=0)")
        if self.sft_num_train < 1:
            raise ValueError(f"sft_num_train = {self.sft_num_train} must be at least 1")
        if not 0.0 <= self.sft_mix_fraction < 1.0:
            raise ValueError(f"sft_mix_fraction = {self.sft_mix_fraction} must lie in [0, 1)")
        if bool(self.sft_mix_variant) != (self.sft_mix_fraction > 0):
            raise ValueError(f"sft_mix_variant = {self.sft_mix_variant!r} and sft_mix_fraction = {self.sft_mix_fraction} "
                             "go together: name a variant and a fraction > 0, or neither")
        if self.sft_select_every > 0 and self.sft_select_prompts < 1:
            raise ValueError(f"sft_select_prompts = {self.sft_select_prompts} must be >= 1 when "
                             f"model.tiny.sft_select_every > 0")


def checked(section: object, key: str) -> object:
    """``section`` after its ``check()``; a failure is one ``ValueError`` naming ``key.<field>``."""
    check = getattr(section, "check", None)
    if check is not None:
        try:
            check()
        except ValueError as err:  # the message starts with the field's name
            raise ValueError(f"{key}.{err}") from None
    return section
