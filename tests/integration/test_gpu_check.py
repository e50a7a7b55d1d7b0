"""``make gpu-check`` (the suite's GPU tier, tests/gpu, run by bench/gpu_check.py), run here as its
dry run (CPU, smallest sizes), so it cannot rot before a GPU box runs it; plus its import check
and its wheel list, without a GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_dry_run_writes_every_section(tmp_path):
    """~30 s: one process per section, as on the GPU (imports dominate)."""
    out = tmp_path / "gpu-check"
    env = {**os.environ, "GPU_CHECK_DRY": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), "--out", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the script runs the suite's GPU tier (tests/gpu, pytest -m gpu): one test per section
    assert "5 passed, 1 skipped" in proc.stdout, proc.stdout[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    markdown = (out / "summary.md").read_text()
    assert summary["dry_run"] is True and summary["imports"]["status"] == "ok" and summary["failed"] == []
    sections = summary["sections"]
    assert list(sections) == ["smoke_grpo", "smoke_fastrl", "paper_step", "vllm", "demo"]
    for name, result in sections.items():
        assert f"| {name} | {result['status']} |" in markdown
    for name in ("smoke_grpo", "smoke_fastrl", "paper_step", "demo"):
        assert sections[name]["status"] == "ok", sections[name]
    assert sections["vllm"]["status"] == "skipped" and "dry run" in sections["vllm"]["reason"]
    for name in ("smoke_grpo", "smoke_fastrl"):
        assert sections[name]["steps"] == 2 and sections[name]["timing_s"]["update_actor"] > 0
    assert sections["smoke_fastrl"]["kept_fraction"] < 1.0  # MDAP pruned in the FastRL smoke run
    paper = sections["paper_step"]
    assert paper["shape"]["num_hidden_layers"] == 2 and paper["batch"]["n"] == 4
    for step in ("grpo", "fastrl"):
        assert {"old_log_prob", "ref", "update_actor"} <= set(paper[step]["timing_s"])
    assert paper["fastrl"]["timing_s"]["mdap"] > 0 and paper["mdap_vs_logprob"]["ratio"] > 0
    # timed after a warm-up step, twice each (GRPO, FastRL, FastRL, GRPO): a single first pass
    # charged the warm-up to GRPO (1.72x on the H200 with both steps training all 128 responses)
    for step in ("grpo", "fastrl"):
        assert len(paper[step]["repeats_total_s"]) == 2 and paper[step]["total_s"] == min(paper[step]["repeats_total_s"])
    assert "faster of 2 repeats" in markdown and "both repeats (s)" in markdown
    assert "## paper_step" in markdown and "MDAP (`mdap_prune`" in markdown
    assert set(sections["demo"]["methods"]) == {"grpo", "fastrl", "fastrl_fixed_updates"}
    assert (out / "logs" / "paper_step.log").is_file()


def test_import_check_names_the_missing_package(monkeypatch, tmp_path):
    gpu_check = _load("gpu_check")
    monkeypatch.setitem(gpu_check.REQUIRED, "fastrl_gpu_check_absent", "fastrl-gpu-check-absent")
    monkeypatch.setattr(gpu_check, "WHEELS", tmp_path / "no-wheels-here")
    report, env = gpu_check.check_imports(gpu_check.Settings(out=tmp_path, dry=True))
    assert report["status"] == "failed" and list(report["missing"]) == ["fastrl_gpu_check_absent"]
    assert "missing packages: fastrl-gpu-check-absent (ModuleNotFoundError" in report["reason"]
    assert "make gpu-wheels" in report["reason"] and report["installed"] == []
    assert env["python"] and env["torch"]


def test_failed_section_is_reported_with_its_reason(tmp_path):
    gpu_check = _load("gpu_check")
    summary = {
        "started": "now", "dry_run": False, "total_s": 1.0, "failed": ["smoke_grpo"],
        "imports": {"status": "ok", "installed": ["deepspeed"], "missing": {}},
        "environment": {"python": "3.12", "torch": "2.11.0+cu130", "cuda_available": True, "gpu": "H200",
                        "gpu_memory_gib": 139.8},
        "sections": {"smoke_grpo": {"status": "failed", "wall_s": 3.0,
                                    "reason": "RuntimeError: Expected all tensors to be on the same device"},
                     "vllm": {"status": "skipped", "reason": "vllm is not importable here (not installed)"}},
    }
    md = gpu_check.format_summary(summary)
    assert "| smoke_grpo | failed | 3.0 | RuntimeError: Expected all tensors to be on the same device |" in md
    assert "| vllm | skipped | — | vllm is not importable here (not installed) |" in md
    assert "installed from wheels/: deepspeed" in md and "Failed: smoke_grpo." in md


def test_gpu_wheels_commands_cover_what_the_box_lacks(tmp_path):
    wheels = _load("gpu_wheels")
    cmds = wheels.commands(tmp_path)
    named = " ".join(" ".join(c) for c in cmds)
    for dist in ("deepspeed==0.19.8", "omegaconf==", "antlr4-python3-runtime==", "mathruler==", "pylatexenc==",
                 "hjson==", "pydantic==", "pydantic-core==", "annotated-types==", "typing-inspection==",
                 "typing_extensions=="):
        assert dist in named, dist
    binary = cmds[-1]
    assert binary[4:6] == ["download", "--only-binary=:all:"] and "3.12" in binary and "manylinux2014_x86_64" in binary
    assert all("--no-deps" in c for c in cmds)


def test_vllm_section_checks_the_sync_with_paper_yamls_bf16_bounds():
    """The GPU vLLM section (bf16) judges its sync as a paper run would: max and mean bounds."""
    assert _load("gpu_check").paper_bf16_check_tolerances() == (1.5, 0.08)
