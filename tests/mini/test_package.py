"""The paper path reads without fastrl.mini: importing it loads none of the mini scaffolding."""

from __future__ import annotations

import subprocess
import sys

from tests.test_imports import REPO_ROOT

PAPER_PATH_MODULES = ("fastrl.api", "fastrl.cli", "fastrl.policy", "fastrl.models.loaders", "fastrl.training.setup",
                      "fastrl.training.pipeline", "fastrl.evaluation.evaluate")


def test_paper_path_modules_do_not_import_mini() -> None:
    """Only a mini-scale run (no ``model.path``, a generated ``data.task``) reaches fastrl.mini,
    through the lazy imports in fastrl.training.setup and fastrl.api."""
    code = (f"import sys\nimport {', '.join(PAPER_PATH_MODULES)}\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('fastrl.mini'))\n"
            "assert not loaded, f'paper-path modules imported {loaded}'\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


def test_training_never_names_fastrl_mini() -> None:
    """training/ looks a model source or a task up by name (fastrl.sources, fastrl.tasks); it never
    imports fastrl.mini, not even lazily, nor names it (issue 29)."""
    offenders = [f"{p.relative_to(REPO_ROOT)}:{n}" for p in sorted((REPO_ROOT / "fastrl" / "training").rglob("*.py"))
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "fastrl.mini" in line]
    assert offenders == []


def test_no_source_task_or_engine_name_branches_outside_their_registries() -> None:
    """A model source, a task or an engine is chosen through its registry: no ``model.source ==
    "tiny"``, ``data.task != "files"`` or ``engine == "vllm"`` in the trainer, the config, the
    policy kit or the CLI."""
    import re

    pattern = re.compile(r"""\b(source|task|engine)\s*[!=]=\s*["']""")
    files = [REPO_ROOT / "fastrl" / name for name in ("schema.py", "config.py", "policy.py", "cli.py")]
    files += sorted((REPO_ROOT / "fastrl" / "training").rglob("*.py"))
    offenders = [f"{p.relative_to(REPO_ROOT)}:{n}: {line.strip()}" for p in files
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert offenders == []
