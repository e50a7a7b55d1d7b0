"""The policy kit: from a model path and a few settings to everything that samples from, encodes
prompts for and scores a policy — the model, its tokenizer or processor, a rollout engine, the
prompt encoder and the scorer.

Training (``fastrl.training.setup.build_policy``), ``fastrl eval``, the SFT warm start, the Fig. 5
correlation measurement and the rollout benchmark all build their policy here, so the choices made
on the way (the pad id's EOS fallback, which images get resized, the engine's settings) are made
once and cannot drift apart.

    kit = load_policy_kit(PolicySpec(path="runs/x/final", reward="math"), device="cpu")
    responses = kit.engine.generate([kit.encode(r) for r in records], 4, SamplingConfig())
    scores, stats = kit.score([r.text for r in responses], [records[r.prompt_index] for r in responses])
"""

from __future__ import annotations

import logging
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch

from fastrl.data.schema import Record
from fastrl.models.loaders import is_fastrl_tiny_dir, load_policy
from fastrl.models.device import resolve_dtype
from fastrl.models.inputs import PromptInput, PromptTokens
from fastrl.models.processing import PromptEncoder
from fastrl import engines
from fastrl.rollout.base import EngineContext, RolloutEngine, stop_token_ids

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from fastrl.config import FastRLConfig



@dataclass(frozen=True)
class PolicySpec:
    """What the kit needs to build a policy: a slice of a run config, or ``fastrl eval``'s flags.

    ``dtype`` is the weights' dtype (``float32`` | ``bfloat16``). ``sections`` are the engines'
    own sections by name (``rollout.<section>`` of a run config: ``hf``, ``vllm``, a plug-in's),
    each read only by its engine's factory (``fastrl.engines``; ``section(name)``, the registered
    defaults where none is given); ``hf=`` / ``vllm=`` are shorthands for ``sections["hf"]`` /
    ``["vllm"]``. ``max_sequence_length`` is the longest prompt + response a run makes
    (``data.max_prompt_length + rollout.max_new_tokens``), what an engine that sizes its cache
    (vLLM's ``max_model_len`` left unset) sizes it for; None: the engine's own limit.
    ``engine_options`` go to the engine's class as extra keywords (benchmarks and tests, e.g.
    ``cpu_kvcache_space_gib``).
    ``min_pixels`` / ``max_pixels`` resize a VL prompt's images as qwen-vl-utils does; fastrl's
    tiny stand-ins always keep their own image size.
    """

    path: str | Path
    dtype: str = "float32"
    engine: str = "hf"
    seed: int = 0  # the vLLM engine's sampling seed
    sections: Mapping[str, Any] = field(default_factory=dict)
    max_sequence_length: int | None = None
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    min_pixels: int | None = None
    max_pixels: int | None = None
    reward: str = "math"
    template: str = "fastrl_math"
    hf: InitVar[Any] = None
    vllm: InitVar[Any] = None

    def __post_init__(self, hf: Any, vllm: Any) -> None:
        engines.ROLLOUT_ENGINES.entry(self.engine)  # an unknown engine: one line with the valid names
        given = {name: value for name, value in (("hf", hf), ("vllm", vllm)) if value is not None}
        if given:
            object.__setattr__(self, "sections", {**self.sections, **given})

    def section(self, name: str) -> Any:
        """The engine section ``name`` (``rollout.<name>``): the one given, else its registered
        dataclass's defaults."""
        if name in self.sections:
            return self.sections[name]
        return engines.ROLLOUT.sections()[name]()

    @classmethod
    def from_config(cls, cfg: FastRLConfig, path: str | Path, *, seed: int) -> PolicySpec:
        """The spec of a run config's policy at ``path`` (``model.path`` or its SFT warm start);
        ``seed`` seeds the vLLM engine (training passes ``trainer.seed`` + rank)."""
        r = cfg.rollout
        return cls(
            path=path, dtype=cfg.model.dtype, engine=r.engine, seed=seed,
            sections={name: getattr(r, name) for name in engines.ROLLOUT.sections()},
            # The longest prompt kept plus the response budget: the longest sequence a run makes.
            max_sequence_length=cfg.data.max_prompt_length + r.max_new_tokens,
            min_pixels=cfg.model.min_pixels, max_pixels=cfg.model.max_pixels,
            reward=cfg.data.reward, template=cfg.data.template,
        )


