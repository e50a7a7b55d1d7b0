"""The MDAP overhead benchmark runs end to end at toy size (so it cannot silently rot)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mdap_overhead.py"


def test_bench_runs_and_writes_json(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("mdap_overhead", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "r.json"
    assert mod.main(["--questions", "3", "--responses", "4", "--max-len", "16", "--vocab", "100",
                     "--repeats", "1", "--no-forward", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["mdap"]) == {"zipf", "uniform"}
    for rows in r["mdap"].values():
        assert rows["responses"] == 12 and 3 <= rows["kept"] <= 12
        assert rows["mdap_prune[packed]"]["median_ms"] > 0
    assert "mdap_prune[lists]" in capsys.readouterr().out
