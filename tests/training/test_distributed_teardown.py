"""Every script that joins a process group leaves it before exit.

Exiting with a gloo group still up aborts at interpreter teardown now and then (rc -6, "terminate
called without an active exception"), after all results were written: CI lost the ZeRO-Offload
equivalence run that way. ``fastrl.training.distributed.shutdown_distributed`` is the cure; this
checks every entry point that calls ``init_distributed`` also calls it.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("fastrl", "tests", "dev", "bench", "experiments")


def _called_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def _is_script(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)


def test_scripts_that_init_distributed_shut_it_down() -> None:
    offenders = []
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            called = _called_names(tree)
            if _is_script(tree) and "init_distributed" in called and "shutdown_distributed" not in called:
                offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"call fastrl.training.distributed.shutdown_distributed() before exit in: {offenders}"
