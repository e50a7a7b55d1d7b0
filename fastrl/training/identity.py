"""A run's identity: ``<run_dir>/config.yaml``, and what a later start may change.

``config.yaml`` is the resolved config with its ``schema_version`` (``fastrl.migrations``),
written once, when the run is created. A later start compares its own resolved config with it,
key by key, over what the run *uses*: every key but those of sections the run does not select (an
unselected component's ``algorithm.<section>``, an unselected engine's ``rollout.<engine>``, the
tiny model's ``model.tiny`` when the model comes from elsewhere). The saved config is first
brought to the current schema (``fastrl.migrations.upgrade``); a key it still lacks (one added to
the schema since) is the same run when the new config holds the key's default. Every other
difference, except the keys of :data:`RESUMABLE_KEYS`, is refused in one line naming each key
with its old and new value, before any model is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import yaml

from fastrl.config import FastRLConfig, save_config, to_dict
from fastrl.migrations import flatten, upgrade
from fastrl.training.lock import RunDirError

CONFIG_FILE = "config.yaml"

# The config keys that may differ between a run's config.yaml and a start that resumes it: they
# change neither what is trained nor how (validation and checkpoints do not move the training's
# RNG streams: seeded generation runs under torch.random.fork_rng). Every other key is the run's
# identity. total_steps extends a run (or ends it earlier, never before the steps already done;
# ARS's released rule reads progress = step / total_steps, so an extended run is not the same as a
# run planned that long from the start). torch_threads may change CPU float rounding, not the recipe.
RESUMABLE_KEYS: tuple[str, ...] = (
    "trainer.total_steps",
    "trainer.run_dir",
    "trainer.resume",
    "trainer.val_every",
    "trainer.save_every",
    "trainer.keep_checkpoints",
    "trainer.loggers",
    "trainer.progress",
    "trainer.torch_threads",
    "rollout.logprob_check_tol",
    "rollout.logprob_check_mean_tol",
    "rollout.logprob_check_samples",
    # When a reward that keeps failing stops the run: a rule for stopping, like total_steps, not
    # for training (a run that never trips it trains the same under any values).
    "data.reward_max_failure_share",
    "data.reward_max_failing_steps",
)
MISSING = "<absent>"


def _as_saved(cfg: FastRLConfig) -> dict[str, Any]:
    """The config as config.yaml holds it (a YAML round trip: tuples become lists, and so on)."""
    return yaml.safe_load(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def unused_prefixes(flat: Mapping[str, Any]) -> tuple[str, ...]:
    """Key prefixes of the sections a run with this (flattened, current-schema) config does not read."""
    from fastrl.algorithms import registry
    from fastrl.engines import ROLLOUT_ENGINES
    from fastrl.sources import MODEL_SOURCES
    from fastrl.tasks import TASKS

    # Each registry with the config key that chooses its entry.
    choosers = [*((r, f"algorithm.{r.kind}") for r in registry.COMPONENT_REGISTRIES),
                (ROLLOUT_ENGINES, "rollout.engine"), (MODEL_SOURCES, "model.source"), (TASKS, "data.task")]
    out: list[str] = []
    for group in {id(r.group): r.group for r, _ in choosers if r.group is not None}.values():
        used = group.used([(r, str(flat.get(key))) for r, key in choosers if r.group is group])
        out += [f"{group.key}.{name}." for name in group.sections() if name not in used]
    return tuple(out)


def config_changes(saved: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, new value) of every identity key that differs (module docstring):
    ``saved`` is a config.yaml's content (any schema version), ``new`` the current config's."""
    a, b = upgrade(flatten(saved)), flatten(new)
    defaults = flatten(_as_saved(FastRLConfig()))
    for key in set(b) - set(a):  # added to the schema since the run was written
        if key in defaults and b[key] == defaults[key]:
            a[key] = b[key]
    skip = unused_prefixes(a) if unused_prefixes(a) == unused_prefixes(b) else ()
    return [(k, a.get(k, MISSING), b.get(k, MISSING)) for k in sorted(set(a) | set(b))
            if k not in RESUMABLE_KEYS and not k.startswith(skip) and a.get(k, MISSING) != b.get(k, MISSING)]


def check_identity(run_dir: Path, cfg: FastRLConfig) -> None:
    """Refuse to continue ``run_dir`` with a config that changes its training (one line)."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        saved = yaml.safe_load(path.read_text()) or {}
        changes = config_changes(saved, _as_saved(cfg))
    except (yaml.YAMLError, ValueError) as exc:
        raise RunDirError(f"{path}: not a readable config ({str(exc).splitlines()[0]}); "
                          "pass --force-new to start the run over") from None
    if changes:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes)
        raise RunDirError(
            f"{run_dir} holds a run of a different config ({path}); it resumes only with the same training "
            f"config, and these keys differ: {listed}. Use the run's own config, another trainer.run_dir, "
            f"or --force-new to move the old run aside and start over")


def write_identity(run_dir: Path, cfg: FastRLConfig) -> None:
    """Write config.yaml unless the run already has one (it is written once, at creation)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        tmp = path.with_name(f".{CONFIG_FILE}.tmp")
        save_config(cfg, tmp)
        os.replace(tmp, path)
