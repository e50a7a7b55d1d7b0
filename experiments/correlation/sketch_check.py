"""How much of the real-model gradient cosines is the count sketch's error?

The real measurement (``experiments.correlation.real``) sketches 134.5 M-parameter gradients to
2^20 buckets; its cosines sit near 0 (−0.12 to 0.20), where a sketch error of a few hundredths
would weaken any correlation. This recomputes, for the first ``--responses`` responses of the
first problem of a finished real run, the exact float32 gradients (kept in memory: 0.54 GB each)
and their sketches with the run's hash seed and with another, and compares the pair cosines:
exact vs each sketch, and the run's seed vs the committed pairs.csv (the recomputation is the
same computation).

    python -m experiments.correlation.sketch_check --run runs/correlation/real/<sizes>/seed0 --responses 6

writes ``paper_figures/generated/mini/correlation_real_sketch.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any, Sequence

import numpy as np

OUT = Path("paper_figures/generated/mini/correlation_real_sketch.json")


def dot64(a: Any, b: Any, chunk: int = 1 << 22) -> float:
    """<a, b> accumulated in float64 a chunk at a time: float64 copies of whole 134.5 M-long
    vectors (1.1 GB each) took the first version of this check to 12.9 GB resident."""
    return float(sum(a[k:k + chunk].double() @ b[k:k + chunk].double() for k in range(0, a.numel(), chunk)))


def cosines(vectors: Sequence[Any]) -> list[float]:
    """Cosine of every pair (i < j) of ``vectors`` (float64 accumulation)."""
    norms = [dot64(v, v) ** 0.5 for v in vectors]
    return [dot64(vectors[i], vectors[j]) / (norms[i] * norms[j]) for i, j in combinations(range(len(vectors)), 2)]


def check(run: Path, responses: int, other_seed: int) -> dict[str, Any]:
    import torch

    from experiments.correlation.gradcorr import GradientFlattener, read_pairs
    from experiments.correlation.real import load_kit
    from fastrl.data.loaders import load_records
    from fastrl.models.forward import collate, response_logprobs

    summary = json.loads((run / "summary.json").read_text())
    seed, dim = summary["settings"]["seed"], summary["settings"]["sketch_dim"]
    rows = [json.loads(line) for line in (run / "responses.jsonl").read_text().splitlines() if line]
    uid = rows[0]["uid"]
    ids = [r["response_ids"] for r in rows if r["uid"] == uid][:responses]
    record = next(r for r in load_records(run / "questions.parquet") if r.uid == uid)
    kit = load_kit(run / "questions.parquet", seed)
    model, prompt = kit.model.eval(), kit.encode(record)
    run_sketch = GradientFlattener(model, exact_max_params=0, sketch_dim=dim, seed=seed)
    other_sketch = GradientFlattener(model, exact_max_params=0, sketch_dim=dim, seed=other_seed)
    exact, s_run, s_other = [], [], []
    for resp in ids:
        model.zero_grad(set_to_none=False)
        response_logprobs(model, collate([prompt], [list(resp)], kit.pad_id)).sum().backward()
        exact.append(torch.cat([p.grad.detach().reshape(-1).clone() for p in run_sketch.params]))
        s_run.append(run_sketch())
        s_other.append(other_sketch())
    c_exact, c_run, c_other = np.array(cosines(exact)), np.array(cosines(s_run)), np.array(cosines(s_other))
    committed = {(p.i, p.j): p.grad_cosine for p in read_pairs(run / "pairs.csv") if p.question == uid}
    c_committed = np.array([committed[ij] for ij in combinations(range(len(ids)), 2)])
    return {"run": str(run), "question": uid, "responses": len(ids), "pairs": len(c_exact), "sketch_dim": dim,
            "num_parameters": run_sketch.num_params, "run_seed": seed, "other_seed": other_seed,
            "exact_cosine_range": [float(c_exact.min()), float(c_exact.max())],
            "abs_error_run_sketch": {"mean": float(np.abs(c_run - c_exact).mean()),
                                     "max": float(np.abs(c_run - c_exact).max())},
            "abs_error_other_sketch": {"mean": float(np.abs(c_other - c_exact).mean()),
                                       "max": float(np.abs(c_other - c_exact).max())},
            "pearson_exact_vs_run_sketch": float(np.corrcoef(c_exact, c_run)[0, 1]),
            "max_abs_diff_recomputed_vs_committed": float(np.abs(c_run - c_committed).max()),
            "exact": c_exact.tolist(), "run_sketch": c_run.tolist(), "other_sketch": c_other.tolist()}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--responses", type=int, default=6)
    p.add_argument("--other-seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # the box's cores are shared
    t0, c0 = time.perf_counter(), time.process_time()
    result = check(args.run, args.responses, args.other_seed)
    result.update({"command": " ".join(["python -m experiments.correlation.sketch_check",
                                        *(argv if argv is not None else sys.argv[1:])]),
                   "wall_seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0})
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("exact", "run_sketch", "other_sketch")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
