"""mini-geo through the Qwen2.5-VL path: images -> vision tokens -> rollout -> log-probs -> update."""

from __future__ import annotations

from fastrl.config import load_config
from fastrl.training.metrics import read_metrics
from fastrl.training.pipeline import Trainer


def test_mini_geo_trains_through_the_vl_path(tmp_path):
    cfg = load_config("methods/fastrl.yaml", [f"trainer.run_dir={tmp_path}", "data.task=mini-geo",
                                              "model.kind=qwen2_5_vl", "trainer.resume=false"], scale="smoke")
    trainer = Trainer(cfg)
    prompt = trainer.encode(trainer.train_records[0])
    assert prompt.model_inputs["pixel_values"].ndim == 2 and prompt.model_inputs["image_grid_thw"].shape == (1, 3)
    summary = trainer.fit()
    steps = [r for r in read_metrics(tmp_path) if "timing_s/step" in r]
    assert summary["steps"] == 2 and all(r["tokens/trained"] > 0 for r in steps)
    assert all(abs(r["actor/loss"]) < 1e3 for r in steps)
