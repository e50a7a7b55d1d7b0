"""The run config's schema: typed dataclasses, their defaults and their checks.

``fastrl.config`` reads YAML files and dotted overrides into these (and re-exports every name
here). Four sections are assembled from registries (:func:`schema_of`): besides its own keys,
each has one subsection per section its registries' entries declare, typed by that entry's
dataclass (which owns the defaults and ``check()``)::

    algorithm.<section>   components   fastrl.algorithms.registry (algorithm.mdap, algorithm.ars, ...)
    rollout.<section>     engines      fastrl.engines             (rollout.hf, rollout.vllm)
    model.<section>       sources      fastrl.sources             (model.tiny)
    data.<section>        tasks        fastrl.tasks               (none built in)

so a plug-in imported before the config is read (``--import MODULE``, ``imports:``) brings its
own keys. Defaults live here and in those dataclasses only. This module imports neither torch
nor transformers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from fastrl import engines, sources, tasks
from fastrl.algorithms import registry
from fastrl.algorithms.loss_modes import AGG_MODES, CONSTANT_NORM_MODE
from fastrl.algorithms.registry import Registry, SectionGroup
from fastrl.sections import HFEngineConfig, TinyModelConfig, VLLMEngineConfig, checked

__all__ = [
    "AlgorithmConfig", "ConfigError", "DataConfig", "FastRLConfig", "HFEngineConfig", "LOGGERS", "MODEL_DEVICES",
    "MODEL_DTYPES", "MODEL_KINDS", "MODEL_SOURCES", "ModelConfig", "OptimConfig", "PROMPT_LENGTH_POLICIES",
    "ROLLOUT_ENGINES", "RolloutConfig", "TinyModelConfig", "TrainerConfig", "VLLMEngineConfig", "VLLM_SYNC_METHODS",
    "check_choice", "check_precision", "schema_of",
]


class ConfigError(ValueError):
    """A config file or override that does not fit the schema."""


# The one list of each model / engine choice (torch-free here; fastrl.mini.builders, fastrl.models.device,
# fastrl.policy and the CLI read them).
MODEL_SOURCES: tuple[str, ...] = tuple(sources.MODEL_SOURCES)  # the built-in names of fastrl.sources' registry
MODEL_KINDS: tuple[str, ...] = ("qwen2", "llama", "qwen2_5_vl")  # tiny models; a real path decides by itself
MODEL_DTYPES: tuple[str, ...] = ("float32", "bfloat16")
MODEL_DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
ROLLOUT_ENGINES: tuple[str, ...] = tuple(engines.ROLLOUT_ENGINES)  # the built-in names of fastrl.engines' registry
VLLM_SYNC_METHODS: tuple[str, ...] = engines.VLLM_SYNC_METHODS
# What happens to a prompt over data.max_prompt_length: dropped (and counted in the log) or an error.
PROMPT_LENGTH_POLICIES: tuple[str, ...] = ("filter", "error")


class Sectioned:
    """A config section whose subsections are the registered sections of its group
    (``GROUP``: algorithm, rollout, model, data). :func:`schema_of` builds the dataclass with one
    field per section; ``check_sections`` runs each section's ``check()``."""

    GROUP: ClassVar[SectionGroup]

    def check_choice(self, key: str, registry_: Registry) -> None:
        """``<group>.<key>`` names an entry of ``registry_`` (plug-ins included)."""
        check_choice(f"{self.GROUP.key}.{key}", getattr(self, key), tuple(registry_), _PLUGIN_HINT)

    def check_sections(self) -> None:
        for name in self.GROUP.sections():
            try:
                checked(getattr(self, name, None), f"{self.GROUP.key}.{name}")
            except ValueError as err:
                raise ConfigError(str(err)) from None

    def __reduce__(self) -> tuple[Any, ...]:
        # The schema class is built at run time: pickle (and deepcopy) rebuild it by its sections.
        base = next(c for c in type(self).__mro__ if "GROUP" in vars(c))
        return _from_fields, (base, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})  # type: ignore[arg-type]

    if TYPE_CHECKING:  # the sections are fields of schema_of()'s subclass
        def __getattr__(self, section: str) -> Any: ...


