"""Defect 1 of issue 15: a run whose ``model.path`` is a hub id (paper.yaml's default) must export
a self-contained ``final/``: the tokenizer, processor and chat template come from the hub
snapshot, and the source's shard index is never copied beside the export's own weights."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fastrl.training.setup import PolicyBundle
from tests.paper_path import hub_fixtures as H

SIDE = {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "chat_template.json",
        "preprocessor_config.json"}


class _ExportOnlyActor:
    """Writes what ``Actor.export_hf`` writes (config + one weights file), nothing else."""

    def export_hf(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        (out_dir / "model.safetensors").write_bytes(b"")


def _bundle(path: str | Path) -> PolicyBundle:
    return PolicyBundle(cfg=None, path=Path(path), actor=_ExportOnlyActor(), reference=None,  # type: ignore[arg-type]
                        kit=SimpleNamespace(processor=None))  # type: ignore[arg-type]


def test_hub_id_run_exports_tokenizer_and_processor(paper_env, tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(paper_env.hub_cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)  # the hub id is not a local path here
    out = _bundle(H.QWEN_VL_ID).export(tmp_path / "final")
    names = {p.name for p in out.iterdir()}
    assert SIDE <= names, SIDE - names
    assert not any(n.endswith(".index.json") for n in names)  # the export wrote one unsharded file
    assert not any((out / n).is_symlink() for n in names)  # copies, not links into the cache
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"


def test_sharded_local_source_index_is_not_copied(paper_env, tmp_path):
    """A sharded source's model.safetensors.index.json beside the export's single file would make
    transformers look for shards that are not there."""
    out = _bundle(paper_env.snapshots[H.QWEN_VL_ID]).export(tmp_path / "final")
    names = {p.name for p in out.iterdir()}
    assert SIDE <= names and "model.safetensors.index.json" not in names
