"""What a target runs: table configs (configs/tables/<target>.yaml) -> a list of ``RunSpec``.

A table config names *slots* (the paper's datasets and models, ``configs/tables/slots.yaml``) and
*variants* (a method config plus overrides; a ``sweep`` entry stands for one variant per value, see
``sweep_variants``). A run is one (setting, variant, seed) at one scale;
its overrides are composed in a fixed order so that two tables naming the same slots and variant
build the identical command, and share one run directory (``shared_with``):

    slot dataset overrides -> dataset budget (per scale) -> slot model overrides
    -> the setting's tuned learning rate (slots.yaml ``lr``; ``lr_overrides``)
    -> table extra_overrides (per scale) -> the stand-in's MDAP tau, for runs that prune with MDAP
    (slots.yaml ``mdap_tau``; ``tau_overrides``) -> variant overrides -> paper_variant_overrides (paper)
    -> trainer.seed / trainer.run_dir -> the user's extra overrides (OVERRIDES=...)

Run directories: ``<runs_root>/<group>/<scale>/<dataset>-<model>/<variant>/seed<k>/`` where
``group`` is the target, or the target named by ``shared_with``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from fastrl.config import CONFIG_ROOT

TABLES_DIR = CONFIG_ROOT / "tables"
SLOTS_FILE = TABLES_DIR / "slots.yaml"
SCALES: tuple[str, ...] = ("smoke", "mini", "paper")


class SpecError(ValueError):
    """A table config or slot that cannot be turned into runs; the message names file and key."""


@dataclass(frozen=True)
class OODBenchmark:
    """A paper-scale out-of-domain benchmark, evaluated with ``fastrl eval`` after training."""

    name: str
    file: str
    template: str
    reward: str


@dataclass(frozen=True)
class RunSpec:
    """One training run: ``fastrl train <config> <overrides...> --scale <scale>``."""

    target: str  # the target that asked for it
    group: str  # the target whose folder holds the run (== target unless shared_with)
    scale: str
    dataset: str  # slot names
    model: str
    variant: str
    seed: int
    config: str  # a method or table config, relative to configs/
    overrides: tuple[str, ...]
    run_dir: Path
    labels: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    ood: tuple[OODBenchmark, ...] = ()
    gpus: int = 1
    requires_task: str | None = None  # a generated task this run needs (None: none)

    @property
    def setting(self) -> str:
        return f"{self.dataset}-{self.model}"

    def identity(self) -> dict[str, Any]:
        """What makes two specs the same run (written to <run_dir>/run_spec.json)."""
        return {"config": self.config, "overrides": list(self.overrides), "scale": self.scale}

    def identity_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:12]


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SpecError(f"{path}: file not found")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: top level must be a mapping")
    return data


def load_slots(path: Path = SLOTS_FILE) -> dict[str, Any]:
    data = _read_yaml(path)
    for key in ("datasets", "models", "seeds"):
        if key not in data:
            raise SpecError(f"{path}: missing top-level key {key!r}")
    return data


def table_config_path(target: str) -> Path:
    return TABLES_DIR / f"{target}.yaml"


def load_table(target: str) -> dict[str, Any]:
    path = table_config_path(target)
    data = _read_yaml(path)
    for key in ("target", "title", "settings"):
        if key not in data:
            raise SpecError(f"{path}: missing key {key!r}")
    if data["target"] != target:
        raise SpecError(f"{path}: target is {data['target']!r}, expected {target!r}")
    return data


# Keys of a `sweep` entry in a table's variants.
_SWEEP_KEYS = frozenset({"file", "key", "values", "base", "name", "label", "overrides"})


def sweep_variants(entry: dict[str, Any], where: Path) -> list[dict[str, Any]]:
    """One variant per value of a sweep entry (``variants: [..., {sweep: {...}}, ...]``)::

        sweep: {file: tables/tau_sweep.yaml, name: "tau{value}", label: tau}
        sweep: {key: algorithm.mdap.tau, values: [0.2, 0.4], base: methods/fastrl.yaml, name: "tau{value}"}

    ``file``: a ``fastrl sweep`` file (``base`` + one ``key: [values]``, relative to configs/), so
    the table and ``fastrl sweep`` read the same points; else ``key``, ``values`` and ``base``
    inline. Each point runs ``base`` with the override ``key=value`` after ``overrides``. ``name`` (with
    ``{value}``) names the variant and its run directory; ``label`` puts ``{label: value}`` in its labels.
    """
    unknown = set(entry) - _SWEEP_KEYS
    if unknown:
        raise SpecError(f"{where}: sweep entry has unknown keys {sorted(unknown)}; valid: {sorted(_SWEEP_KEYS)}")
    if "name" not in entry or "{value}" not in str(entry["name"]):
        raise SpecError(f"{where}: a sweep entry needs `name` with {{value}} in it (e.g. 'tau{{value}}'): {entry}")
    if "file" in entry:
        if {"key", "values", "base"} & set(entry):
            raise SpecError(f"{where}: a sweep entry takes either `file` or `key`/`values`/`base`, not both")
        sweep_file = _read_yaml(CONFIG_ROOT / entry["file"])
        points = sweep_file.get("sweep") or {}
        if len(points) != 1 or "base" not in sweep_file:
            raise SpecError(f"{CONFIG_ROOT / entry['file']}: a table sweeps one key: expected `base` and `sweep` "
                            f"with exactly one `key: [values]`, found {sweep_file}")
        base = sweep_file["base"]
        ((key, values),) = points.items()
    else:
        missing = [k for k in ("key", "values", "base") if k not in entry]
        if missing:
            raise SpecError(f"{where}: sweep entry lacks {missing}: {entry}")
        key, values, base = entry["key"], entry["values"], entry["base"]
    if not isinstance(values, list) or not values:
        raise SpecError(f"{where}: sweep of {key}: values must be a non-empty list, got {values!r}")
    out: list[dict[str, Any]] = []
    for value in values:
        variant: dict[str, Any] = {"name": str(entry["name"]).format(value=value), "config": base,
                                   "overrides": [*entry.get("overrides", []), f"{key}={value}"]}
        if "label" in entry:
            variant["labels"] = {entry["label"]: value}
        out.append(variant)
    return out


def table_variants(target: str, table: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The table's variants in order, each ``sweep`` entry replaced by its points."""
    table = table if table is not None else load_table(target)
    out: list[dict[str, Any]] = []
    for v in table.get("variants") or []:
        if "sweep" not in v:
            out.append(v)
        elif len(v) != 1:
            raise SpecError(f"{table_config_path(target)}: a sweep entry holds only `sweep`: {v}")
        else:
            out += sweep_variants(v["sweep"], table_config_path(target))
    return out


