"""Import hygiene, checked statically with ``ast`` (nothing is imported, so no torch needed):

- no module reaches into another module's private names (``from x import _name``, ``x._name``);
  a package's private submodules and names stay usable inside that package;
- the import graph between fastrl's subpackages and top-level modules has no cycle, counting
  imports inside functions too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCANNED_PACKAGES = ("fastrl", "experiments")


@dataclass(frozen=True)
class ImportSite:
    """One import statement: the importing module, the module imported from, and the names."""

    importer: str
    target: str
    names: tuple[str, ...]  # empty for ``import x.y``
    line: int
    aliases: tuple[tuple[str, str], ...] = ()  # (bound local name, full dotted module) for module bindings


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def scanned_files(roots: tuple[str, ...] = SCANNED_PACKAGES) -> list[Path]:
    return sorted(p for root in roots for p in (REPO_ROOT / root).rglob("*.py"))


def is_module(dotted: str) -> bool:
    base = REPO_ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def absolute_target(importer: str, importer_is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = importer.split(".") if importer_is_package else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_sites(path: Path) -> list[ImportSite]:
    importer, package = module_name(path), is_package(path)
    sites = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = (a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0])
                sites.append(ImportSite(importer, a.name, (), node.lineno, (bound,)))
        elif isinstance(node, ast.ImportFrom):
            target = absolute_target(importer, package, node)
            names = tuple(a.name for a in node.names)
            modules = tuple((a.asname or a.name, f"{target}.{a.name}") for a in node.names
                            if is_module(f"{target}.{a.name}"))
            sites.append(ImportSite(importer, target, names, node.lineno, modules))
    return sites


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def owner_package(dotted: str) -> str:
    """The package a private name belongs to: everything before its first private part."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if is_private(part):
            return ".".join(parts[:i])
    return dotted


def within(importer: str, package: str) -> bool:
    return importer == package or importer.startswith(package + ".")


def private_uses(path: Path) -> list[str]:
    """``file:line: what`` for each private name of another module this file uses."""
    rel = path.relative_to(REPO_ROOT)
    importer = module_name(path)
    found = []
    modules: dict[str, str] = {}  # local name -> module, for ``name._attr``
    for site in import_sites(path):
        modules.update(dict(site.aliases))
        for dotted in (site.target, *(f"{site.target}.{n}" for n in site.names if n != "*")):
            if any(is_private(p) for p in dotted.split(".")):
                owner = owner_package(dotted)
                if not within(importer, owner):
                    found.append(f"{rel}:{site.line}: imports {dotted} (private to {owner or 'its package'})")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            chain = []
            value: ast.expr = node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules:
                dotted = ".".join([modules[value.id], *reversed(chain)])
                if is_module(dotted) and not within(importer, dotted):
                    found.append(f"{rel}:{node.lineno}: uses {dotted}.{node.attr} (private to {dotted})")
    return found


