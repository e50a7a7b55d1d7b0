"""FastRL: MDAP + ARS plug-ins for GRPO-family trainers.

    import fastrl

    fastrl.train("methods/fastrl.yaml", ["algorithm.mdap.tau=0.6"], scale="mini")
    fastrl.evaluate("runs/fastrl", ["mini-math"])

The entry points are imported on first use, so ``import fastrl`` does not import torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["ConfigError", "FastRLConfig", "__version__", "evaluate", "load_config", "run_demo", "sft", "sweep",
           "train"]


def __getattr__(name: str) -> Any:
    # Explicit imports (not importlib) so that static import checks see these dependencies.
    if name in ("train", "sweep", "sft", "evaluate"):
        from fastrl import api

        value = getattr(api, name)
    elif name in ("load_config", "FastRLConfig", "ConfigError"):
        from fastrl import config

        value = getattr(config, name)
    elif name == "run_demo":
        from fastrl.demo import run_demo as value
    else:
        raise AttributeError(f"module 'fastrl' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
