"""Table 3 at smoke scale: the tiny Llama stand-in trains in-process and the collector reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import collect as C
from experiments import runner as R
from experiments.grid import Context
from experiments.run import target_module
from experiments.spec import build_runs
from fastrl.config import load_config


@pytest.mark.parametrize("scale", ["smoke", "mini"])
def test_table3_stands_in_with_a_tiny_llama(tmp_path: Path, scale: str) -> None:
    for r in build_runs("table3", scale, [1], tmp_path):
        assert load_config(r.config, list(r.overrides), scale=scale).model.kind == "llama", r.variant


@pytest.mark.slow
def test_table3_smoke_trains_a_tiny_llama_and_collects(tmp_path: Path) -> None:
    """GRPO and FastRL at smoke (seconds each; the SFT warm start is cached under .cache/sft)."""
    T3 = target_module("table3")

    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out",
                  launcher="inprocess")
    specs = [s for s in T3.specs(ctx) if s.variant in ("grpo", "fastrl")]
    assert len(specs) == 2
    assert R.execute(specs, "inprocess", fail_fast=True) == []
    for s in specs:
        config = json.loads((s.run_dir / "final" / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLM"], s.run_dir
    rows = C.read_rows(T3.collect(ctx)[0])
    measured = [r for r in rows if r["source"] == "measured"]
    assert {r["method"] for r in measured} == {"grpo", "fastrl"}
    assert all("tiny Llama" in r["model_used"] for r in measured)
    speedup = [r for r in measured if r["method"] == "fastrl" and r["metric"] == "speedup_vs_grpo"]
    assert len(speedup) == 1 and float(speedup[0]["value"]) > 0