def default_seeds(scale: str, slots: dict[str, Any] | None = None) -> list[int]:
    slots = slots or load_slots()
    if scale not in slots["seeds"]:
        raise SpecError(f"{SLOTS_FILE}: seeds has no entry for scale {scale!r}")
    return [int(s) for s in slots["seeds"][scale]]


def parse_seeds(text: str | None, scale: str) -> list[int]:
    """``"1 2 3"`` or ``"1,2,3"``; empty/None -> the scale's default seeds."""
    if text is None or not text.strip():
        return default_seeds(scale)
    try:
        seeds = [int(tok) for tok in text.replace(",", " ").split()]
    except ValueError:
        raise SpecError(f"SEEDS={text!r}: expected integers separated by spaces or commas") from None
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"SEEDS={text!r}: a seed is repeated")
    return seeds


def slot_entry(slots: dict[str, Any], kind: str, name: str, scale: str) -> dict[str, Any]:
    """``slots[kind][name][scale]`` with a clear error for a missing slot or scale."""
    table = slots[kind]
    if name not in table:
        raise SpecError(f"{SLOTS_FILE}: no {kind[:-1]} slot {name!r}; valid: {sorted(table)}")
    if scale not in table[name]:
        raise SpecError(f"{SLOTS_FILE}: {kind}.{name} has no entry for scale {scale!r}")
    return table[name][scale]


