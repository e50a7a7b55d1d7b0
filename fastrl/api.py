"""FastRL from Python: what the ``fastrl`` commands do, as functions.

    import fastrl

    summary = fastrl.train("methods/fastrl.yaml", ["algorithm.mdap.tau=0.6"], scale="mini")
    results = fastrl.evaluate(summary["run_dir"], ["mini-math"], k=4, sampling="paper")

The command line (``fastrl.cli``) is a thin layer over these. Importing this module is cheap: torch,
transformers and the trainer are imported by the functions that need them.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from fastrl.config import ConfigError, FastRLConfig, load_config
from fastrl.logs import duration

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import torch

    from fastrl.data.schema import Record


def default_accelerator() -> None:
    """DeepSpeed on a CPU-only box needs DS_ACCELERATOR=cpu; leave any explicit choice alone.

    Set before DeepSpeed is first imported (``train`` calls it), as DeepSpeed reads it once."""
    if "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"


def _config(config: str | Path | FastRLConfig, overrides: Sequence[str], scale: str | None,
            imports: Sequence[str] = ()) -> FastRLConfig:
    if isinstance(config, FastRLConfig):
        if overrides or scale is not None or imports:
            raise ConfigError("overrides, scale and imports apply to a config file; a FastRLConfig is used as given")
        return config
    return load_config(config, list(overrides), scale=scale, imports=imports)


def load_run_config(config: str | Path, overrides: Sequence[str] = (), scale: str | None = None, *,
                    imports: Sequence[str] = ()) -> FastRLConfig:
    """The config ``train`` would run with these arguments (``fastrl train ... --print-config``)."""
    return _config(config, overrides, scale, imports)


def train(config: str | Path | FastRLConfig, overrides: Sequence[str] = (), scale: str | None = None, *,
          force_new: bool = False, imports: Sequence[str] = ()) -> dict[str, Any]:
    """Train one run: ``config`` is a YAML under ``configs/`` (e.g. ``methods/fastrl.yaml``), a path
    or a loaded ``FastRLConfig``; ``overrides`` are ``dotted.key=value`` strings; ``scale`` is
    ``smoke`` | ``mini`` | ``paper`` (default: the config's, else mini); ``imports`` are modules
    imported before the config is read (plug-in components: ``fastrl train --import``).

    An existing run in ``trainer.run_dir`` resumes when the config is its own (up to the keys of
    fastrl.training.identity.RESUMABLE_KEYS), else it is a RunDirError; a finished run is not
    retrained (the summary then has ``"status": "finished"``). ``force_new=True`` moves the old run
    aside to ``<run_dir>.replaced-<UTC time>/`` and starts over.

    Returns ``Trainer.fit()``'s summary plus ``method`` and ``run_dir``; the run's metrics are in
    ``<run_dir>/metrics.jsonl``, the summary in ``<run_dir>/summary.json`` and its final policy in
    ``<run_dir>/final``."""
    from fastrl.training.lock import check_unlocked

    cfg = _config(config, overrides, scale, imports)
    check_unlocked(Path(cfg.trainer.run_dir))  # a run dir in use fails now, not after torch's import
    if int(os.environ.get("RANK", "0")) == 0:  # once per launch, not once per rank
        for line in describe_config(cfg):
            log.info(line)
    default_accelerator()
    from fastrl.training.pipeline import Trainer

    summary = Trainer(cfg, force_new=force_new).fit()
    summary.update({"method": cfg.method, "run_dir": cfg.trainer.run_dir})
    return summary


def describe_config(cfg: FastRLConfig) -> list[str]:
    """The resolved config's key lines, printed when a run starts (``--print-config``: all of it)."""
    a, t, r, m, d = cfg.algorithm, cfg.trainer, cfg.rollout, cfg.model, cfg.data
    parts = [f"advantage {a.advantage}", f"prompt_selector {a.prompt_selector}", f"group_filter {a.group_filter}",
             f"pruner {a.pruner}", f"rollout_scaler {a.rollout_scaler}", f"policy_loss {a.policy_loss}",
             f"loss_agg {a.loss_agg}", f"kl_coef {a.kl_coef}"]
    for section in (a.pruner, a.rollout_scaler):  # a chosen component's own options
        options = getattr(a, section, None)
        if dataclasses.is_dataclass(options):
            parts.append(f"{section}: " + ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(options).items()))
    return [
        f"method {cfg.method}: " + "; ".join(parts),
        f"model {describe_model(cfg)}; rollout engine {r.engine}, device {m.device}",
        f"scale {cfg.scale}: {t.total_steps} steps x {t.prompts_per_step} prompts x n {r.n}, lr {t.optim.lr}, "
        f"seed {t.seed}; data {', '.join(d.train_files) or d.task} ({d.num_train} train, {d.num_val} val)",
        f"run_dir {t.run_dir} (loggers: {', '.join(t.loggers)}; every key: fastrl train ... --print-config)",
    ]


