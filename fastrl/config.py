"""The run config loader: the schema's dataclasses (``fastrl.schema``, re-exported here) merged
with YAML files and dotted CLI overrides.

Composition order (later wins)::

    configs/base/default.yaml -> configs/scales/<scale>.yaml -> the YAML given on the command line
    (which may list more files under ``defaults:``, e.g. a method) -> ``dotted.key=value`` overrides

Every key must exist in the schema: an unknown key is a ``ConfigError`` that suggests the nearest
valid key and lists the keys of its section; a value of the wrong type names the key. Modules
named by ``--import`` / ``imports:`` are imported first, so the entries they register (and their
sections) are in the schema. This module imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
from pathlib import Path
from typing import Any, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fastrl import engines, migrations
# The schema's names are the config's too (``from fastrl.config import FastRLConfig`` stays valid).
from fastrl.schema import (LOGGERS, MODEL_DEVICES, MODEL_DTYPES, MODEL_KINDS, MODEL_SOURCES, PROMPT_LENGTH_POLICIES,
                           ROLLOUT_ENGINES, VLLM_SYNC_METHODS, AlgorithmConfig, ConfigError, DataConfig, FastRLConfig,
                           HFEngineConfig, ModelConfig, OptimConfig, RolloutConfig, TinyModelConfig, TrainerConfig,
                           VLLMEngineConfig, check_choice, check_precision, schema_of)

__all__ = [
    "AlgorithmConfig", "ConfigError", "DataConfig", "FastRLConfig", "HFEngineConfig", "LOGGERS", "MODEL_DEVICES",
    "MODEL_DTYPES", "MODEL_KINDS", "MODEL_SOURCES", "ModelConfig", "OptimConfig", "PROMPT_LENGTH_POLICIES",
    "ROLLOUT_ENGINES", "RolloutConfig", "TinyModelConfig", "TrainerConfig", "VLLMEngineConfig", "VLLM_SYNC_METHODS",
    "check_choice", "check_engine_installed", "check_loggers_installed", "check_precision", "import_component_module",
    "load_config", "read_yaml", "resolve_config_path", "save_config", "schema_of", "to_dict", "unknown_key_message",
    "valid_keys",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_ROOT = REPO_ROOT / "configs"


def check_engine_installed(engine: str, key: str = "rollout.engine") -> None:
    """An engine whose package does not import is a one-line ``ConfigError`` before any model is
    built (not an ImportError traceback once the policy is loaded). Checked when a run or an
    evaluation starts, not when a config is read: a paper config stays readable on a CPU box."""
    import importlib.util

    package, install = engines.ENGINE_PACKAGES.get(engine, (None, ""))
    if package is not None and importlib.util.find_spec(package) is None:
        raise ConfigError(f"{key} = {engine} but the {package} package is not installed here; install it "
                          f"({install}) or set {key}=hf")


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
