"""The host-step benchmark runs end to end at toy size (so it cannot silently rot)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "host_step.py"
STAGES = {"gather", "reward", "adv", "mdap", "plan", "pad"}


def test_host_step_bench_times_every_stage_for_both_layouts(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("host_step", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "r.json"
    mod.main(["--prompts", "4", "--n", "4", "--max-len", "32", "--vocab", "500", "--ranks", "1,2", "--json", str(out)])
    r = json.loads(out.read_text())
    assert r["shape"]["responses"] == 16 and set(r["worlds"]) == {"1", "2"}
    for world in r["worlds"].values():
        for layout in ("rescore", "own"):
            assert set(world[layout]["stages_cpu_s"]) == STAGES
            assert world[layout]["total_wall_s"] > 0
    assert "CPU ratio rescore / own" in capsys.readouterr().out
