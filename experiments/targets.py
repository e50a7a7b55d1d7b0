"""The experiment targets (`make table1`, `make lag`, ...): registered once, by their YAML.

A file in ``configs/tables/`` with a top-level ``register:`` block is a target; nothing else
names it (``experiments.run``, ``experiments.mk`` and ``experiments.run list`` read this list)::

    target: table9                         # the target's name (`make table9`)
    description: "what the target shows"   # printed before its plan and by `experiments.run list`
    register:
      order: 95                            # its place in `make reproduce` (ascending)
      aliases: [my-table]                  # other `make` names for it (optional)
      from_metadata: true                  # `--from-metadata` can rebuild it from run metadata
      stale: "why"                         # optional: the committed outputs predate the configs
                                           # (retrain it); `--from-metadata` skips it, saying why
      hook: experiments.table9.target      # optional: a module with Python logic (TargetHooks)

Without ``hook`` the target is a data-only table (``experiments.table_target.TableTarget``:
settings x variants, metrics, renames, derived rows, all read from the same YAML). A hook module
provides ``specs(ctx)`` and ``collect(ctx)``, and optionally ``post(ctx, runs)`` and
``describe(ctx)`` (:class:`TargetHooks`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import yaml

from experiments.spec import SpecError

if TYPE_CHECKING:
    from experiments.grid import Context
    from experiments.spec import RunSpec

TABLES_DIR = Path(__file__).resolve().parent.parent / "configs" / "tables"
REGISTER_KEYS = ("order", "aliases", "from_metadata", "hook", "stale")


class TargetHooks(Protocol):
    """What a target with Python logic implements (a module, or any object with these)."""

    def specs(self, ctx: Context) -> list[RunSpec]: ...

    def collect(self, ctx: Context) -> list[Path]: ...


@dataclass(frozen=True)
class Target:
    """One registered target: its registration and what runs it."""

    name: str
    description: str
    order: int
    aliases: tuple[str, ...]
    from_metadata: bool
    config: Path
    hook: str | None  # module path, or None for a data-only table
    # Why the committed outputs no longer match the configs (None: they do). Set while a table waits
    # for its re-measure; tests/experiments/test_export.py fails once the metadata matches again.
    stale: str | None = None

    def hooks(self) -> Any:
        """The object with ``specs``/``collect`` (and maybe ``post``/``describe``)."""
        if self.hook is None:
            from experiments.table_target import TableTarget

            return TableTarget.load(self.name, self.config)
        return importlib.import_module(self.hook)

    def optional(self, hook_name: str) -> Callable[..., Any] | None:
        return getattr(self.hooks(), hook_name, None)


def _target_of(path: Path, doc: dict[str, Any]) -> Target:
    reg = doc["register"]
    if not isinstance(reg, dict):
        raise SpecError(f"{path}: register: must be a mapping with keys {', '.join(REGISTER_KEYS)}")
    unknown = sorted(set(reg) - set(REGISTER_KEYS))
    if unknown:
        raise SpecError(f"{path}: register: unknown key(s) {unknown}; valid: {', '.join(REGISTER_KEYS)}")
    for key in ("target", "description"):
        if not doc.get(key):
            raise SpecError(f"{path}: a registered target needs a top-level {key!r}")
    if not isinstance(reg.get("order"), int):
        raise SpecError(f"{path}: register.order must be an integer (its place in `make reproduce`)")
    stale = reg.get("stale")
    if stale is not None and not (isinstance(stale, str) and stale.strip()):
        raise SpecError(f"{path}: register.stale must say why the committed outputs predate the configs")
    aliases = reg.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise SpecError(f"{path}: register.aliases must be a list of names")
    return Target(name=str(doc["target"]), description=str(doc["description"]), order=reg["order"],
                  aliases=tuple(aliases), from_metadata=bool(reg.get("from_metadata", False)), config=path,
                  hook=reg.get("hook"), stale=stale)


def discover(tables_dir: Path = TABLES_DIR) -> dict[str, Target]:
    """Every registered target under ``tables_dir``, in ``make reproduce`` order."""
    found: dict[str, Target] = {}
    names: dict[str, Path] = {}
    for path in sorted(tables_dir.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        if not isinstance(doc, dict) or "register" not in doc:
            continue
        target = _target_of(path, doc)
        for name in (target.name, *target.aliases):
            if name in names:
                raise SpecError(f"{path}: target name {name!r} is already registered by {names[name]}")
            names[name] = path
        found[target.name] = target
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))


def aliases(targets: dict[str, Target]) -> dict[str, str]:
    return {a: t.name for t in targets.values() for a in t.aliases}


def make_names(targets: dict[str, Target]) -> list[str]:
    """Every `make` name the targets answer to (names, then aliases)."""
    return [*targets, *aliases(targets)]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m experiments.targets``: the make names, one line (experiments.mk reads it)."""
    print(" ".join(make_names(discover())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
