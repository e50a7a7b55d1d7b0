"""``evaluate()``: generate k responses per problem with a rollout engine, score, aggregate.

The model side is the caller's: ``engine`` implements ``fastrl.rollout.base.RolloutEngine`` and
``encode_prompt(record) -> PromptInput`` builds the prompt (template + tokenizer + images), one for
all benchmarks or one per benchmark (benchmarks with their own templates, evaluated in one process).

Each benchmark is one ``engine.generate`` call (all its problems x k samples, in the engine's
batches): a benchmark's samples do not depend on which other benchmarks share the process, so
evaluating several benchmarks at once and splitting the result (``split_by_benchmark``) gives
the same ``eval.json`` per benchmark as evaluating each alone.
Sampling: ``GREEDY`` (temperature 0, k = 1) or the paper's validation setting
``PAPER_VALIDATION`` (T = 0.6, top-p 0.95, n = 1; use k > 1 for avg@k / pass@k).

A sample counts as correct when its ``accuracy`` ≥ ``correct_threshold`` (default 0.5: for the
binary rewards that is accuracy = 1; for ``grounding_iou`` it is the usual IoU ≥ 0.5).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Mapping, Sequence

from fastrl import metric_keys as K
from fastrl.data.prompt_limit import PromptLimit
from fastrl.data.schema import Record
from fastrl.evaluation.metrics import average_over_benchmarks, benchmark_metrics
from fastrl.logs import Progress
from fastrl.rewards import get_reward_fn, score_batch
from fastrl.rewards.timebox import DEFAULT_TIMEOUT_S
from fastrl.rollout.base import PromptInput, Response, RolloutEngine, SamplingConfig

GREEDY = SamplingConfig(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=2048)
log = logging.getLogger(__name__)
PAPER_VALIDATION = SamplingConfig(temperature=0.6, top_p=0.95, top_k=0, max_new_tokens=2048)


def validation_sampling(kind: str, *, max_new_tokens: int, seed: int | None = None) -> SamplingConfig:
    """``greedy`` or ``paper`` (T = 0.6, top-p 0.95) with the given length and seed."""
    presets = {"greedy": GREEDY, "paper": PAPER_VALIDATION}
    if kind not in presets:
        raise ValueError(f"unknown validation sampling {kind!r}; valid: {sorted(presets)}")
    return dataclasses.replace(presets[kind], max_new_tokens=max_new_tokens, seed=seed)


def _group_by_prompt(responses: Sequence[Response], n_prompts: int, k: int, bench: str) -> list[list[Response]]:
    groups: list[list[Response]] = [[] for _ in range(n_prompts)]
    for r in responses:
        if not 0 <= r.prompt_index < n_prompts:
            raise ValueError(f"{bench}: engine returned prompt_index {r.prompt_index} for {n_prompts} prompts")
        groups[r.prompt_index].append(r)
    for i, g in enumerate(groups):
        if len(g) != k:
            raise ValueError(f"{bench}: engine returned {len(g)} responses for prompt {i}, expected k={k}")
    return groups


def per_benchmark(value: Any, benchmarks: Mapping[str, Any], *, what: str) -> dict[str, Any]:
    """``value`` for every benchmark, or ``value[b]`` when it is a mapping (which must name each one)."""
    if not isinstance(value, Mapping):
        return {b: value for b in benchmarks}
    missing = [b for b in benchmarks if b not in value]
    if missing:
        raise ValueError(f"evaluate: {what} has no entry for benchmark(s) {missing}; it names {sorted(value)}")
    return {b: value[b] for b in benchmarks}


def evaluate(
    engine: RolloutEngine,
    encode_prompt: Callable[[Record], PromptInput] | Mapping[str, Callable[[Record], PromptInput]],
    benchmarks: Mapping[str, Sequence[Record]],
    *,
    sampling: SamplingConfig,
    k: int,
    reward_fn_name: str | Mapping[str, str],
    correct_threshold: float = 0.5,
    reward_timeout_s: float = DEFAULT_TIMEOUT_S,
    keep_responses: bool = False,
    prompt_limit: PromptLimit | None = None,
) -> dict[str, Any]:
    """Evaluate ``engine`` on each benchmark; returns a JSON-ready dict.

    ``reward_fn_name`` (and ``encode_prompt``) is one for all benchmarks or a per-benchmark mapping.
    ``prompt_limit``: problems whose prompt is over its ``max_prompt_length`` never reach the
    engine (vLLM would reject the whole batch): dropped and counted in ``n_over_prompt_limit``, or
    an error naming benchmark, row and uid (its ``policy``).
    Result: ``{"k", "sampling", "reward_fn", "benchmarks": {name: {n_problems, accuracy, avg@k,
    pass@k, pass@1, mean_reward, format_rate, reward/failures, reward/timeouts, gen_s}},
    "average": {...}, "per_problem": {name: [{uid, n_correct, scores[, responses]}]}}``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > 1 and sampling.temperature == 0.0:
        raise ValueError("k > 1 with greedy decoding gives k identical samples; use sampling (e.g. PAPER_VALIDATION)")
    if not benchmarks:
        raise ValueError("evaluate: no benchmarks given")
    fn_names = per_benchmark(reward_fn_name, benchmarks, what="reward_fn_name")
    encoders = per_benchmark(encode_prompt, benchmarks, what="encode_prompt")
    for name in fn_names.values():
        get_reward_fn(name)

    per_bench: dict[str, dict[str, float]] = {}
    per_problem: dict[str, list[dict[str, Any]]] = {}
    for bench, records in benchmarks.items():
        if not records:
            raise ValueError(f"benchmark {bench!r} has no records")
        prompts = [encoders[bench](r) for r in records]
        records, prompts, n_over = _within_prompt_limit(bench, records, prompts, prompt_limit)
        per_bench[bench], per_problem[bench] = _evaluate_benchmark(
            engine, bench, records, prompts, sampling=sampling, k=k, reward_fn_name=fn_names[bench],
            correct_threshold=correct_threshold, reward_timeout_s=reward_timeout_s, keep_responses=keep_responses)
        per_bench[bench]["n_over_prompt_limit"] = float(n_over)

    metric_keys = ["accuracy", f"avg@{k}", f"pass@{k}", "pass@1", "mean_reward", "format_rate"]
    return {
        "k": k,
        "sampling": dataclasses.asdict(sampling),
        "reward_fn": fn_names,
        "correct_threshold": correct_threshold,
        "benchmarks": per_bench,
        "average": average_over_benchmarks(per_bench, list(dict.fromkeys(metric_keys))),
        "per_problem": per_problem,
    }


