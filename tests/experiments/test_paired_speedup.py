"""dev/paired_speedup.py: the per-seed CPU-time ratio the docs cite for pairs the tables do not make."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def record(variant: str, seed: int, cpu_s: float, dataset: str = "geometry3k") -> dict:
    return {"dataset": dataset, "model": "vl_7b", "variant": variant, "seed": seed, "summary": {"train_cpu_s": cpu_s}}


def test_ratio_is_other_over_variant_per_seed_and_settings_stay_apart(tmp_path: Path) -> None:
    rows = [record("a", 1, 10.0), record("b", 1, 20.0), record("a", 2, 10.0), record("b", 2, 10.0),
            record("b", 3, 99.0),  # unpaired seed: left out
            record("a", 1, 1.0, "geoqa8k"), record("b", 1, 1.0, "geoqa8k")]  # one seed: no interval, no line
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(ROOT / "dev" / "paired_speedup.py"), str(path), "a", "b"],
                         capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT)}).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("geometry3k-vl_7b: a over b: 1.50x [")
    assert lines[0].endswith("seeds [1, 2]")
