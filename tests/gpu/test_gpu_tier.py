"""The GPU tier of the suite (``pytest -m gpu tests/gpu``; ``make gpu-check`` runs it): one test per
section of ``bench/gpu_check.py`` (smoke GRPO / FastRL under ZeRO-3 bf16, a Qwen2.5-VL-7B-shaped
step, the vLLM weight sync, the demo), each in its own process within one time budget, and
``<out>/summary.{json,md}`` written when the tier ends.

Skipped without CUDA. ``GPU_CHECK_DRY=1`` runs it on a CPU at the smallest sizes (the CPU suite
does: tests/integration/test_gpu_check.py). ``GPU_CHECK_OUT`` (default ``runs/gpu-check``) and
``GPU_CHECK_BUDGET_S`` (default the script's) say where and for how long.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
DRY = os.environ.get("GPU_CHECK_DRY", "") not in ("", "0")

pytestmark = pytest.mark.gpu


def _gpu_check() -> Any:
    spec = importlib.util.spec_from_file_location("bench_gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["bench_gpu_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


gpu_check = _gpu_check()


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.fixture(scope="module")
def check() -> Iterator[tuple[Any, dict[str, Any], float]]:
    """(settings, the summary the sections fill in, the budget's deadline); the summary is written
    when the module's tests are done, whatever they found."""
    if not DRY and not _cuda_available():
        pytest.skip("no CUDA device here (GPU_CHECK_DRY=1 runs the tier's dry run on a CPU)")
    out = Path(os.environ.get("GPU_CHECK_OUT", str(gpu_check.DEFAULT_OUT))).resolve()
    settings = gpu_check.Settings(out=out, dry=DRY)
    budget = float(os.environ.get("GPU_CHECK_BUDGET_S", gpu_check.BUDGET_S))
    start = time.perf_counter()
    summary = gpu_check.start_summary(settings, budget)
    yield settings, summary, time.perf_counter() + budget
    gpu_check.finish_summary(settings, summary, start)


def test_imports(check: tuple[Any, dict[str, Any], float]) -> None:
    """Every package the sections import, installed from wheels/ where missing; CUDA visible."""
    imports = check[1]["imports"]
    assert imports["status"] == "ok", imports.get("reason")


@pytest.mark.parametrize("name", gpu_check.SECTIONS)
def test_section(check: tuple[Any, dict[str, Any], float], name: str) -> None:
    settings, summary, deadline = check
    result = gpu_check.run_one(name, settings, summary, deadline)
    if result["status"] == "skipped":
        pytest.skip(result["reason"])
    assert result["status"] == "ok", f"{result.get('reason')} (log: {settings.out / result['log']})"