def paper_total_steps(train_files: Sequence[str], epochs: int, prompts_per_step: int) -> int:
    """``epochs x floor(rows / prompts_per_step)`` from the prepared parquet files' row counts: the
    released trainer runs ``len(train_dataloader) x total_epochs`` steps, and its train loader drops
    the last partial rollout batch of every epoch (``drop_last=True``, verl/trainer/data_loader.py
    at the release), so Geometry3K's 2,101 rows give 8 steps per epoch, 200 in 25 epochs."""
    import pyarrow.parquet as pq

    rows = 0
    for f in train_files:
        p = Path(f)
        if not p.is_file():
            raise SpecError(f"paper scale needs {f} (run the data_prep script for it; see data_prep/README.md)")
        rows += pq.ParquetFile(p).metadata.num_rows
    if rows < prompts_per_step:
        raise SpecError(f"paper scale: {list(train_files)} hold {rows} rows, less than one rollout batch of "
                        f"{prompts_per_step} prompts (trainer.prompts_per_step)")
    return epochs * (rows // prompts_per_step)


LR_KEY = "trainer.optim.lr"


@functools.lru_cache(maxsize=None)
def configured_lr(config: str | None, scale: str, lr_override: str | None = None) -> float:
    """``trainer.optim.lr`` as fastrl.config resolves it: defaults, the scale, ``config`` (a method
    file, relative to configs/; None: none) and ``lr_override`` (``trainer.optim.lr=<v>``)."""
    from fastrl.config import load_config

    return float(load_config(config, [lr_override] if lr_override else [], scale=scale).trainer.optim.lr)


def setting_lr(slots: dict[str, Any], scale: str, dataset: str, model: str) -> float | None:
    """GRPO's tuned rate for a setting at a scale (slots.yaml ``lr.<scale>.<dataset>-<model>``);
    None where none is committed (the scale's own rate applies)."""
    return _slots_number(slots, ("lr", scale, f"{dataset}-{model}"), lambda r: r > 0 and not math.isinf(r),
                         "a positive number")


def _slots_number(slots: dict[str, Any], path: tuple[str, str, str], ok: Callable[[float], bool],
                  what: str) -> float | None:
    """The number at ``slots[a][b][c]`` (None where absent); one line naming the key if not ``ok``."""
    block, scale, name = path
    value = ((slots.get(block) or {}).get(scale) or {}).get(name)
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not ok(number):
        raise SpecError(f"{SLOTS_FILE}: {block}.{scale}.{name} = {value!r} must be {what}")
    return number


def lr_overrides(slots: dict[str, Any], scale: str, dataset: str, model: str) -> list[str]:
    """``[trainer.optim.lr=<tuned>]`` where the setting's tuned rate differs from the scale's own,
    else ``[]``: a run at the scale's rate keeps the command it had before tuned rates existed, so its
    finished run directory and committed run metadata stay its own."""
    rate = setting_lr(slots, scale, dataset, model)
    if rate is None or rate == configured_lr(None, scale):
        return []
    return [f"{LR_KEY}={rate!r}"]


TAU_KEY = "algorithm.mdap.tau"


@functools.lru_cache(maxsize=None)
def configured_mdap(config: str, scale: str, overrides: tuple[str, ...] = ()) -> tuple[str, float]:
    """``(algorithm.pruner, algorithm.mdap.tau)`` as fastrl.config resolves ``config`` at ``scale``
    with ``overrides`` (a variant's own)."""
    from fastrl.config import load_config

    cfg = load_config(config, list(overrides), scale=scale)
    return str(cfg.algorithm.pruner), float(cfg.algorithm.mdap.tau)


def setting_tau(slots: dict[str, Any], scale: str, dataset: str) -> float | None:
    """The stand-in's MDAP tau for a dataset at a scale (slots.yaml ``mdap_tau.<scale>.<dataset>``);
    None where none is set (the method's own tau applies)."""
    return _slots_number(slots, ("mdap_tau", scale, dataset), lambda t: 0.0 <= t <= 1.0, "a number in [0, 1]")


def tau_overrides(slots: dict[str, Any], scale: str, dataset: str, config: str,
                  variant_overrides: Sequence[str] = ()) -> list[str]:
    """``[algorithm.mdap.tau=<stand-in>]`` for a run whose pruner (after its variant's overrides) is
    MDAP, where the dataset's stand-in tau differs from the method's; else ``[]``. A variant that sets
    tau itself (a tau sweep) still wins: its overrides come after this one."""
    tau = setting_tau(slots, scale, dataset)
    if tau is None:
        return []
    pruner, own = configured_mdap(config, scale, tuple(variant_overrides))
    if pruner != "mdap" or own == tau:
        return []
    return [f"{TAU_KEY}={tau!r}"]


@functools.lru_cache(maxsize=None)
def configured_scaler(config: str, scale: str, overrides: tuple[str, ...] = ()) -> str:
    """``algorithm.rollout_scaler`` as fastrl.config resolves ``config`` at ``scale`` with ``overrides``."""
    from fastrl.config import load_config

    return str(load_config(config, list(overrides), scale=scale).algorithm.rollout_scaler)


def spec_scaler(spec: RunSpec) -> str:
    """The rollout scaler a run adapts n with (``fixed``: none)."""
    return configured_scaler(spec.config, spec.scale, tuple(o for o in spec.overrides
                                                            if o.split("=", 1)[0] == "algorithm.rollout_scaler"))


def spec_tau(spec: RunSpec) -> float | None:
    """The MDAP tau a run prunes at (its last ``algorithm.mdap.tau`` override, else its config's);
    None for a run that does not prune with MDAP."""
    pruner, own = configured_mdap(spec.config, spec.scale, tuple(o for o in spec.overrides
                                                                  if o.split("=", 1)[0] == "algorithm.pruner"))
    if pruner != "mdap":
        return None
    value = _override_value(spec.overrides, TAU_KEY)
    return float(value) if value is not None else own


def spec_lr(spec: RunSpec) -> float:
    """The learning rate a run trains at: its last ``trainer.optim.lr`` override, else its config's."""
    return configured_lr(spec.config, spec.scale, next((o for o in reversed(spec.overrides)
                                                        if o.split("=", 1)[0] == LR_KEY), None))


def _override_value(overrides: Sequence[str], key: str) -> str | None:
    vals = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return vals[-1] if vals else None


def _table_seeds(table: dict[str, Any], scale: str, seeds: Sequence[int]) -> list[int]:
    """The seeds a table runs: none at a scale it is not measured at (``scales``; the lr sweep's
    rates are mini's), else the first ``max_seeds`` of those asked (a sweep needs fewer seeds)."""
    if table.get("scales") is not None and scale not in table["scales"]:
        return []
    return list(seeds)[: int(table["max_seeds"])] if table.get("max_seeds") is not None else list(seeds)


def build_runs(
    target: str,
    scale: str,
    seeds: Sequence[int],
    runs_root: Path,
    *,
    extra_overrides: Sequence[str] = (),
    resolve_paper_steps: bool = False,
) -> list[RunSpec]:
    """Every run of ``target`` at ``scale`` for ``seeds``.

    ``resolve_paper_steps``: at paper scale, turn each dataset's ``budget_epochs`` into
    ``trainer.total_steps`` by reading the prepared training files (they must exist; see
    ``paper_total_steps``).
    """
    if scale not in SCALES:
        raise SpecError(f"scale {scale!r}: choose one of {SCALES}")
    slots = load_slots()
    table = load_table(target)
    seeds = _table_seeds(table, scale, seeds)
    variants = table_variants(target, table)
    if not variants:
        raise SpecError(f"{table_config_path(target)}: no variants")
    specs: list[RunSpec] = []
    for setting in table["settings"]:
        ds_name, model_name = setting["dataset"], setting["model"]
        ds = slot_entry(slots, "datasets", ds_name, scale)
        md = slot_entry(slots, "models", model_name, scale)
        # GRPO's tuned rate, for every method (`tuned_lr: false`: a sweep of the rate itself)
        tuned = lr_overrides(slots, scale, ds_name, model_name) if table.get("tuned_lr", True) else []
        base = [*ds.get("overrides", []), *ds.get("budget", []), *md.get("overrides", []), *tuned,
                *(table.get("extra_overrides", {}) or {}).get(scale, [])]
        ood = tuple(OODBenchmark(**b) for b in ds.get("ood", []) or [])
        for v in variants:
            for key in ("name", "config"):
                if key not in v:
                    raise SpecError(f"{table_config_path(target)}: a variant lacks {key!r}: {v}")
            group = v.get("shared_with", target)
            ov = [*base, *tau_overrides(slots, scale, ds_name, v["config"], v.get("overrides", [])),
                  *v.get("overrides", [])]
            if scale == "paper":
                ov += (table.get("paper_variant_overrides") or {}).get(v["name"], [])
                if resolve_paper_steps and "budget_epochs" in ds:
                    files = yaml.safe_load(_override_value(ov, "data.train_files") or "[]")
                    pps = int(_override_value(ov, "trainer.prompts_per_step") or 256)
                    ov.append(f"trainer.total_steps={paper_total_steps(files, int(ds['budget_epochs']), pps)}")
            for seed in seeds:
                run_dir = runs_root / group / scale / f"{ds_name}-{model_name}" / v["name"] / f"seed{seed}"
                full = (*ov, f"trainer.seed={seed}", f"trainer.run_dir={run_dir}", *extra_overrides)
                specs.append(RunSpec(
                    target=target, group=group, scale=scale, dataset=ds_name, model=model_name,
                    variant=v["name"], seed=int(seed), config=v["config"], overrides=full, run_dir=run_dir,
                    labels={"dataset_title": slots["datasets"][ds_name]["title"],
                            "model_title": slots["models"][model_name]["title"],
                            "data_used": ds.get("stand_in", ""), "model_used": md.get("stand_in", ""),
                            **(v.get("labels") or {})},
                    ood=ood, gpus=int(md.get("gpus", 1)), requires_task=ds.get("requires_task"),
                ))
    return specs


def train_argv(spec: RunSpec) -> list[str]:
    """``fastrl train`` arguments (without the interpreter or launcher)."""
    return ["train", spec.config, *spec.overrides, "--scale", spec.scale]