@dataclass
class PolicyKit:
    """A loaded policy with its rollout engine, prompt encoder and scorer (see ``load_policy_kit``).

    ``model`` is what the HF engine samples from (in training: the actor's module); ``processor``
    is ``load_policy``'s second value (a tokenizer, or a VL model's processor) and ``tokenizer``
    the text tokenizer inside it.
    """

    spec: PolicySpec
    model: torch.nn.Module
    processor: Any
    engine: RolloutEngine
    encoder: PromptEncoder
    pad_id: int
    eos_ids: list[int]

    @property
    def tokenizer(self) -> Any:
        return text_tokenizer(self.processor)

    @property
    def path(self) -> Path:
        return Path(self.spec.path)

    def encode(self, record: Record, template: str | None = None) -> PromptInput:
        """The record's prompt in ``template`` (None: the spec's), tokenized, with its images."""
        return self.encoder.materialize(self.tokenize(record, template))

    def tokenize(self, record: Record, template: str | None = None) -> PromptTokens:
        """The record's prompt token ids and image references, without pixel tensors (what a
        trainer keeps per record; ``materialize`` builds the rest for a batch). ``template``:
        another template than the spec's (OOD benchmarks)."""
        from fastrl.data.templates import build_prompt_text

        text = build_prompt_text(record, self.spec.template if template is None else template)
        return self.encoder.tokenize(record.uid, text, list(record.images))

    def materialize(self, tokens: PromptTokens) -> PromptInput:
        return self.encoder.materialize(tokens)

    def score(self, texts: Sequence[str], records: Sequence[Record],
              reward: str | None = None, errors: list[str] | None = None,
              ) -> tuple[list[dict[str, float]], dict[str, float]]:
        """``texts[i]`` scored against ``records[i]`` by ``reward`` (None: the spec's): (scores,
        failure stats); ``errors`` collects each failure as one line (``fastrl.rewards.score_batch``)."""
        return score_records(self.spec.reward if reward is None else reward, texts, records, errors)

    def close(self) -> None:
        """Release the rollout engine (vLLM holds its own weights and KV cache)."""
        self.engine.close()


def score_records(reward: str, texts: Sequence[str], records: Sequence[Record],
                  errors: list[str] | None = None) -> tuple[list[dict[str, float]], dict[str, float]]:
    """``texts[i]`` scored against ``records[i]`` by the registered ``reward``: (scores, failure
    stats); ``errors`` collects each failure as one line."""
    from fastrl.rewards import score_batch

    fields = [{"choices": r.choices, "meta": r.meta, "source": r.source, "uid": r.uid} for r in records]
    return score_batch(reward, list(texts), [r.answer for r in records], fields, errors=errors)


def text_tokenizer(processor: Any) -> Any:
    """The text tokenizer of ``load_policy``'s second value (a VL processor carries one inside)."""
    return getattr(processor, "tokenizer", processor)


def pad_token_id(processor: Any) -> int:
    """The pad id, falling back to EOS for tokenizers without one (Llama's)."""
    tok = text_tokenizer(processor)
    return int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)


def stop_tokens_of(path: str | Path, processor: Any) -> list[int]:
    """The stop tokens of both engines: the tokenizer's EOS and ``generation_config.json``'s
    ``eos_token_id`` at ``path`` (a folder or a hub id; none there: the tokenizer's alone)."""
    from transformers import GenerationConfig

    try:
        generation_eos = GenerationConfig.from_pretrained(str(path)).eos_token_id
    except OSError:  # no generation_config.json (fastrl's tiny models)
        generation_eos = None
    return stop_token_ids(text_tokenizer(processor).eos_token_id, generation_eos)


def load_model(spec: PolicySpec) -> tuple[torch.nn.Module, Any]:
    """The policy's weights (on the CPU, in ``spec.dtype``) and its tokenizer or processor."""
    return load_policy(spec.path, dtype=resolve_dtype(spec.dtype))


def build_encoder(spec: PolicySpec, processor: Any) -> PromptEncoder:
    """Paper-scale VL images are resized as qwen-vl-utils does; tiny stand-ins keep their own size."""
    resize = spec.min_pixels is not None and not is_fastrl_tiny_dir(spec.path)
    pixels = {"min_pixels": spec.min_pixels, "max_pixels": spec.max_pixels} if resize else {}
    return PromptEncoder.from_processor(processor, **pixels)


def build_engine(spec: PolicySpec, model: torch.nn.Module, processor: Any) -> RolloutEngine:
    """The spec's rollout engine, from its registered factory (``fastrl.engines``): ``hf`` samples
    from ``model`` itself; ``vllm`` loads its own copy of the weights from ``spec.path``."""
    context = EngineContext(model=model, tokenizer=text_tokenizer(processor), pad_token_id=pad_token_id(processor),
                            stop_token_ids=stop_tokens_of(spec.path, processor))
    return engines.build_engine(spec, context)


def assemble_policy_kit(spec: PolicySpec, model: torch.nn.Module, processor: Any) -> PolicyKit:
    """The kit around an already loaded and placed ``model`` (training wraps it for DeepSpeed
    first and passes the wrapped module, so the HF engine samples from the weights being trained)."""
    engine = build_engine(spec, model, processor)
    return PolicyKit(spec=spec, model=model, processor=processor, engine=engine,
                     encoder=build_encoder(spec, processor), pad_id=pad_token_id(processor),
                     eos_ids=stop_tokens_of(spec.path, processor))


def load_policy_kit(spec: PolicySpec, device: torch.device | str = "cpu") -> PolicyKit:
    """Load ``spec.path`` and build its kit, the model in eval mode; it moves to ``device`` when the
    engine samples from it (``hf``); an engine holding its own copy (``vllm``) leaves it on the CPU."""
    model, processor = load_model(spec)
    kit = assemble_policy_kit(spec, model.eval(), processor)
    if kit.engine.shares_trainer_weights:
        kit.model.to(device)  # in place: the engine holds this very module
    return kit
