"""Versions of the run config's schema, and one migration per version step.

A run's ``config.yaml`` carries ``schema_version: N``. A config written by an earlier version (by
a run directory, or a config file a user kept) is brought to the current schema by the
migrations from N on, each a function of the flattened config (``{"trainer.optim.lr": 1e-4}``)
that renames, splits or fills in keys; the values it fills in are those the code of the older
version used, so the migrated config describes the same training. Configs written before the key
existed (versions 1-3) are recognised by their keys.

Adding a version: bump ``SCHEMA_VERSION`` and register ``@migration(SCHEMA_VERSION - 1)``; keep a
config.yaml written by the old version in ``tests/training/data/`` (the tests load each).

This module imports no torch: ``fastrl.config`` reads it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

Flat = dict[str, Any]

SCHEMA_VERSION = 4
VERSION_KEY = "schema_version"

_MIGRATIONS: dict[int, Callable[[Flat], Flat]] = {}

# Version 1 -> 2 (issue 18: trainer.optim, model.tiny): renamed keys.
RENAMED_KEYS: dict[str, str] = {
    "trainer.lr": "trainer.optim.lr",
    "trainer.weight_decay": "trainer.optim.weight_decay",
    "trainer.grad_clip": "trainer.optim.grad_clip",
    "trainer.lr_warmup_steps": "trainer.optim.warmup_steps",
    **{f"model.{k}": f"model.tiny.{k}" for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                                 "intermediate_size", "sft_steps", "sft_lr", "sft_batch_size",
                                                 "sft_answer_noise")},
}
# Keys version 1 lacked, with the values its code fixed (the actor's hard-coded AdamW settings).
ADDED_KEYS: dict[str, Any] = {"trainer.optim.betas": [0.9, 0.999], "trainer.optim.eps": 1e-8,
                              "trainer.optim.offload": False}
# Version 2 -> 3: the retention rule's options moved from algorithm.ars to their own section (one
# section per ARS rule); algorithm.ars.rule is gone (the scaler's name is its rule). The period
# was shared. These are version 2's keys: a fact about that schema, not derived from today's.
ARS_RETENTION_KEYS = ("n_min", "n_max", "beta", "headroom", "rho_high", "grow_step", "per_prompt")
ARS_RULE_KEY = "algorithm.ars.rule"
# Version 3 -> 4 (issue 27): trainer.tensorboard (a boolean) became the list trainer.loggers.
TENSORBOARD_KEY = "trainer.tensorboard"


def migration(from_version: int) -> Callable[[Callable[[Flat], Flat]], Callable[[Flat], Flat]]:
    """Register the migration from ``from_version`` to ``from_version + 1``."""
    def add(fn: Callable[[Flat], Flat]) -> Callable[[Flat], Flat]:
        if from_version in _MIGRATIONS:
            raise ValueError(f"a migration from schema version {from_version} is already registered")
        _MIGRATIONS[from_version] = fn
        return fn
    return add


@migration(1)
def _optim_and_tiny_sections(flat: Flat) -> Flat:
    out = {RENAMED_KEYS.get(k, k): v for k, v in flat.items()}
    for key, value in ADDED_KEYS.items():
        out.setdefault(key, value)
    out.setdefault("model.source", "path" if flat.get("model.path") else "tiny")
    return out


@migration(2)
def _one_section_per_ars_rule(flat: Flat) -> Flat:
    moved = {f"algorithm.ars.{k}": f"algorithm.ars_retention.{k}" for k in ARS_RETENTION_KEYS}
    out = {moved.get(k, k): v for k, v in flat.items() if k != ARS_RULE_KEY}
    if "algorithm.ars.period_steps" in flat:
        out["algorithm.ars_retention.period_steps"] = flat["algorithm.ars.period_steps"]
    return out


@migration(3)
def _loggers_list(flat: Flat) -> Flat:
    out = {k: v for k, v in flat.items() if k != TENSORBOARD_KEY}
    if TENSORBOARD_KEY in flat:
        out.setdefault("trainer.loggers", ["jsonl", "tensorboard"] if flat[TENSORBOARD_KEY] else ["jsonl"])
    return out


def version_of(flat: Mapping[str, Any]) -> int:
    """The schema version a flattened config was written by: its ``schema_version``, else (written
    before the key) 1 when it has a key renamed in version 2, 2 when it has ``algorithm.ars.rule``,
    else 3 (version 3 wrote no key; from 4 on every config.yaml has it)."""
    if VERSION_KEY in flat:
        version = flat[VERSION_KEY]
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
            raise ValueError(f"{VERSION_KEY} = {version!r}: this code reads schema versions 1 to {SCHEMA_VERSION} "
                             "(a config written by a newer fastrl? upgrade fastrl)")
        return version
    if any(k in flat for k in RENAMED_KEYS):
        return 1
    return 2 if ARS_RULE_KEY in flat else 3


def upgrade(flat: Mapping[str, Any]) -> Flat:
    """``flat`` (a flattened config of any version) under the current schema, without the
    version key."""
    version = version_of(flat)
    out = {k: v for k, v in flat.items() if k != VERSION_KEY}
    for v in range(version, SCHEMA_VERSION):
        out = _MIGRATIONS[v](out)
    return out


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Flat:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    out: Flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of ``flatten``."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def upgrade_tree(tree: Mapping[str, Any]) -> dict[str, Any]:
    """A config tree (a config.yaml's content) under the current schema, without the version key."""
    return unflatten(upgrade(flatten(tree)))