# Subpackages and top-level modules of fastrl: the nodes of the dependency graph below.
def fastrl_unit(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[0] != "fastrl":
        return None
    return parts[1] if len(parts) > 1 else "fastrl"  # ``fastrl`` itself: the package __init__


def unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in scanned_files(("fastrl",)):
        source = fastrl_unit(module_name(path))
        assert source is not None
        graph.setdefault(source, set())
        for site in import_sites(path):
            # ``from fastrl import cli`` depends on fastrl.cli; ``from fastrl import train``, on fastrl itself
            targets = [f"fastrl.{n}" if is_module(f"fastrl.{n}") else "fastrl" for n in site.names] \
                if site.target == "fastrl" and site.names else [site.target]
            for target in targets:
                unit = fastrl_unit(target)
                if unit is not None and unit != source:
                    graph[source].add(unit)
    return graph


def find_cycle(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest cycle through ``start`` as ``[start, ..., start]``, or None (breadth-first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if nxt not in parents:
                    parents[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each node that lies on a cycle (repeats dropped)."""
    found: list[list[str]] = []
    for node in sorted(graph):
        cycle = find_cycle(graph, node)
        if cycle is not None and not any(set(cycle) == set(c) for c in found):
            found.append(cycle)
    return found


def test_no_module_uses_another_modules_private_names():
    found = [line for path in scanned_files() for line in private_uses(path)]
    assert not found, "private names used outside their module:\n" + "\n".join(found)


def test_fastrl_subpackages_import_each_other_without_cycles():
    graph = unit_graph()
    assert {"algorithms", "data", "evaluation", "models", "rewards", "rollout", "training", "cli", "config",
            "demo"} <= set(graph)
    found = cycles(graph)
    assert not found, "import cycles between fastrl subpackages:\n" + "\n".join(" -> ".join(c) for c in found)


def test_fastrl_modules_import_each_other_without_cycles_counting_lazy_imports():
    """Module by module (finer than the subpackage graph above), imports inside functions counted:
    checkpoint <-> run_dir and rewards <-> rewards.math were such circles."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("code_stats", REPO_ROOT / "dev" / "code_stats.py")
    code_stats = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code_stats)  # type: ignore[union-attr]
    s = code_stats.stats(REPO_ROOT)
    assert s["import_cycles"] == [] and s["import_cycles_with_function_level"] == [], s["import_cycles_with_function_level"]


def test_fastrl_import_is_cheap():
    """``import fastrl`` and naming its entry points (not calling them) import no torch."""
    import subprocess
    import sys

    code = ("import sys, fastrl\n"
            "assert 'torch' not in sys.modules, 'import fastrl imported torch'\n"
            "for name in fastrl.__all__: getattr(fastrl, name)\n"
            "assert 'torch' not in sys.modules, 'naming the entry points imported torch'\n"
            "import fastrl.cli\n"
            "assert 'torch' not in sys.modules, 'import fastrl.cli imported torch'\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


# The checks themselves: each must catch what it is there to catch.
def test_the_cycle_search_and_private_ownership():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a"}}) == []
    assert owner_package("fastrl.cli._train") == "fastrl.cli"
    assert owner_package("fastrl.algorithms._common.check") == "fastrl.algorithms"
    assert within("fastrl.algorithms.pruning", "fastrl.algorithms") and not within("fastrl.cli", "fastrl.c")


@pytest.mark.parametrize("source, expected", [
    ("from fastrl.cli import _train\n", "imports fastrl.cli._train"),
    ("from fastrl import cli\ncli._default_accelerator()\n", "uses fastrl.cli._default_accelerator"),
    ("import fastrl.config\nfastrl.config._resolve_path('x')\n", "uses fastrl.config._resolve_path"),
    ("from fastrl.algorithms._common import group_index\n", "imports fastrl.algorithms._common"),
])
def test_private_use_is_found(tmp_path, monkeypatch, source, expected):
    fake = tmp_path / "experiments" / "probe.py"
    fake.parent.mkdir()
    fake.write_text(source)
    for mod in ("fastrl/__init__.py", "fastrl/cli.py", "fastrl/config.py", "fastrl/algorithms/__init__.py",
                "fastrl/algorithms/_common.py"):
        (tmp_path / mod).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / mod).touch()
    monkeypatch.setitem(globals(), "REPO_ROOT", tmp_path)
    assert any(expected in line for line in private_uses(fake)), private_uses(fake)


def test_private_use_inside_its_own_package_is_allowed(tmp_path, monkeypatch):
    inside = tmp_path / "fastrl" / "algorithms" / "pruning.py"
    inside.parent.mkdir(parents=True)
    inside.write_text("from fastrl.algorithms._common import group_index\n")
    (tmp_path / "fastrl" / "algorithms" / "_common.py").touch()
    monkeypatch.setitem(globals(), "REPO_ROOT", tmp_path)
    assert private_uses(inside) == []


def test_a_cycle_through_a_lazy_import_is_found(tmp_path, monkeypatch):
    files = {
        "fastrl/__init__.py": "",
        "fastrl/cli.py": "def main():\n    from fastrl.demo import run_demo\n",
        "fastrl/demo.py": "def run_demo():\n    from fastrl.cli import train\n",
        "fastrl/models/__init__.py": "",
        "fastrl/models/forward.py": "from fastrl.rollout.base import PromptInput\n",
        "fastrl/rollout/__init__.py": "",
        "fastrl/rollout/base.py": "from ..models import forward\n",  # relative imports count too
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setitem(globals(), "REPO_ROOT", tmp_path)
    assert cycles(unit_graph()) == [["cli", "demo", "cli"], ["models", "rollout", "models"]]
