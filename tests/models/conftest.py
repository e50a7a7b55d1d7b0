"""The tiny model directories of tests/mini/conftest.py, for the tests of fastrl.models."""

from tests.mini.conftest import (  # noqa: F401  (fixtures pytest finds by name)
    llama_model_dir,
    one_torch_thread,
    text_model_dir,
    vl_model_dir,
)
