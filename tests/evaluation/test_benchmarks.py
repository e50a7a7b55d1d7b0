"""Issue 15, defect 9: ``data.ood_variants`` files are scored with each benchmark's own template
and reward (MathVision: ``fastrl_mc`` / ``mc``), not with the training set's."""

from __future__ import annotations


import pytest

from fastrl.config import load_config
from fastrl.data.schema import Record
from fastrl.data.templates import FASTRL_INSTRUCTION, MC_INSTRUCTION
from fastrl.evaluation.benchmarks import BENCHMARK_FORMATS, benchmark_format
from fastrl.models.inputs import PromptInput
from fastrl.rollout.base import Response
from fastrl.policy import PolicyKit, PolicySpec
from fastrl.training.pipeline import Trainer, ood_formats

MC = Record(uid="mathvision-testmini-1", problem="Which shape is larger?", answer="circle", source="MathVision",
            choices=["square", "circle"])


def test_each_prepared_benchmark_has_its_own_pair():
    from data_prep.all import SCRIPTS

    assert {m.SPEC.title for m in SCRIPTS} == set(BENCHMARK_FORMATS)  # every data_prep dataset
    assert benchmark_format("mv", [MC], ("fastrl_math", "math")) == ("fastrl_mc", "mc")
    geoqa = Record(uid="g", problem="p", answer="4cm", source="GeoQA8K-R1V")
    assert benchmark_format("g", [geoqa], ("fastrl_math", "math")) == ("fastrl_math", "geoqa")
    own = Record(uid="o", problem="p", answer="1", source="my-set")
    assert benchmark_format("o", [own], ("easyr1_math", "easyr1_math")) == ("easyr1_math", "easyr1_math")
    with pytest.raises(ValueError, match="several sources"):
        benchmark_format("mix", [MC, geoqa], ("fastrl_math", "math"))


def test_ood_files_get_their_format_generated_tasks_the_training_one():
    files = load_config("methods/grpo.yaml", ["data.task=files", "model.source=path", "model.path=some/model", "data.template=fastrl_math"], scale="smoke")
    assert ood_formats(files, {"mathvision_testmini": [MC]}, own=True) == {"mathvision_testmini": ("fastrl_mc", "mc")}
    task = load_config("methods/grpo.yaml", [], scale="smoke")
    assert ood_formats(task, {"long": [MC]}, own=False) == {"long": (task.data.template, task.data.reward)}
    # Which one a run uses is its task's to say (fastrl.tasks): a generated task's variants share the training pair.
    from fastrl.mini.tasks import generated_splits

    assert generated_splits(task.data).own_ood_formats is False


class _Encoder:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def tokenize(self, uid: str, text: str, images: list) -> PromptInput:
        self.texts.append(text)
        return PromptInput(uid=uid, prompt_ids=[1, 2])

    def materialize(self, tokens: PromptInput) -> PromptInput:
        return tokens


class _Engine:
    def generate(self, prompts, n, sampling):
        return [Response(prompt_index=i, response_ids=[3], text="<thinking>x</thinking> \\boxed{B}", logprobs=[0.0],
                         finish_reason="stop") for i in range(len(prompts)) for _ in range(n)]


def test_validate_prompts_and_grades_an_ood_file_in_its_own_format():
    """The trainer's validation of a MathVision file: the MC instruction reaches the engine and
    the letter answer B (= "circle") is graded correct by ``mc``; under the training pair
    (fastrl_math / math) the same response would score 0."""
    trainer = object.__new__(Trainer)
    trainer.cfg = load_config("methods/grpo.yaml", ["data.task=files", "model.source=path", "model.path=some/model", "data.template=fastrl_math"], scale="smoke")
    encoder = _Encoder()
    spec = PolicySpec(path="some/model", template="fastrl_math", reward="math")
    trainer.policy = PolicyKit(spec=spec, model=None, processor=None, engine=_Engine(), encoder=encoder, pad_id=0, eos_ids=[])
    got = trainer.validate([MC], ("fastrl_mc", "mc"))
    assert got["val/accuracy"] == 1.0
    assert MC_INSTRUCTION in encoder.texts[0] and FASTRL_INSTRUCTION not in encoder.texts[0]
    assert "A. square\nB. circle" in encoder.texts[0]
    text = _Engine().generate([None], 1, None)[0].text
    assert trainer.policy.score([text], [MC])[0][0]["accuracy"] == 0.0  # what the training pair gave
