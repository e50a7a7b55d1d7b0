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