@dataclass
class ModelConfig(Sectioned):
    """``model``: where the policy comes from (``model.source``, a name of ``fastrl.sources``) and
    how it is loaded. A source's own settings are its section (``model.tiny``)."""

    GROUP = sources.MODEL
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
    # model.tiny (TinyModelConfig) and a plug-in source's section: fields of schema_of(ModelConfig).

    def __post_init__(self) -> None:
        self.check_choice("source", sources.MODEL_SOURCES)
        check_choice("model.kind", self.kind, MODEL_KINDS)
        check_choice("model.dtype", self.dtype, MODEL_DTYPES)
        check_choice("model.device", self.device, MODEL_DEVICES)
        self.check_sections()
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ConfigError(f"model.min_pixels = {self.min_pixels} and model.max_pixels = {self.max_pixels}: "
                              "need 0 < min_pixels <= max_pixels")


@dataclass
class DataConfig(Sectioned):
    """``data``: the task (``data.task``, a name of ``fastrl.tasks``: a generated task, ``files``,
    or a plug-in's, whose own settings are its section ``data.<section>``), prompts and reward."""

    GROUP = tasks.DATA
    # A generated task name (mini-math, mini-geo, mini-box) or "files" to read train_files/val_files.
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
        self.check_choice("task", tasks.TASKS)
        check_choice("data.prompt_length_policy", self.prompt_length_policy, PROMPT_LENGTH_POLICIES)
        if not 0.0 <= self.reward_max_failure_share <= 1.0:
            raise ConfigError(f"data.reward_max_failure_share = {self.reward_max_failure_share} must lie in [0, 1] "
                              "(1: a failing reward never stops the run)")
        if self.reward_max_failing_steps < 1:
            raise ConfigError(f"data.reward_max_failing_steps = {self.reward_max_failing_steps} must be >= 1")
        if self.max_prompt_length < 1:
            raise ConfigError(f"data.max_prompt_length = {self.max_prompt_length} must be >= 1 (tokens)")
        self.check_sections()


@dataclass
class RolloutConfig(Sectioned):
    """``rollout``: sampling settings of every engine; each engine's own settings are its section
    (``rollout.hf``, ``rollout.vllm``, a plug-in's ``rollout.<section>``), read by its factory only."""

    GROUP = engines.ROLLOUT
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
    # Weight-sync check (engines that hold their own copy of the weights, i.e. vllm): the largest
    # |engine logp - trainer logp| on any token, and (None: not checked) on the mean over tokens.
    # The float32 default is strict; a bf16 engine needs both (configs/scales/paper.yaml says why).
    logprob_check_tol: float = 1e-2
    logprob_check_mean_tol: float | None = None
    logprob_check_samples: int = 4
    # rollout.hf, rollout.vllm and a plug-in engine's section: fields of schema_of(RolloutConfig).

    def __post_init__(self) -> None:
        self.check_choice("engine", engines.ROLLOUT_ENGINES)  # plug-ins included
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
        if not self.logprob_check_tol > 0 or not (self.logprob_check_mean_tol is None or self.logprob_check_mean_tol > 0):
            raise ConfigError(f"rollout.logprob_check_tol = {self.logprob_check_tol}, rollout.logprob_check_mean_tol = "
                              f"{self.logprob_check_mean_tol}: each must be > 0 (the mean's may be null: not checked)")
        self.check_sections()

    @property
    def val_n_at_ends(self) -> int:
        """Samples per problem before and after training (``val_n_final``, else ``val_n``)."""
        return self.val_n_final or self.val_n


