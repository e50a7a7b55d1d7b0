"""experiments.correlation.real's pure parts: the bootstrap over questions and the MDAP similarity
regime of a set of sampled responses (the measurement itself needs the real model)."""

from __future__ import annotations

import math

from experiments.correlation.gradcorr import Pair
from experiments.correlation.real import bootstrap_by_question, similarity_regime


def _pair(q: str, j: float, c: float) -> Pair:
    return Pair(q, 0, 1, 0.0, 0.0, 0.0, 0.0, True, False, 3, 3, j, c)


def test_bootstrap_interval_brackets_a_perfect_correlation() -> None:
    pairs = [_pair(f"q{k}", x / 10, 2 * x / 10 + 0.1) for k in range(5) for x in range(k, k + 4)]
    out = bootstrap_by_question(pairs, reps=200, seed=0)
    assert out["replicates"] == 200
    assert all(math.isclose(v, 1.0) for v in out["pearson_ci95"] + out["spearman_ci95"])


def test_similarity_regime_counts_seed_members_and_keeps_everything_at_tau_0() -> None:
    responses = [{"uid": "a", "reward": 0.0, "response_ids": [1, 2, 3]},
                 {"uid": "a", "reward": 0.0, "response_ids": [1, 2, 9]},  # J with its seed: 2 / 4
                 {"uid": "b", "reward": 1.0, "response_ids": [4, 5]},
                 {"uid": "b", "reward": 0.0, "response_ids": [6, 7]}]
    out = similarity_regime(responses, d=1)
    assert out["responses"] == 4 and out["pairs"] == 1 and out["histogram"][5] == 1
    assert out["kept_fraction"]["0.0"]["mdap"] == 1.0
    assert out["kept_fraction"]["1.0"]["mdap"] == 0.75  # the member is dropped at tau = 1


def test_bootstrap_of_no_pairs_is_nan_not_an_error() -> None:
    out = bootstrap_by_question([], reps=50, seed=0)
    assert out["replicates"] == 0 and all(math.isnan(v) for v in out["pearson_ci95"])


def test_runs_of_other_sizes_live_apart_and_a_mismatch_is_refused(tmp_path) -> None:
    """A finished run was reused whatever the command asked: its numbers came out under the new
    command's sizes. Now each size has its own directory and a mismatch stops the run."""
    import json

    import pytest

    from experiments.correlation.real import check_reuse, run_dir

    a = run_dir(tmp_path, 8, 8, 128, 1 << 20, 0, 1)
    assert a != run_dir(tmp_path, 24, 8, 128, 1 << 20, 0, 1) != run_dir(tmp_path, 8, 8, 64, 1 << 20, 0, 1)
    wanted = {"n": 8, "max_new_tokens": 128, "sketch_dim": 1 << 20, "seed": 0, "temperature": 1.0}
    assert not check_reuse(a, wanted)
    a.mkdir(parents=True)
    (a / "summary.json").write_text(json.dumps({"settings": {**wanted, "questions": 8}}))
    assert check_reuse(a, wanted)
    with pytest.raises(SystemExit, match="max_new_tokens"):
        check_reuse(a, {**wanted, "max_new_tokens": 64})


def test_similarity_md_keeps_the_real_row_when_either_side_is_rewritten(tmp_path) -> None:
    """similarity.md is rendered from similarity.json plus similarity_real.json: re-measuring the
    stand-ins (experiments.similarity.measure) no longer drops the real model's row."""
    import json

    from experiments.correlation.real import label, write_similarity
    from experiments.similarity.measure import render

    responses = [{"uid": "a", "reward": 0.0, "response_ids": [1, 2, 3]},
                 {"uid": "a", "reward": 0.0, "response_ids": [1, 2, 9]}]
    row = similarity_regime(responses, d=2)
    (tmp_path / "similarity.json").write_text(json.dumps({"scale": "mini", "batches": 4, "results": {"stand-in": row}}))
    write_similarity(row, 1, "python -m experiments.correlation.real --questions 2", tmp_path)
    md = (tmp_path / "similarity.md").read_text()
    assert f"| {label(1)} | 2 | 1 |" in md and "| stand-in | 2 | 1 |" in md and "--questions 2" in md
    assert render(tmp_path) == md


def test_an_unfinished_run_is_reported_as_unfinished(tmp_path) -> None:
    import json

    from experiments.correlation.gradcorr import write_pairs
    from experiments.correlation.real import report, to_markdown

    responses = [{"uid": q, "reward": 0.0, "response_ids": ids} for q in ("a", "b")
                 for ids in ([1, 2, 3], [1, 2, 9], [4, 5, 6])]
    (tmp_path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses))
    write_pairs([_pair("a", x / 10, x / 5) for x in range(4)], tmp_path / "pairs.csv")  # only "a" finished
    wanted = {"n": 3, "max_new_tokens": 8, "sketch_dim": 64, "seed": 0, "temperature": 1.0}
    r = report(tmp_path, reps=20, seed=0, partial=wanted, decode=lambda ids: "<thinking>" if 9 in ids else "x")
    assert not r["finished"] and r["num_questions"] == 1 and r["settings"]["questions"] == 2
    assert r["response_stats"] == {"responses": 6, "at_length_limit": 0, "with_thinking_tag": 2, "with_boxed": 0}
    assert r["similarity"]["responses"] == 6
    md = to_markdown(r, "cmd", 1)
    assert "UNFINISHED" in md and "pairs of 1 of 2 problems" in md


def test_sketch_check_cosines_match_the_float64_ones() -> None:
    import torch

    from experiments.correlation.sketch_check import cosines

    torch.manual_seed(0)
    vecs = [torch.randn(1000) for _ in range(3)]
    want = [float((vecs[i].double() @ vecs[j].double()) / (vecs[i].double().norm() * vecs[j].double().norm()))
            for i, j in ((0, 1), (0, 2), (1, 2))]
    got = cosines(vecs)
    assert all(math.isclose(g, w, abs_tol=1e-12) for g, w in zip(got, want))
    from experiments.correlation.sketch_check import dot64

    assert math.isclose(dot64(vecs[0], vecs[1], chunk=7), float(vecs[0].double() @ vecs[1].double()), abs_tol=1e-9)
