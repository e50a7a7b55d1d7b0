"""What tau means at a given scale: the seed-member Jaccard similarity inside MDAP's buckets.

For each stand-in (the text model of ``make demo`` and both visual stand-ins of Table 1) this
rolls out a few steps of the warm-started policy exactly as training does (same prompts, n,
sampling), computes GRPO advantages, and records for every non-seed bucket member its token
Jaccard similarity with the bucket's seed (docs/algorithms.md, MDAP step 4). It then applies
MDAP at each tau to the same batches, before and after the refill, so the histogram and the
kept fraction per tau sit side by side. Nothing is trained.

    python -m experiments.similarity.measure --scale mini --batches 4

writes ``paper_figures/generated/<scale>/similarity.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any, Sequence

from fastrl.algorithms.pruning import SIMILARITY_BINS, mdap_prune

TAUS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
OUT_ROOT = Path("paper_figures/generated")


def stand_ins(scale: str, seed: int) -> list[tuple[str, str, list[str]]]:
    """(label, config, overrides): the demo's text model and Table 1's two Geometry3K stand-ins."""
    from experiments.spec import build_runs

    out = [("text (mini-math, demo)", "methods/fastrl.yaml", [f"trainer.seed={seed}"])]
    with tempfile.TemporaryDirectory() as tmp:
        for r in build_runs("table1", scale, [seed], Path(tmp)):
            if r.variant == "fastrl" and r.dataset == "geometry3k":
                label = f"visual {r.model} ({r.dataset})"
                out.append((label, r.config, [o for o in r.overrides if not o.startswith("trainer.run_dir=")]))
    return out


def measure(config: str, overrides: Sequence[str], scale: str, batches: int, run_dir: Path) -> dict[str, Any]:
    """Similarities and kept fractions over ``batches`` rollout steps of the warm-start policy."""
    from fastrl.config import load_config
    from fastrl.training.metrics import StageTimer
    from fastrl.training.pipeline import Trainer

    cfg = load_config(config, [*overrides, f"trainer.run_dir={run_dir}", "trainer.progress=false"], scale=scale)
    trainer = Trainer(cfg)
    d = trainer.align_to()
    sims: list[float] = []
    kept = {tau: [0, 0] for tau in TAUS}  # before / after the refill
    total = buckets = 0
    try:
        for _ in range(batches):
            batch, _ = trainer.rollout_with_filter(StageTimer())
            trainer.compute_advantages(batch)
            total += len(batch)
            for tau in TAUS:
                r = mdap_prune(batch.advantages, batch.uids, batch.response_ids, tau=tau, align_to=d)
                kept[tau][0] += r.kept_before_refill
                kept[tau][1] += len(r.kept)
                if tau == TAUS[0]:
                    sims.extend(r.seed_similarities)
                    buckets += r.num_buckets
            trainer.state.step += 1
    finally:
        trainer.close()
    hist = [0] * SIMILARITY_BINS
    for s in sims:
        hist[min(int(s * SIMILARITY_BINS), SIMILARITY_BINS - 1)] += 1
    return {
        "responses": total, "buckets": buckets, "pairs": len(sims), "align_to": d,
        "fraction_below_0.2": sum(s < 0.2 for s in sims) / max(len(sims), 1),
        "mean_similarity": sum(sims) / max(len(sims), 1),
        "histogram": hist,
        "kept_fraction": {str(t): {"mdap": k[0] / total, "after_refill": k[1] / total} for t, k in kept.items()},
    }


def to_markdown(results: dict[str, dict[str, Any]], scale: str, batches: int) -> str:
    edges = [f"[{b / SIMILARITY_BINS:.1f}, {(b + 1) / SIMILARITY_BINS:.1f})" for b in range(SIMILARITY_BINS)]
    lines = [f"# Seed-member Jaccard similarity inside MDAP buckets ({scale}, {batches} rollout steps of the warm start)",
             "", "| stand-in | responses | pairs | mean J | J < 0.2 | " + " | ".join(edges) + " |",
             "|---|---|---|---|---|" + "---|" * SIMILARITY_BINS]
    for label, r in results.items():
        total = max(r["pairs"], 1)
        lines.append(f"| {label} | {r['responses']} | {r['pairs']} | {r['mean_similarity']:.2f} | "
                     f"{r['fraction_below_0.2']:.2f} | " + " | ".join(f"{h / total:.2f}" for h in r["histogram"]) + " |")
    lines += ["", "Kept fraction at each tau on the same batches (MDAP alone / after the refill to the mini-batch):",
              "", "| stand-in | d | " + " | ".join(f"tau {t}" for t in TAUS) + " |", "|---|---|" + "---|" * len(TAUS)]
    for label, r in results.items():
        cells = [f"{r['kept_fraction'][str(t)]['mdap']:.2f} / {r['kept_fraction'][str(t)]['after_refill']:.2f}"
                 for t in TAUS]
        lines.append(f"| {label} | {r['align_to']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


REAL_FILE = "similarity_real.json"  # experiments.correlation.real's row (a real pretrained model)


def render(out: Path) -> str:
    """similarity.md from ``out``'s similarity.json, with the real model's row (REAL_FILE, written
    by ``python -m experiments.correlation.real``) appended when there is one, so re-measuring
    either keeps the other."""
    base = json.loads((out / "similarity.json").read_text())
    results = dict(base["results"])
    note = ""
    if (out / REAL_FILE).is_file():
        real = json.loads((out / REAL_FILE).read_text())
        results[real["label"]] = real["result"]
        note = (f"\nThe {real['label']} row is not a rollout of training: one sample of {real['result']['responses']} "
                f"responses, all questions as one batch, d = n (`{real['command']}`; "
                "correlation_real.md states its sample).\n")
    return to_markdown(results, base["scale"], base["batches"]) + note


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="mini")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="default: paper_figures/generated/<scale>/")
    p.add_argument("--text-only", action="store_true", help="only the text model (a quick check)")
    args = p.parse_args(argv)
    out = Path(args.out or OUT_ROOT / args.scale)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        chosen = stand_ins(args.scale, args.seed)[: 1 if args.text_only else None]
        for i, (label, config, overrides) in enumerate(chosen):
            results[label] = measure(config, overrides, args.scale, args.batches, Path(tmp) / str(i))
            print(f"{label}: {results[label]['pairs']} pairs, J < 0.2: {results[label]['fraction_below_0.2']:.2f}",
                  flush=True)
    (out / "similarity.json").write_text(json.dumps({"scale": args.scale, "batches": args.batches,
                                                     "seed": args.seed, "results": results}, indent=2))
    md = render(out)
    (out / "similarity.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    from fastrl.training.distributed import exit_process

    exit_process(main())  # a DeepSpeed engine joined a process group: skip the teardown ranks abort in