def _within_prompt_limit(
    bench: str, records: Sequence[Record], prompts: list[PromptInput], prompt_limit: PromptLimit | None,
) -> tuple[list[Record], list[PromptInput], int]:
    """The records and prompts within ``prompt_limit`` (all without one) and how many were dropped."""
    if prompt_limit is None:
        return list(records), prompts, 0
    keep = prompt_limit.keep(records, [len(p.prompt_ids) for p in prompts], [r.uid for r in records],
                             where=f"benchmark {bench!r}")
    if not keep:
        raise ValueError(f"benchmark {bench!r}: every prompt is over {prompt_limit.length_key}="
                         f"{prompt_limit.max_prompt_length} tokens")
    return [records[i] for i in keep], [prompts[i] for i in keep], len(records) - len(keep)


def _evaluate_benchmark(
    engine: RolloutEngine, bench: str, records: Sequence[Record], prompts: Sequence[PromptInput], *,
    sampling: SamplingConfig, k: int, reward_fn_name: str, correct_threshold: float, reward_timeout_s: float,
    keep_responses: bool,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """One benchmark: k samples per prompt, scored; its metrics and its per-problem rows."""
    t0 = time.perf_counter()
    responses = _generate_with_progress(engine, prompts, k, sampling, desc=f"eval {bench}")
    gen_s = time.perf_counter() - t0
    groups = _group_by_prompt(responses, len(records), k, bench)
    flat = [(rec, resp) for rec, g in zip(records, groups) for resp in g]
    scores, stats = score_batch(
        reward_fn_name,
        [resp.text for _, resp in flat],
        [rec.answer for rec, _ in flat],
        [{"choices": rec.choices, "meta": rec.meta, "source": rec.source, "uid": rec.uid} for rec, _ in flat],
        timeout_s=reward_timeout_s,
    )
    correct = [[scores[i * k + j]["accuracy"] >= correct_threshold for j in range(k)] for i in range(len(records))]
    m = benchmark_metrics(correct, k)
    m["mean_reward"] = sum(s["overall"] for s in scores) / len(scores)
    m["format_rate"] = sum(s["format"] for s in scores) / len(scores)
    m[K.REWARD_FAILURES] = stats[K.REWARD_FAILURES]
    m[K.REWARD_TIMEOUTS] = stats[K.REWARD_TIMEOUTS]
    m["gen_s"] = gen_s
    rows = []
    for i, rec in enumerate(records):
        row: dict[str, Any] = {"uid": rec.uid, "n_correct": int(sum(correct[i])),
                               "scores": [scores[i * k + j] for j in range(k)]}
        if keep_responses:
            row["responses"] = [groups[i][j].text for j in range(k)]
        rows.append(row)
    return m, rows


def _generate_with_progress(engine: RolloutEngine, prompts: Sequence[PromptInput], k: int, sampling: SamplingConfig,
                            *, desc: str) -> list[Response]:
    """``engine.generate`` with progress shown (fastrl.logs.Progress) when the engine reports it
    (its optional ``progress`` hook, called with the number of responses each time some finish)."""
    progress = Progress(len(prompts) * k, desc, unit="response", logger=log)
    hooked = hasattr(engine, "progress")
    if hooked:
        engine.progress = progress.update  # type: ignore[attr-defined]
    try:
        return engine.generate(prompts, k, sampling)
    finally:
        if hooked:
            engine.progress = None  # type: ignore[attr-defined]
        progress.close()


def split_by_benchmark(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``evaluate``'s result for several benchmarks -> {benchmark: the result ``evaluate`` returns
    for that benchmark alone} (what one ``eval.json`` per benchmark holds)."""
    out: dict[str, dict[str, Any]] = {}
    for bench, m in results["benchmarks"].items():
        out[bench] = {
            **{key: results[key] for key in ("k", "sampling", "correct_threshold")},
            "reward_fn": {bench: results["reward_fn"][bench]},
            "benchmarks": {bench: m},
            "average": average_over_benchmarks({bench: m}, list(results["average"])),
            "per_problem": {bench: results["per_problem"][bench]},
        }
    return out
