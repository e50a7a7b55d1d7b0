"""Issue 15, defect 3: a prompt over data.max_prompt_length (chat template + image tokens) never
reaches an engine: dropped and counted per file / benchmark (``filter``), or an error naming file,
row and uid (``error``), in training, validation, OOD sets and ``fastrl eval``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from data_prep.common import shared_data_dir
from fastrl.config import ConfigError, load_config
from fastrl.data.prompt_limit import PromptLimit, PromptTooLongError
from fastrl.data.schema import Record
from fastrl.data.vision import RELEASED_MAX_PIXELS, RELEASED_MIN_PIXELS
from fastrl.evaluation.evaluate import GREEDY, evaluate
from fastrl.rollout.base import PromptInput, Response

SHARED = shared_data_dir() / "mathvision_testmini"


def test_limit_filters_and_counts_or_names_the_first_row(caplog):
    rows, lengths, uids = ["a", "b", "c"], [10, 11, 12], ["u0", "u1", "u2"]
    with caplog.at_level(logging.WARNING):
        assert PromptLimit(11).keep(rows, lengths, uids, where="x.parquet") == [0, 1]
    assert "x.parquet: dropped 1 of 3 rows" in caplog.text and "'u2'" in caplog.text
    with pytest.raises(PromptTooLongError, match=r"x.parquet, row 2 \(uid='u2'\): the prompt is 12 tokens, over "
                                                 r"data.max_prompt_length=11.*data.prompt_length_policy=filter"):
        PromptLimit(11, "error").keep(rows, lengths, uids, where="x.parquet")
    with pytest.raises(ValueError, match="prompt_length_policy"):
        PromptLimit(11, "truncate")


def test_config_fields_and_their_checks():
    cfg = load_config("methods/grpo.yaml", [], scale="smoke")
    assert cfg.data.max_prompt_length == 2048 and cfg.data.prompt_length_policy == "filter"
    with pytest.raises(ConfigError, match="data.prompt_length_policy"):
        load_config("methods/grpo.yaml", ["data.prompt_length_policy=truncate"], scale="smoke")


def test_mathvision_image_tokens_at_the_released_pixels_without_building_pixels():
    """The lengths the limit sees come from image sizes alone (tokenize builds no pixel tensor):
    11 of MathVision testmini's 304 images need > 2,048 tokens, 3 need > 4,096."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from fastrl.mini.tokenizer import build_mini_tokenizer
    from fastrl.models.processing import PromptEncoder

    processor = Qwen2VLImageProcessorPil(patch_size=14, temporal_patch_size=2, merge_size=2)
    encoder = PromptEncoder(build_mini_tokenizer(), processor, use_chat_template=False,
                            min_pixels=RELEASED_MIN_PIXELS, max_pixels=RELEASED_MAX_PIXELS)
    rows = [json.loads(line) for line in (SHARED / "testmini.jsonl").read_text().splitlines()]
    counts = []
    for row in rows:
        tokens = encoder.tokenize(row["id"], "<image>", [str(SHARED / row["image"])])
        assert tokens.image_refs == [str(SHARED / row["image"])]
        counts.append(tokens.prompt_ids.count(encoder.image_token_id))
    assert len(counts) == 304 and sum(c > 2048 for c in counts) == 11 and sum(c > 4096 for c in counts) == 3
    # the grid tokenize counted is the one the image processor makes (materialize checks it)
    small = min(range(304), key=lambda i: counts[i])
    full = encoder.materialize(encoder.tokenize("s", "<image>", [str(SHARED / rows[small]["image"])]))
    assert full.prompt_ids.count(encoder.image_token_id) == counts[small] and full.model_inputs["pixel_values"].ndim == 2


class _StrictEngine:
    """Fails as vLLM does when one prompt of the batch is over its limit."""

    name = "strict"

    def __init__(self, limit: int):
        self.limit = limit

    def generate(self, prompts, n, sampling):
        assert all(len(p.prompt_ids) <= self.limit for p in prompts), "an over-long prompt reached the engine"
        return [Response(prompt_index=i, response_ids=[1], text="<thinking>t</thinking> \\boxed{2}", logprobs=[-0.1],
                         finish_reason="stop") for i in range(len(prompts)) for _ in range(n)]


def test_evaluate_never_sends_an_over_long_prompt():
    records = [Record(uid=f"m{i}", problem="x " * (i * 10), answer="2", source="MATH") for i in range(4)]
    encode = lambda r: PromptInput(uid=r.uid, prompt_ids=[0] * (len(r.problem.split()) + 1))  # noqa: E731
    out = evaluate(_StrictEngine(15), encode, {"MATH": records}, sampling=GREEDY, k=1, reward_fn_name="math",
                   prompt_limit=PromptLimit(15, length_key="--max-prompt-length"))
    assert out["benchmarks"]["MATH"]["n_problems"] == 2 and out["benchmarks"]["MATH"]["n_over_prompt_limit"] == 2
    with pytest.raises(PromptTooLongError, match=r"benchmark 'MATH', row 2 \(uid='m2'\): the prompt is 21 tokens"):
        evaluate(_StrictEngine(15), encode, {"MATH": records}, sampling=GREEDY, k=1, reward_fn_name="math",
                 prompt_limit=PromptLimit(15, "error"))


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from fastrl.training.pipeline import Trainer

    run = tmp_path_factory.mktemp("run")
    return Trainer(load_config("methods/grpo.yaml", [f"trainer.run_dir={run}", "trainer.resume=false"], scale="smoke"))


def test_trainer_drops_over_long_prompts_per_file(trainer, caplog):
    short = trainer.train_records[0]
    huge = Record(uid="huge", problem="compute 3 + 4 . " * 64_000, answer="7", source="t")  # a 1 MB prompt
    with caplog.at_level(logging.WARNING):
        assert trainer._within_prompt_limit([short, huge], "train.jsonl") == [short]
    assert "train.jsonl: dropped 1 of 2 rows" in caplog.text and "huge" not in trainer._encoded
    trainer.prompt_limit = PromptLimit(2048, "error")
    with pytest.raises(PromptTooLongError, match=r"train.jsonl, row 1 \(uid='huge'\): the prompt is \d+ tokens"):
        trainer._within_prompt_limit([short, huge], "train.jsonl")


def test_trainer_applies_the_limit_to_its_training_set(tmp_path):
    from fastrl.training.pipeline import Trainer

    cfg = load_config("methods/grpo.yaml", [f"trainer.run_dir={tmp_path}", "trainer.resume=false",
                                            "data.max_prompt_length=8", "data.prompt_length_policy=error"], scale="smoke")
    with pytest.raises(PromptTooLongError, match=r"mini-math train, row 0 \(uid='mini-math:.*over data.max_prompt_length=8"):
        Trainer(cfg)