@dataclass
class AlgorithmConfig(Sectioned):
    """``algorithm``: the method's component names and loss settings. The components' own sections
    (``algorithm.mdap``, ``algorithm.ars``, a plug-in's ``algorithm.<section>``) are fields of
    ``schema_of(AlgorithmConfig)``, the subclass built from the sections registered in
    fastrl.algorithms.registry; ``FastRLConfig().algorithm`` is one."""

    GROUP = registry.ALGORITHM

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

    def __post_init__(self) -> None:
        check_choice("algorithm.advantage", self.advantage, tuple(registry.ADVANTAGE_ESTIMATORS))
        self.check_choice("prompt_selector", registry.PROMPT_SELECTORS)
        self.check_choice("group_filter", registry.GROUP_FILTERS)
        self.check_choice("pruner", registry.PRUNERS)
        self.check_choice("rollout_scaler", registry.ROLLOUT_SCALERS)
        check_choice("algorithm.policy_loss", self.policy_loss, tuple(registry.POLICY_LOSSES))
        check_choice("algorithm.loss_agg", self.loss_agg, AGG_MODES)
        if self.loss_norm_constant is not None:
            if not self.loss_norm_constant > 0:
                raise ConfigError(f"algorithm.loss_norm_constant = {self.loss_norm_constant} must be > 0")
            if self.loss_agg != CONSTANT_NORM_MODE:
                raise ConfigError(
                    f"algorithm.loss_norm_constant = {self.loss_norm_constant} applies only to "
                    f"algorithm.loss_agg = {CONSTANT_NORM_MODE} (now {self.loss_agg}); set it to null"
                )
        check_choice("algorithm.kl_kind", self.kl_kind, ("k1", "k2", "k3"))
        if self.kl_coef < 0:
            raise ConfigError(f"algorithm.kl_coef = {self.kl_coef} must be >= 0")
        self.check_sections()


_PLUGIN_HINT = "(a plug-in is registered by importing its module: fastrl train --import MODULE)"
_SCHEMAS: dict[tuple[type, tuple[tuple[str, type], ...]], type] = {}


def schema_of(base: type[Sectioned]) -> type:
    """``base`` (AlgorithmConfig, RolloutConfig, ModelConfig, DataConfig) with one field per
    section its group's registries declare (each defaulting to its dataclass's defaults), built
    once per set of sections: after a plug-in registers a section, the next config read accepts it."""
    known = tuple(base.GROUP.sections().items())
    if (base, known) not in _SCHEMAS:
        fields = [(name, cls, field(default_factory=cls)) for name, cls in known]
        schema = dataclasses.make_dataclass(base.__name__, fields, bases=(base,))
        schema.__module__, schema.__doc__ = __name__, base.__doc__
        _SCHEMAS[base, known] = schema
    return _SCHEMAS[base, known]


def _from_fields(base: type[Sectioned], values: dict[str, Any]) -> Sectioned:
    config: Sectioned = schema_of(base)(**values)
    return config


for _base in (AlgorithmConfig, RolloutConfig, ModelConfig, DataConfig):  # the names sections may not take
    if tuple(f.name for f in dataclasses.fields(_base)) != _base.GROUP.reserved:
        raise RuntimeError(f"the {_base.GROUP.key} group's reserved keys must list {_base.__name__}'s fields")


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
        check_choice("trainer.update_mode", self.update_mode, ("fixed_updates", "fixed_minibatch"))
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
    model: ModelConfig = field(default_factory=lambda: schema_of(ModelConfig)())
    data: DataConfig = field(default_factory=lambda: schema_of(DataConfig)())
    rollout: RolloutConfig = field(default_factory=lambda: schema_of(RolloutConfig)())
    algorithm: AlgorithmConfig = field(default_factory=lambda: schema_of(AlgorithmConfig)())
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # Modules imported before the config is read, so that their components (and sections) are
    # registered: a config file lists the modules its plug-in components live in; `fastrl train
    # --import MODULE` adds to the list. Left out of config.yaml while empty (to_dict).
    imports: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.check_chosen_entries()
        check_precision(self.model, self.trainer)
        _check_mini_batch(self.trainer, self.rollout)


    def check_chosen_entries(self) -> None:
        """The ``check`` of the chosen model source, task and engine (``Entry.check``), which may
        read the whole config (the tiny source trains its SFT on a generated task only)."""
        chosen = ((sources.MODEL_SOURCES, self.model.source), (tasks.TASKS, self.data.task),
                  (engines.ROLLOUT_ENGINES, self.rollout.engine))
        for table, name in chosen:
            check = table.entry(name).check
            try:
                if check is not None:
                    check(self)
            except ValueError as err:
                raise ConfigError(str(err)) from None


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


LOGGERS = ("jsonl", "tensorboard", "wandb")


def check_choice(key: str, value: str, choices: Sequence[str], hint: str = "") -> None:
    if value not in choices:
        raise ConfigError(f"{key} = {value!r} is not one of {', '.join(choices)}" + (f" {hint}" if hint else ""))

