"""The accuracy probe's runner: one smoke run, its log where it ran, nothing moved aside."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.accuracy.probe import run_one, summarize

COMMON = ["--scale", "smoke", "trainer.total_steps=1", "trainer.val_every=0", "trainer.progress=false"]


def test_run_one_keeps_its_log_and_leaves_no_replaced_folder(tmp_path: Path) -> None:
    msg = run_one(tmp_path, "grpo", {"config": "methods/grpo.yaml"}, COMMON, seed=1)
    run_dir = tmp_path / "grpo" / "seed1"
    assert "FAILED" not in msg, (run_dir / "train.log").read_text()[-2000:]
    assert (run_dir / "summary.json").is_file()
    assert "step" in (run_dir / "train.log").read_text()  # the trainer's output, not an empty file
    assert sorted(p.name for p in (tmp_path / "grpo").iterdir()) == ["seed1"]
    assert summarize(run_dir) is not None
    assert run_one(tmp_path, "grpo", {"config": "methods/grpo.yaml"}, COMMON, seed=1).endswith("done before")
    assert json.loads((run_dir / "summary.json").read_text())


def _write_probe_run(run_dir: Path, before: float, after: float, step_s: float, ood: float = 0.1) -> None:
    from fastrl import metric_keys as K

    run_dir.mkdir(parents=True)
    rows = [{K.VAL_ACCURACY_BEFORE: before},
            {K.STEP_TIME: step_s, K.PRUNE_KEPT: 64, K.ROLLOUT_NUM_RESPONSES: 128, K.ROLLOUT_N: 8},
            {K.PHASE: K.PHASE_VAL_FINAL, K.VAL_ACCURACY: after, "ood/ood/accuracy": ood}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_pairs_every_arm_with_the_baseline_asked_for(tmp_path: Path) -> None:
    import pytest

    from experiments.accuracy.probe import report

    arms = {"baseline": "grpo", "seeds": [1, 2], "arms": {"grpo": {}, "grpo_low_lr": {}, "fastrl_low_lr": {}}}
    accs = {"grpo": (0.50, 0.52), "grpo_low_lr": (0.55, 0.57), "fastrl_low_lr": (0.56, 0.57)}
    for arm, (a1, a2) in accs.items():
        _write_probe_run(tmp_path / arm / "seed1", 0.5, a1, 2.0 if arm == "grpo" else 1.0,
                         ood=0.12 if arm == "fastrl_low_lr" else 0.1)
        _write_probe_run(tmp_path / arm / "seed2", 0.5, a2, 2.0 if arm == "grpo" else 1.0)
    _, vs_grpo = report(tmp_path, arms)
    assert vs_grpo["fastrl_low_lr"]["d_acc_vs_base"][0] == pytest.approx(5.5)
    table, vs_low = report(tmp_path, arms, "grpo_low_lr")
    assert vs_low["fastrl_low_lr"]["d_acc_vs_base"][0] == pytest.approx(0.5)
    assert vs_low["grpo"]["d_acc_vs_base"][0] == pytest.approx(-5.0)
    assert vs_low["fastrl_low_lr"]["d_ood_vs_base"][0] == pytest.approx(1.0)  # OOD apart: (2 + 0) / 2 points
    assert "vs grpo_low_lr" in table.splitlines()[0]
    with pytest.raises(ValueError, match="not an arm"):
        report(tmp_path, arms, "dapo")
