"""Table 1's speedup-vs-accuracy figure: drawn from a collected table1.csv, written by `make figures`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from experiments.figures import speedup_accuracy as F
from experiments.figures import target as figures_target
from experiments.grid import Context

FIELDS = ["target", "source", "method", "dataset", "model", "metric", "value", "std", "ci95_low", "ci95_high"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _row(method: str, dataset: str, model: str, metric: str, value: float, low: float | str = "",
         high: float | str = "", source: str = "measured") -> dict[str, object]:
    return {"target": "table1", "source": source, "method": method, "dataset": dataset, "model": model,
            "metric": metric, "value": value, "std": 0.1, "ci95_low": low, "ci95_high": high}


def _small_table(path: Path) -> Path:
    rows = [_row("fastrl", "Geometry3K", "", "speedup_vs_grpo_max", 2.14, source="paper")]
    for dataset, model in (("Geometry3K", "Qwen2.5-VL-3B-Instruct"), ("GeoQA8K-R1V", "Qwen2.5-VL-7B-Instruct")):
        rows.append(_row("grpo", dataset, model, "avg_acc", 40.0))
        for k, method in enumerate(("cppo", "fastrl")):
            rows.append(_row(method, dataset, model, F.SPEEDUP_METRIC, 1.5 + k, 1.2 + k, 1.8 + k))
            rows.append(_row(method, dataset, model, "speedup_vs_grpo_ci95", 9.0, 8.0, 10.0))  # wall-clock: not drawn
            rows.append(_row(method, dataset, model, F.ACCURACY_METRIC, -1.0 - k, -3.0 - k, 1.0 - k))
    rows.append(_row("gspo", "Geometry3K", "Qwen2.5-VL-3B-Instruct", F.SPEEDUP_METRIC, 1.1, 1.0, 1.2))  # no accuracy row
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    return path


def test_points_pair_speedup_and_accuracy_intervals_per_setting(tmp_path: Path) -> None:
    points = F.read_points(_small_table(tmp_path / "table1.csv"))
    assert list(points) == [("Geometry3K", "Qwen2.5-VL-3B-Instruct"), ("GeoQA8K-R1V", "Qwen2.5-VL-7B-Instruct")]
    g3k = {p.method: p for p in points[("Geometry3K", "Qwen2.5-VL-3B-Instruct")]}
    assert set(g3k) == {"cppo", "fastrl"}  # grpo is the reference; gspo lacks an accuracy interval
    assert g3k["fastrl"].speedup == F.Interval(2.5, 2.2, 2.8)  # the CPU-time row, not the wall-clock one
    assert g3k["fastrl"].d_accuracy == F.Interval(-2.0, -4.0, 0.0)


def test_the_figure_is_written_as_png(tmp_path: Path) -> None:
    out = F.write_figure(_small_table(tmp_path / "table1.csv"), tmp_path / "fig" / F.FIGURE_NAME)
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000


def test_no_paired_rows_is_an_error_naming_the_figure(tmp_path: Path) -> None:
    path = tmp_path / "table1.csv"
    with path.open("w", newline="") as fh:
        csv.DictWriter(fh, fieldnames=FIELDS).writeheader()
    with pytest.raises(ValueError, match=F.FIGURE_NAME):
        F.write_figure(path, tmp_path / F.FIGURE_NAME)


def test_make_figures_collect_draws_it_from_the_scale_table(tmp_path: Path) -> None:
    _small_table(tmp_path / "table1.csv")
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path, launcher="inprocess")
    assert tmp_path / F.FIGURE_NAME in figures_target.collect(ctx)


def test_make_figures_collect_skips_it_without_paired_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (tmp_path / "table1.csv").open("w", newline="") as fh:  # one seed: no intervals
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerow(_row("fastrl", "Geometry3K", "Qwen2.5-VL-3B-Instruct", F.SPEEDUP_METRIC, 1.8))
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path, launcher="inprocess")
    assert figures_target.collect(ctx) == []
    assert "not drawn" in capsys.readouterr().out


def test_one_seed_rows_without_intervals_draw_nothing(tmp_path: Path) -> None:
    """`make figures SCALE=smoke` (one seed) failed: float('n/a') on table1.csv's interval columns."""
    rows = [_row("fastrl", "Geometry3K", "Qwen2.5-VL-3B-Instruct", F.SPEEDUP_METRIC, 1.5, "n/a", "n/a"),
            _row("fastrl", "Geometry3K", "Qwen2.5-VL-3B-Instruct", F.ACCURACY_METRIC, -1.0, "n/a", "n/a")]
    path = tmp_path / "table1.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    assert not any(F.read_points(path).values())
