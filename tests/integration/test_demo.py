"""`make demo`'s driver at smoke scale: the three arms run and summary.json has the promised keys."""

from __future__ import annotations

import json

from fastrl.demo import accuracy_at, run_demo


def test_demo_writes_the_summary(tmp_path):
    run_demo(tmp_path, scale="smoke", overrides=["trainer.total_steps=2", "data.num_val=8"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["methods"]) == {"grpo", "fastrl", "fastrl_fixed_updates"}
    for m in summary["methods"].values():
        for key in ("wall_s", "cpu_s", "steps", "acc_before", "acc_after", "acc_after_se", "tokens_generated",
                    "tokens_trained", "kept_fraction"):
            assert m[key] is not None, key
        assert m["steps"] == 2 and m["tokens_trained"] <= m["tokens_generated"]
    steps = [json.loads(line) for line in (tmp_path / "fastrl_fixed_updates" / "metrics.jsonl").read_text().splitlines()]
    assert [s["actor/optimizer_steps"] for s in steps if "actor/optimizer_steps" in s] == [4.0, 4.0]  # App. C.1
    final = [s for s in steps if s.get("phase") == "val_final"][0]
    assert final["val/samples_per_problem"] == 8.0 and final["val/num"] == 8.0
    text = (tmp_path / "summary.md").read_text()
    assert "speedup vs GRPO" in text and "fastrl_fixed_updates** trained" in text
    # an interval over the validation's samples, or the reason there is none (tests/test_demo_summary.py)
    assert "95 % interval" in text or "no interval: the final validation's" in text
    fastrl = summary["methods"]["fastrl"]  # its time against GRPO's per token (fastrl.training.token_bound)
    assert fastrl["bound_s"] > 0 and fastrl["bound_efficiency"] == fastrl["bound_s"] / fastrl["wall_s"]


def test_accuracy_at_takes_the_last_point_within_budget():
    curve = [{"wall_s": 0.0, "accuracy": 0.5}, {"wall_s": 10.0, "accuracy": 0.6}, {"wall_s": 20.0, "accuracy": 0.7}]
    assert accuracy_at(curve, 15.0) == 0.6 and accuracy_at(curve, 20.0) == 0.7