def describe_model(cfg: FastRLConfig) -> str:
    """``Qwen/Qwen2.5-VL-3B-Instruct (bfloat16)``, or for a source without a path ``tiny qwen2
    (float32; model.tiny: hidden_size 128, ...)``: the source's own section, whichever it is."""
    from fastrl.sources import MODEL_SOURCES

    m = cfg.model
    text = f"{m.path} ({m.dtype}" if m.path else f"{m.source} {m.kind} ({m.dtype}"
    section = MODEL_SOURCES.entry(m.source).section
    options = getattr(m, section) if section else None
    if dataclasses.is_dataclass(options):
        text += f"; model.{section}: " + ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(options).items())
    return text + ")"


def closing_line(summary: Mapping[str, Any], wall_s: float) -> str:
    """What ``fastrl train`` prints last: accuracy, time, and where the policy and metrics are."""
    run = Path(str(summary["run_dir"]))

    def acc(key: str) -> str:
        value = summary.get(key)
        return "n/a" if value is None else f"{value:.3f}"

    if summary.get("status") == "finished":
        return (f"{summary['message']}; val accuracy {acc('acc_before')} -> {acc('acc_after')}; "
                f"policy {run / 'final'}, metrics {run / 'metrics.jsonl'}")

    resumed = summary.get("resumed_from_step")
    return (f"{summary.get('method', 'run')} done: {summary.get('steps')} steps"
            f"{f' (resumed from step {resumed})' if resumed is not None else ''} in {duration(wall_s)} "
            f"(training {duration(float(summary.get('train_wall_s') or 0.0))}); val accuracy {acc('acc_before')} -> "
            f"{acc('acc_after')}; policy {summary.get('final_model')}, metrics {run / 'metrics.jsonl'}, "
            f"summary {run / 'summary.json'}")


def sweep_points(spec: Mapping[str, Sequence[Any]]) -> list[list[str]]:
    """Cartesian product of ``{dotted.key: [values]}`` as lists of ``key=value`` overrides."""
    keys = list(spec)
    return [[f"{k}={v}" for k, v in zip(keys, combo)] for combo in itertools.product(*(spec[k] for k in keys))]


