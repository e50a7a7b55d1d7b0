"""Fig. 5 measurement: the pieces on hand-made inputs, then one real measurement on a tiny policy."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest
import torch

from experiments.correlation import gradcorr as G
from experiments.grid import Context


def test_pairs_identical_responses_are_fully_similar():
    grads = torch.tensor([[1.0, 0.0, 2.0], [1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    pairs = G.question_pairs("q", [[5, 6, 7], [7, 6, 5], [8, 9]], [1.0, 1.0, 0.0], grads, adv_tol=0.0)
    assert [(p.i, p.j) for p in pairs] == [(0, 1), (0, 2), (1, 2)]
    same = pairs[0]
    assert same.same_adv and same.mixed_question and same.jaccard_sim == 1.0 and math.isclose(same.grad_cosine, 1.0)
    assert not pairs[1].same_adv and pairs[1].jaccard_sim == 0.0 and math.isclose(pairs[1].grad_cosine, 0.0)
    half = G.question_pairs("q", [[1, 2], [2, 3]], [0.0, 0.0], torch.eye(2), adv_tol=0.0)[0]
    assert half.same_adv and not half.mixed_question and math.isclose(half.jaccard_sim, 1 / 3, rel_tol=1e-6)


def test_correlate_detects_a_monotone_relation():
    pairs = [G.Pair("q", 0, 1, 1, 1, 0, 0, True, True, 1, 1, x, x ** 3) for x in (0.1, 0.2, 0.4, 0.7, 0.9)]
    c = G.correlate(pairs)
    assert c["spearman_rho"] == pytest.approx(1.0) and 0.9 < c["pearson_r"] < 1.0 and c["n_pairs"] == 5
    assert math.isnan(G.correlate(pairs[:2])["pearson_r"])


def test_flattener_exact_and_sketched():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    grads = []
    for _ in range(2):
        model.zero_grad()
        model(torch.randn(4, 64)).pow(2).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    exact = G.GradientFlattener(model, exact_max_params=10**6, sketch_dim=0, seed=0)
    sketch = G.GradientFlattener(model, exact_max_params=10, sketch_dim=2**16, seed=3)
    assert exact.dim == sum(p.numel() for p in model.parameters()) and sketch.dim == 2**16
    vecs = {"exact": [], "sketch": []}
    for g in grads:
        for n, p in model.named_parameters():
            p.grad = g[n].clone()
        vecs["exact"].append(exact())
        vecs["sketch"].append(sketch())
    flat = torch.cat([g[n].reshape(-1) for n, _ in model.named_parameters() for g in grads[:1]])
    assert torch.equal(vecs["exact"][0], flat)
    cos = lambda a, b: float(a @ b / (a.norm() * b.norm()))  # noqa: E731
    assert cos(*vecs["sketch"]) == pytest.approx(cos(*vecs["exact"]), abs=0.05)  # inner products preserved
    with pytest.raises(ValueError, match="exact_max_params"):
        G.GradientFlattener(model, exact_max_params=10, sketch_dim=0, seed=0)


def test_real_measurement_on_a_tiny_policy(tmp_path):
    """Sample, score, back-propagate and correlate with an untrained tiny Qwen2 (mini-math, smoke)."""
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.algorithms.similarity import jaccard_distance_matrix

    from experiments.correlation import target as T

    policy = build_tiny_model_dir(TinyModelSpec(kind="qwen2", hidden_size=128, num_layers=1, num_heads=2,
                                                num_kv_heads=2, intermediate_size=128), tmp_path / "policy", seed=0)
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out", launcher="inprocess")
    summary = T.measure(ctx, "math12k", "llama_8b", 1, policy_path=policy)
    st = T.settings_for("smoke", 1)
    assert summary["num_questions"] == st.questions and summary["num_trajectories"] == st.questions * st.n
    assert not summary["sketched"] and summary["gradient_dim"] == summary["num_parameters"]
    out = T.out_dir(ctx, "math12k", "llama_8b", 1)
    rows = list(csv.DictReader(open(out / "pairs.csv")))
    assert len(rows) == st.questions * len(list(combinations(range(st.n), 2)))
    assert all(-1.0 - 1e-6 <= float(r["grad_cosine"]) <= 1.0 + 1e-6 for r in rows)
    assert all((r["adv_i"] == r["adv_j"]) == (r["same_adv"] == "True") for r in rows)
    assert json.loads((out / "summary.json").read_text())["correlation"]["same_adv"]["n_pairs"] == \
        sum(r["same_adv"] == "True" for r in rows)
    # Jaccard and gradients are recomputed independently for one question
    pairs = G.read_pairs(out / "pairs.csv")
    assert pairs and all(0.0 <= p.jaccard_sim <= 1.0 for p in pairs)
    assert jaccard_distance_matrix([[1, 2], [2, 3]])[0, 1].item() == pytest.approx(2 / 3)


def test_cached_hashes_sketch_exactly_as_regenerated_ones():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 4))
    model(torch.randn(3, 32)).sum().backward()
    fresh = G.GradientFlattener(model, exact_max_params=10, sketch_dim=64, seed=5)
    cached = G.GradientFlattener(model, exact_max_params=10, sketch_dim=64, seed=5, cache_hashes=True)
    assert torch.equal(fresh(), cached())


def test_per_response_gradients_do_not_accumulate():
    """.grad is zeroed in place between responses: each row is that response's gradient alone."""
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.models.forward import collate, response_logprobs
    from fastrl.rollout.base import PromptInput
    from transformers import AutoModelForCausalLM

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model_dir(TinyModelSpec(kind="qwen2", hidden_size=128, num_layers=1, num_heads=2,
                                                  num_kv_heads=2, intermediate_size=64), Path(tmp) / "p", seed=0)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    prompt = PromptInput(uid="q", prompt_ids=[5, 6, 7])
    responses = [[8, 9], [10, 11, 12]]
    flat = G.GradientFlattener(model, exact_max_params=10**8, sketch_dim=0, seed=0)
    rows = G.sequence_logprob_grads(model, prompt, responses, 0, flat)
    for row, resp in zip(rows, responses):
        model.zero_grad(set_to_none=True)
        response_logprobs(model, collate([prompt], [resp], 0)).sum().backward()
        assert torch.allclose(row, flat(), atol=1e-6)


