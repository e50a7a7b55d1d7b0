"""Structure counts of the package, for before/after comparisons of a refactor.

    python dev/code_stats.py                 # fastrl/ of the working tree, as a table
    python dev/code_stats.py --json          # the same as JSON
    python dev/code_stats.py --root /some/checkout

Counts: files and lines per package, functions over 60 and over 80 lines (with the names of the
latter), the largest classes, and cycles among imports inside the package: among module-level
imports, and among all imports (imports inside functions, the lazy ones, counted too). Only the standard library is
used, so the script runs unchanged on any commit.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _span(node: ast.AST) -> int:
    return int(node.end_lineno or node.lineno) - int(node.lineno) + 1  # type: ignore[attr-defined]


def _functions(tree: ast.AST, module: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((f"{prefix}{child.name}", _span(child)))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, f"{module}:")
    return out


def _top_level_imports(tree: ast.Module, module: str, is_package: bool, known: set[str],
                       nodes: list[ast.stmt] | None = None) -> set[str]:
    """Package modules imported by ``nodes`` (default: the module-level statements)."""
    targets: set[str] = set()
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in tree.body if nodes is None else nodes:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                stem = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem] + [f"{stem}.{a.name}" for a in node.names]
        # A module's ancestor packages are imported before it, so an edge to one is never a cycle
        # that runs (``from fastrl import metric_keys`` inside fastrl.training).
        names = [x for x in names if not module.startswith(x + ".")]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return sorted(out)


def stats(root: Path, package: str = "fastrl") -> dict[str, Any]:
    files = sorted((root / package).rglob("*.py"))
    trees = {_module_name(p, root): (p, ast.parse(p.read_text(), filename=str(p))) for p in files}
    known = set(trees)
    per_package: dict[str, dict[str, int]] = defaultdict(lambda: {"files": 0, "lines": 0})
    functions: list[tuple[str, int]] = []
    classes: list[tuple[str, int]] = []
    graph: dict[str, set[str]] = {}
    graph_all: dict[str, set[str]] = {}  # imports inside functions too
    for module, (path, tree) in trees.items():
        pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
        per_package[pkg]["files"] += 1
        per_package[pkg]["lines"] += len(path.read_text().splitlines())
        functions += _functions(tree, module)
        classes += [(f"{module}:{c.name}", _span(c)) for c in tree.body if isinstance(c, ast.ClassDef)]
        graph[module] = _top_level_imports(tree, module, path.name == "__init__.py", known)
        every = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        graph_all[module] = _top_level_imports(tree, module, path.name == "__init__.py", known, every)
    return {
        "packages": dict(sorted(per_package.items())),
        "functions": len(functions),
        "functions_over_60": sum(1 for _, n in functions if n > 60),
        "functions_over_80": sorted(([f, n] for f, n in functions if n > 80), key=lambda x: -x[1]),
        "largest_classes": sorted(([c, n] for c, n in classes), key=lambda x: -x[1])[:5],
        "import_cycles": _cycles(graph),
        "import_cycles_with_function_level": _cycles(graph_all),
    }


def _print_table(s: dict[str, Any]) -> None:
    print("package                          files  lines")
    for pkg, v in s["packages"].items():
        print(f"{pkg:32s} {v['files']:5d} {v['lines']:6d}")
    print(f"functions: {s['functions']}, over 60 lines: {s['functions_over_60']}, "
          f"over 80 lines: {len(s['functions_over_80'])}")
    for name, n in s["functions_over_80"]:
        print(f"  {n:4d}  {name}")
    print("largest classes:")
    for name, n in s["largest_classes"]:
        print(f"  {n:4d}  {name}")
    print(f"import cycles (module level): {len(s['import_cycles'])}")
    for comp in s["import_cycles"]:
        print("  " + " <-> ".join(comp))
    cycles_all = s["import_cycles_with_function_level"]
    print(f"import cycles (counting imports inside functions): {len(cycles_all)}")
    for comp in cycles_all:
        print("  " + " <-> ".join(comp))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--package", default="fastrl")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    s = stats(args.root, args.package)
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        _print_table(s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
