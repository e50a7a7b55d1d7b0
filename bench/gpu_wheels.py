#!/usr/bin/env python3
"""``make gpu-wheels``: the wheels a GPU box without network lacks, into ``wheels/`` (git-ignored).

The GPU box brings Python 3.12, torch (CUDA build), transformers, pandas, pyarrow, sympy and
matplotlib; ``bench/gpu_check.py`` installs whatever else is missing from this folder with
``pip install --no-index --find-links wheels ...``. Run this on a machine with network (PyPI):

- pure-Python packages: ``pip wheel --no-deps`` (a ``py3-none-any`` wheel; deepspeed is published
  as an sdist only and is built here, its CUDA ops are JIT-compiled on first use);
- compiled packages: ``pip download --only-binary=:all: --python-version 3.12 --platform
  manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --no-deps`` (Linux x86_64 wheels).

Versions are the ones installed in this repository's ``.venv`` (the set the tests pass with), so
run it with ``.venv/bin/python``; a package absent there uses the fallback pin below.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# deepspeed and its small dependencies, fastrl's config/reward stack, pydantic's closure.
# pytest and its closure: make gpu-check is the suite's GPU tier (pytest -m gpu).
PURE = ("deepspeed", "omegaconf", "antlr4-python3-runtime", "mathruler", "pylatexenc", "hjson", "pydantic",
        "annotated-types", "typing-inspection", "typing_extensions", "py-cpuinfo", "einops", "pytest", "pluggy",
        "iniconfig", "packaging", "pygments")
BINARY = ("pydantic-core", "msgpack", "psutil", "ninja")
FALLBACK_PINS = {"antlr4-python3-runtime": "4.9.3", "deepspeed": "0.19.8"}
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")


def pinned(name: str) -> str:
    """``name==version`` with the version installed here (or the fallback pin)."""
    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        if name in FALLBACK_PINS:
            return f"{name}=={FALLBACK_PINS[name]}"
        raise SystemExit(f"gpu_wheels: {name} is not installed in {sys.prefix} and has no fallback pin; "
                         "run `make setup` first") from None


def commands(out: Path) -> list[list[str]]:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    pure = [[*pip, "wheel", "--no-deps", "-w", str(out), pinned(name)] for name in PURE]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    binary = [*pip, "download", "--only-binary=:all:", "--python-version", PYTHON_VERSION, *platforms,
              "--no-deps", "-d", str(out), *(pinned(name) for name in BINARY)]
    return [*pure, binary]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "wheels")
    p.add_argument("--print", action="store_true", help="print the pip commands, run nothing")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for cmd in commands(args.out):
        print("+", " ".join(cmd), flush=True)
        if not args.print and subprocess.run(cmd).returncode != 0:
            print(f"gpu_wheels: failed: {' '.join(cmd)}", file=sys.stderr)
            return 1
    if not args.print:
        wheels = sorted(w.name for w in args.out.glob("*.whl"))
        print(f"{len(wheels)} wheels in {args.out}:\n  " + "\n  ".join(wheels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
