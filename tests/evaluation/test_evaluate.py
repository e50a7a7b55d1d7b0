"""evaluate() with a fake engine returning canned responses."""

from __future__ import annotations

from typing import Sequence

import pytest

from fastrl.data.schema import Record
from fastrl.evaluation.evaluate import GREEDY, PAPER_VALIDATION, evaluate, validation_sampling
from fastrl.evaluation.metrics import markdown_table
from fastrl.rollout.base import PromptInput, Response, RolloutEngine, SamplingConfig


class CannedEngine:
    """Returns, for prompt uid u, the texts canned[u][0..n-1]; records the calls."""

    name = "canned"

    def __init__(self, canned: dict[str, list[str]], drop_last: bool = False):
        self.canned = canned
        self.calls: list[tuple[int, int | Sequence[int], SamplingConfig]] = []
        self.drop_last = drop_last

    def generate(self, prompts, n, sampling):
        self.calls.append((len(prompts), n, sampling))
        out = []
        for i, p in enumerate(prompts):
            for j in range(n):
                out.append(Response(prompt_index=i, response_ids=[1, 2], text=self.canned[p.uid][j], logprobs=[-0.1, -0.2], finish_reason="stop"))
        return out[:-1] if self.drop_last else out

    shares_trainer_weights = False

    def update_weights(self, named_tensors):
        raise NotImplementedError

    def logprobs_of(self, prompts, response_ids):
        raise NotImplementedError

    def sleep(self):
        pass

    def wake_up(self, tags=None):
        pass

    def close(self):
        pass


def encode(rec: Record) -> PromptInput:
    return PromptInput(uid=rec.uid, prompt_ids=[0, 1, 2])


def ok(x: str) -> str:
    return f"<thinking>so</thinking> \\boxed{{{x}}}"


def _bench() -> dict[str, list[Record]]:
    math = [Record(uid="m1", problem="1+1?", answer="2", source="MATH"), Record(uid="m2", problem="2+2?", answer="4", source="MATH")]
    mc = [Record(uid="v1", problem="<image>q", answer="60", source="MathVista", images=["x"], choices=["30", "60"])]
    return {"MATH": math, "MathVista": mc}


def test_engine_is_a_rollout_engine():
    assert isinstance(CannedEngine({}), RolloutEngine)


def test_evaluate_avg_and_pass_at_k():
    canned = {"m1": [ok("2"), ok("3"), "\\boxed{2}", ok("5")], "m2": [ok("1")] * 4, "v1": [ok("B"), ok("A"), ok("60"), ok("B")]}
    eng = CannedEngine(canned)
    res = evaluate(eng, encode, _bench(), sampling=PAPER_VALIDATION, k=4, reward_fn_name={"MATH": "math", "MathVista": "mc"})
    m = res["benchmarks"]["MATH"]
    assert m["accuracy"] == 0.5  # first samples: m1 right, m2 wrong
    assert m["avg@4"] == pytest.approx((2 / 4 + 0) / 2)
    assert m["pass@4"] == pytest.approx(0.5) and m["pass@1"] == pytest.approx(m["avg@4"])
    v = res["benchmarks"]["MathVista"]
    assert v["avg@4"] == pytest.approx(0.75) and v["pass@4"] == 1.0
    assert res["average"]["avg@4"] == pytest.approx((0.25 + 0.75) / 2)
    assert res["per_problem"]["MATH"][0]["n_correct"] == 2
    assert eng.calls[0][1] == 4 and eng.calls[0][2].temperature == 0.6 and eng.calls[0][2].top_p == 0.95
    assert "| Avg. |" in markdown_table(res)


def test_greedy_k1_and_failures_counted():
    canned = {"m1": [ok("2")], "m2": [ok("4")], "v1": [ok("A")]}
    res = evaluate(CannedEngine(canned), encode, _bench(), sampling=GREEDY, k=1, reward_fn_name={"MATH": "math", "MathVista": "mc"})
    assert res["benchmarks"]["MATH"]["accuracy"] == 1.0 and res["benchmarks"]["MathVista"]["accuracy"] == 0.0
    assert res["average"]["accuracy"] == 0.5 and res["benchmarks"]["MATH"]["reward/failures"] == 0
    ground = {"G": [Record(uid="g", problem="<image>x", answer="not a box", source="R", images=["x"])]}
    res = evaluate(CannedEngine({"g": ["[0,0,1,1]"]}), encode, ground, sampling=GREEDY, k=1, reward_fn_name="grounding_iou")
    assert res["benchmarks"]["G"]["reward/failures"] == 1 and res["benchmarks"]["G"]["accuracy"] == 0.0


def test_grounding_threshold():
    ground = {"G": [Record(uid="g1", problem="<image>x", answer="[0, 0, 10, 10]", source="R", images=["x"]),
                    Record(uid="g2", problem="<image>x", answer="[0, 0, 10, 10]", source="R", images=["x"])]}
    canned = {"g1": ["\\boxed{[0, 0, 10, 8]}"], "g2": ["\\boxed{[5, 0, 15, 10]}"]}  # IoU 0.8 and 1/3
    res = evaluate(CannedEngine(canned), encode, ground, sampling=GREEDY, k=1, reward_fn_name="grounding_iou")
    assert res["benchmarks"]["G"]["accuracy"] == 0.5
    assert res["benchmarks"]["G"]["mean_reward"] == pytest.approx((0.8 + 1 / 3) / 2)


def test_evaluate_errors():
    canned = {"m1": [ok("2")] * 2, "m2": [ok("4")] * 2, "v1": [ok("B")] * 2}
    with pytest.raises(ValueError, match="k > 1 with greedy"):
        evaluate(CannedEngine(canned), encode, _bench(), sampling=GREEDY, k=2, reward_fn_name="math")
    with pytest.raises(ValueError, match="returned 1 responses for prompt 1, expected k=2"):
        evaluate(CannedEngine(canned, drop_last=True), encode, {"MATH": _bench()["MATH"]}, sampling=PAPER_VALIDATION, k=2, reward_fn_name="math")
    with pytest.raises(ValueError, match="unknown reward function"):
        evaluate(CannedEngine(canned), encode, _bench(), sampling=GREEDY, k=1, reward_fn_name="nope")
    with pytest.raises(ValueError, match="unknown validation sampling"):
        validation_sampling("hot", max_new_tokens=8)
    assert validation_sampling("paper", max_new_tokens=8, seed=3).temperature == 0.6