def sweep(sweep_file: str | Path, overrides: Sequence[str] = (), scale: str | None = None, *,
          imports: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Train every point of a sweep file ``{base: CONFIG, sweep: {dotted.key: [values]}}``, each in
    ``<base run_dir>/sweep/<point>``; returns ``[{"point": [...], **train summary}, ...]``.
    ``imports``: plug-in modules imported before each config is read (``fastrl sweep --import``)."""
    from fastrl.config import read_yaml, resolve_config_path

    path = resolve_config_path(sweep_file)
    spec = read_yaml(path) or {}  # a duplicate key or a syntax error: one line with file:line:column
    if set(spec) - {"base", "sweep"} or "base" not in spec or "sweep" not in spec:
        raise ConfigError(f"{path}: a sweep file has exactly the keys 'base' (a config) and 'sweep' (key: [values])")
    base = load_config(spec["base"], list(overrides), scale=scale, imports=imports)
    points = sweep_points(spec["sweep"])
    log.info("sweep %s: %d point(s) of %s (%s scale, %d steps each), runs under %s/sweep/", path.name, len(points),
             spec["base"], base.scale, base.trainer.total_steps, base.trainer.run_dir)
    results = []
    start = time.perf_counter()
    for i, point in enumerate(points, start=1):
        tag = ",".join(p.replace("algorithm.", "") for p in point)
        run_dir = f"{base.trainer.run_dir}/sweep/{tag}"
        log.info("sweep point %d/%d: %s", i, len(points), " ".join(point))
        results.append({"point": point, **train(spec["base"], [*overrides, *point, f"trainer.run_dir={run_dir}"], scale,
                                                imports=imports)})
        elapsed = time.perf_counter() - start
        log.info("sweep point %d/%d done: %s (%s so far, about %s left)", i, len(points),
                 sweep_point_line(results[-1]), duration(elapsed), duration(elapsed / i * (len(points) - i)))
    return results


def sweep_point_line(result: Mapping[str, Any]) -> str:
    """One sweep point's result: ``tau=0.6: val accuracy 0.412 -> 0.475, 20 steps, runs/.../sweep/tau=0.6``."""
    def acc(key: str) -> str:
        value = result.get(key)
        return "n/a" if value is None else f"{value:.3f}"

    state = " (finished before, not retrained)" if result.get("status") == "finished" else ""
    return (f"{' '.join(result['point'])}: val accuracy {acc('acc_before')} -> {acc('acc_after')}, "
            f"{result.get('steps')} steps, {result.get('run_dir')}{state}")


def sft(config: str | Path | FastRLConfig = "methods/grpo.yaml", overrides: Sequence[str] = (),
        scale: str | None = None) -> Path:
    """The config's policy directory: ``model.path`` for ``model.source = path``; for ``tiny`` the
    tiny model's SFT warm start for the task, built by ``fastrl.mini`` (or read from the cache:
    ``$FASTRL_CACHE/sft``, else ``<repository>/.cache/sft``)."""
    from fastrl.training.setup import resolve_policy_path

    return Path(resolve_policy_path(_config(config, overrides, scale)))


# A Hugging Face hub id: namespace/name (letters, digits, '-', '_', '.'), not starting with '.'.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(model: str) -> bool:
    """Whether ``model`` (not an existing path) reads as a hub id such as ``Qwen/Qwen2.5-VL-7B-Instruct``
    rather than a local path: ``namespace/name``, and ``namespace`` is not a local directory
    (``runs/typo`` is a mistyped run directory, not a model on the hub)."""
    return bool(_HUB_ID.fullmatch(model)) and not Path(model.split("/", 1)[0]).is_dir()


def check_model(model: str, *, name: str = "model") -> None:
    """A model that is neither an existing path nor a hub id is a one-line FileNotFoundError up
    front, not an OSError traceback from transformers (``name`` says what gave it)."""
    if not Path(model).exists() and not is_hub_id(model):
        raise FileNotFoundError(f"{name} {model!r}: no such run or model directory (and not a hub id "
                                "namespace/name)")


def resolve_eval_model(model: str | Path, *, name: str = "model") -> str | Path:
    """What ``fastrl eval`` loads for ``model``: a run directory's ``final/``, a model directory,
    or a hub id. A directory that holds no model (a training checkpoint ``ckpt/step_N``, a run
    killed before writing ``final/``) is a one-line ``ValueError`` saying what it is and what to
    pass instead, not transformers' "Unrecognized model"."""
    check_model(str(model), name=name)
    path = Path(model)
    if not path.exists():
        return str(model)  # a hub id
    if (path / "final").is_dir():
        return path / "final"
    if (path / "config.json").is_file() or not path.is_dir():
        return path
    from fastrl.training.checkpoint import CKPT_SUBDIR, COMPLETE_FILE, STATE_FILE

    if (path / STATE_FILE).is_file() or (path / COMPLETE_FILE).is_file() or path.name == CKPT_SUBDIR:
        run = path.parent.parent if path.name != CKPT_SUBDIR else path.parent
        raise ValueError(f"{name} {str(model)!r} is a training checkpoint (optimizer and trainer state), not a model; "
                         f"pass the run directory {str(run)!r} once its run has finished (it evaluates <run>/final), "
                         f"or resume the run to write final/")
    if (path / CKPT_SUBDIR).is_dir() or (path / "metrics.jsonl").is_file() or (path / "config.yaml").is_file():
        raise ValueError(f"{name} {str(model)!r} is a run directory without final/: the run has not finished (killed "
                         "or still running); resume it with `fastrl train <its config> trainer.run_dir=...` to finish "
                         "and export final/, or pass a model directory")
    raise ValueError(f"{name} {str(model)!r} is a directory without config.json: not a run directory nor a Hugging "
                     "Face model directory")


def benchmark_name(spec: str) -> str:
    """The name a ``--benchmark`` spec has in eval.json: NAME of ``NAME=PATH``, else the spec."""
    return spec.split("=", 1)[0] if "=" in spec else spec


def check_benchmark_spec(spec: str) -> None:
    """A ``--benchmark`` that names no task, variant or file is one line (with the valid names),
    before any model loads: ``NAME=PATH`` needs an existing file, ``TASK[:VARIANT]`` a known pair."""
    import difflib

    from fastrl.mini.tasks import OOD_ALIAS, TASKS, VARIANTS

    if "=" in spec:
        name, path = spec.split("=", 1)
        if not name or not path:
            raise ValueError(f"--benchmark {spec!r}: expected NAME=PATH (e.g. math500=data/prepared/math500.parquet)")
        if not Path(path).is_file():
            raise FileNotFoundError(f"--benchmark {spec!r}: no file {path}")
        return
    task, _, variant = spec.partition(":")
    if task not in TASKS:
        close = difflib.get_close_matches(task, TASKS, n=1)
        raise ValueError(f"--benchmark {spec!r}: unknown task {task!r}"
                         f"{f'; did you mean {close[0]!r}?' if close else '.'} Valid: {benchmark_names_help()}; "
                         "or NAME=PATH.parquet|jsonl for a file")
    if variant and variant not in (*VARIANTS[task], "ood"):
        raise ValueError(f"--benchmark {spec!r}: {task} has no variant {variant!r}; valid: "
                         f"{', '.join(VARIANTS[task])}, or ood (= {OOD_ALIAS[task]})")


def benchmark_names_help() -> str:
    """``mini-math[:default|long|swap|ood], ...``: the generated benchmarks ``--benchmark`` takes."""
    from fastrl.mini.tasks import TASKS, VARIANTS

    return ", ".join(f"{t}[:{'|'.join((*VARIANTS[t], 'ood'))}]" for t in TASKS)


def parse_benchmark(spec: str) -> tuple[str, list[Record]]:
    """``name=path.parquet|jsonl`` (canonical records) or ``task[:variant]`` for a generated task."""
    from fastrl.data.loaders import load_records
    from fastrl.mini.tasks import generate_task

    if "=" in spec:
        name, path = spec.split("=", 1)
        records = load_records(path)
        if not records:
            raise ValueError(f"benchmark {name!r}: {path!r} has no records (an empty file)")
        return name, records
    task, _, variant = spec.partition(":")
    return spec, generate_task(task, split="val", num=200, seed=1234, variant=variant or "default")


def checkpoint_dtype(model: str | Path) -> str:
    """The dtype a checkpoint's config records (``dtype``, formerly ``torch_dtype``; float32 when
    absent). Passed to vLLM explicitly: its ``auto`` runs a float32 checkpoint in bfloat16."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model))
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else "float32"


def evaluate(
    model: str | Path, benchmarks: Sequence[str] | Mapping[str, Sequence[Record]], *,
    engine: str = "hf", device: str | torch.device = "auto", dtype: str | None = None, sampling: str = "greedy",
    k: int = 1, reward: str = "math", template: str = "fastrl_math", max_new_tokens: int = 512, batch_size: int = 32,
    max_model_len: int | None = None, gpu_memory_utilization: float = 0.8, min_pixels: int = 262144,
    max_pixels: int = 4194304, seed: int = 0, limit: int = 0, max_prompt_length: int = 2048,
    prompt_length_policy: str = "filter", templates: Mapping[str, str] | None = None,
    rewards: Mapping[str, str] | None = None, imports: Sequence[str] = (),
) -> dict[str, Any]:
    """Evaluate a run directory (its ``final`` policy), a model directory or a hub id.

    ``benchmarks``: specs as ``parse_benchmark`` reads them, or ``{name: records}``. ``sampling``:
    ``greedy`` or ``paper`` (T=0.6, top-p 0.95); ``k`` samples per problem (avg@k, pass@k).
    ``dtype``: default float32 with ``hf``, the checkpoint's own (``checkpoint_dtype``) with ``vllm``. ``device``: where
    the ``hf`` engine runs (auto = CUDA when available). ``limit``: the first N problems of each
    benchmark (0: all). ``max_prompt_length`` / ``prompt_length_policy``: problems whose prompt is
    longer are dropped and counted (``filter``, as training does) or an error (``error``); none
    reaches the engine. ``max_model_len`` (vllm): None sizes it as training does, the longest prompt
    kept plus the response budget (``max_prompt_length + max_new_tokens``). ``templates`` /
    ``rewards``: {benchmark name: template / reward} for benchmarks that do not use ``template`` /
    ``reward``; every benchmark is evaluated with the model loaded once. Returns
    ``fastrl.evaluation.evaluate.evaluate``'s JSON-ready dict (``split_by_benchmark`` splits it).
    ``imports``: modules imported first (a plug-in engine: ``fastrl eval --import``).
    """
    from fastrl.config import check_engine_installed, import_component_module
    from fastrl.data.prompt_limit import PromptLimit
    from fastrl.evaluation.evaluate import evaluate as evaluate_engine
    from fastrl.evaluation.evaluate import validation_sampling
    from fastrl.models.device import resolve_device
    from fastrl.policy import load_policy_kit

    for module in imports:
        import_component_module(module)
    resolved = resolve_eval_model(model)
    check_eval_benchmarks(benchmarks, template, reward, templates or {}, rewards or {})
    check_engine_installed(engine, key="engine")
    spec = eval_policy_spec(resolved, engine=engine, dtype=dtype, batch_size=batch_size, max_model_len=max_model_len,
                            gpu_memory_utilization=gpu_memory_utilization, seed=seed,
                            max_sequence_length=max_prompt_length + max_new_tokens, min_pixels=min_pixels,
                            max_pixels=max_pixels, reward=reward, template=template)
    prompt_limit = PromptLimit(max_prompt_length, prompt_length_policy, length_key="--max-prompt-length",
                               policy_key="--prompt-length-policy")
    named = dict(parse_benchmark(b) for b in benchmarks) if not isinstance(benchmarks, Mapping) else benchmarks
    named = {name: list(records[:limit]) if limit else list(records) for name, records in named.items()}
    template_of = benchmark_choice(named, template, templates or {}, what="template")
    reward_of = benchmark_choice(named, reward, rewards or {}, what="reward")
    check_templates_and_rewards(template_of, reward_of)
    kit = load_policy_kit(spec, resolve_device(device, key="device") if isinstance(device, str) else device)
    try:
        encoders = {name: dataclasses.replace(kit, spec=dataclasses.replace(spec, template=t)).encode
                    for name, t in template_of.items()}
        return evaluate_engine(kit.engine, encoders, named,
                               sampling=validation_sampling(sampling, max_new_tokens=max_new_tokens, seed=seed),
                               k=k, reward_fn_name=reward_of, prompt_limit=prompt_limit)
    finally:
        kit.close()


def check_eval_benchmarks(benchmarks: Sequence[str] | Mapping[str, Sequence[Record]], template: str, reward: str,
                          templates: Mapping[str, str], rewards: Mapping[str, str]) -> None:
    """Benchmark, template and reward names checked before anything is loaded: a misspelt name
    fails here, not after the imports and the model load."""
    if not isinstance(benchmarks, Mapping):
        for b in benchmarks:
            check_benchmark_spec(b)
    names = list(benchmarks) if isinstance(benchmarks, Mapping) else [benchmark_name(b) for b in benchmarks]
    check_templates_and_rewards(benchmark_choice(names, template, templates, what="template"),
                                benchmark_choice(names, reward, rewards, what="reward"))


def eval_policy_spec(resolved: str | Path, *, engine: str, dtype: str | None, batch_size: int,
                     max_model_len: int | None, gpu_memory_utilization: float, **spec: Any) -> Any:
    """``fastrl eval``'s policy spec: the built-in engines' sections from its flags (checked as a
    run config's are), a plug-in engine's from its defaults; ``spec`` the rest of the spec's fields."""
    from fastrl.policy import PolicySpec
    from fastrl.sections import HFEngineConfig, VLLMEngineConfig, checked

    # vLLM's "auto" dtype runs a float32 checkpoint in bfloat16: it is given the checkpoint's own.
    vllm_dtype = dtype or (checkpoint_dtype(resolved) if engine == "vllm" else None)
    sections = {
        "hf": checked(HFEngineConfig(batch_size=batch_size), "rollout.hf"),
        "vllm": checked(VLLMEngineConfig(max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                                         dtype=vllm_dtype, sleep=False), "rollout.vllm"),  # evaluation never sleeps
    }
    return PolicySpec(path=resolved, dtype=dtype or "float32", engine=engine, sections=sections, **spec)


def benchmark_choice(named: Iterable[str], default: str, given: Mapping[str, str], *, what: str) -> dict[str, str]:
    """{benchmark: ``given[benchmark]`` or ``default``}; a name in ``given`` that is no benchmark is an error."""
    unknown = sorted(set(given) - set(named))
    if unknown:
        raise ValueError(f"eval: a {what} is given for {unknown}, which is not among the benchmarks {sorted(named)}")
    return {name: given.get(name, default) for name in named}


def check_templates_and_rewards(templates: Mapping[str, str], rewards: Mapping[str, str]) -> None:
    """Unknown template or reward names fail before the model is loaded."""
    from fastrl.data.templates import TEMPLATES
    from fastrl.rewards import get_reward_fn

    for name, t in templates.items():
        if t not in TEMPLATES:
            raise ValueError(f"eval: benchmark {name!r}: unknown prompt template {t!r}; valid: {sorted(TEMPLATES)}")
    for name, r in rewards.items():
        try:
            get_reward_fn(r)
        except ValueError as exc:
            raise ValueError(f"eval: benchmark {name!r}: {exc}") from None
