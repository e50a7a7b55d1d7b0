"""experiments.similarity.measure at smoke scale: histogram and kept fractions per tau are consistent."""

from __future__ import annotations

import json

from experiments.similarity.measure import TAUS, main, stand_ins


def test_similarity_measure_smoke(tmp_path):
    assert len(stand_ins("smoke", 1)) == 3  # the text model and both visual stand-ins
    assert main(["--scale", "smoke", "--batches", "1", "--text-only", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "similarity.json").read_text())
    assert len(data["results"]) == 1
    for r in data["results"].values():
        assert sum(r["histogram"]) == r["pairs"] == r["responses"] - r["buckets"]
        mdap = [r["kept_fraction"][str(t)]["mdap"] for t in TAUS]
        assert mdap == sorted(mdap, reverse=True)  # larger tau never keeps more
        assert all(r["kept_fraction"][str(t)]["after_refill"] >= r["kept_fraction"][str(t)]["mdap"] for t in TAUS)
    assert "J < 0.2" in (tmp_path / "similarity.md").read_text()