def test_a_run_stopped_in_the_gradients_leaves_responses_and_finished_pairs(tmp_path, monkeypatch):
    """responses.jsonl (all of them) before the first backward, pairs.csv after each question,
    summary.json only at the end."""
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir

    from experiments.correlation import target as T

    policy = build_tiny_model_dir(TinyModelSpec(kind="qwen2", hidden_size=128, num_layers=1, num_heads=2,
                                                num_kv_heads=2, intermediate_size=64), tmp_path / "policy", seed=0)
    real_grads, calls = G.sequence_logprob_grads, []

    def stop_at_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_grads(*args, **kwargs)

    monkeypatch.setattr(G, "sequence_logprob_grads", stop_at_second)
    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out", launcher="inprocess")
    with pytest.raises(KeyboardInterrupt):
        T.measure(ctx, "math12k", "llama_8b", 1, policy_path=policy)
    st = T.settings_for("smoke", 1)
    out = T.out_dir(ctx, "math12k", "llama_8b", 1)
    assert len((out / "responses.jsonl").read_text().splitlines()) == st.questions * st.n
    assert len(G.read_pairs(out / "pairs.csv")) == st.n * (st.n - 1) // 2  # the first question's
    assert not (out / "summary.json").exists()


def test_a_measurement_of_another_policy_is_refused_or_set_aside_not_reused(tmp_path, monkeypatch):
    """summary.json alone counted as done: on Dec 6 both mini measurements were of the warm starts
    before the SFT anneal (cache key de97f0ab5c9c, now 85ea3a43151f) and would have been reused."""
    import fastrl.training.setup as setup
    from experiments.correlation import target as T
    from experiments.runner import SUPERSEDED_DIR, RunError

    ctx = Context(scale="smoke", seeds=[1], runs_root=tmp_path / "runs", out_dir=tmp_path / "out", launcher="inprocess")
    setting = T.load_table(T.TARGET)["settings"][0]
    out = T.out_dir(ctx, setting["dataset"], setting["model"], 1)
    out.mkdir(parents=True)
    (out / "summary.json").write_text("{}")
    (out / "policy.json").write_text(json.dumps({"policy": "/elsewhere/.cache/sft/mini-geo-qwen2_5_vl-old"}))
    measured = []
    monkeypatch.setattr(T, "measure", lambda c, d, m, s: measured.append((d, m, s)) or
                        {"correlation": {"same_adv": {"n_pairs": 0, "pearson_r": 0.0, "spearman_rho": 0.0}}})
    monkeypatch.setattr(T, "load_table", lambda name: {"settings": [setting]})  # post's loop: this setting only
    monkeypatch.setattr(setup, "resolve_policy_path", lambda cfg: Path("/here/.cache/sft/mini-geo-qwen2_5_vl-new"))
    with pytest.raises(RunError, match="measured the policy .*-old.*--set-aside-superseded"):
        T.post(ctx, [])
    assert measured == []

    monkeypatch.setattr(setup, "resolve_policy_path", lambda cfg: Path("/there/.cache/sft/mini-geo-qwen2_5_vl-old"))
    T.post(ctx, [])  # the same warm start (by its key, wherever the cache is): reused
    assert measured == []

    monkeypatch.setattr(setup, "resolve_policy_path", lambda cfg: Path("/here/.cache/sft/mini-geo-qwen2_5_vl-new"))
    T.post(replace(ctx, set_aside_superseded=True), [])
    assert measured == [(setting["dataset"], setting["model"], 1)]
    assert len(list((tmp_path / "runs" / SUPERSEDED_DIR).glob("*/correlation/smoke/*/seed1/policy.json"))) == 1
