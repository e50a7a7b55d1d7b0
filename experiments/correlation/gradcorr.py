"""App. B.2 / Fig. 5: does token-level Jaccard similarity track gradient similarity?

For each question: sample ``n`` responses from the policy (T = 1), score them with the run's
reward, compute GRPO advantages, and for every response the gradient of its sequence log-prob
``g_i = d/dθ sum_t log π(y_t | x, y_<t)`` with respect to all trainable parameters, flattened.
For every pair (i, j) of responses to the same question record

- the token-level Jaccard similarity ``|T_i ∩ T_j| / |T_i ∪ T_j|`` of their response token sets
  (``1 - fastrl.algorithms.similarity.jaccard_distance_matrix``: MDAP's measure), and
- the cosine similarity ``<g_i, g_j> / (|g_i| |g_j|)``.

Pairs with equal advantages ("same-advantage pairs", MDAP's groups) are the paper's population;
pairs with different advantages are kept as a reference. Pearson and Spearman correlations
(scipy) are computed over same-advantage pairs, and over those of questions with mixed rewards
(non-zero advantages: the pairs whose gradients actually enter the update).

The policy-gradient term of response i is ``A_i g_i``; for a same-advantage pair the factor is
shared, so the cosine of ``g_i, g_j`` equals that of their policy-gradient terms (up to sign
when A = 0, where the term vanishes; those pairs are reported apart).

Exact gradients are used when the model has at most ``exact_max_params`` parameters; larger
models (paper scale) are count-sketched to ``sketch_dim`` buckets (each coordinate hashed to a
bucket with a random sign, the hash fixed per parameter tensor by a seed), which preserves inner
products in expectation.
"""

from __future__ import annotations

import csv
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from fastrl.algorithms.advantages import grpo_advantages
from fastrl.algorithms.similarity import jaccard_distance_matrix
from fastrl.data.schema import Record
from fastrl.models.forward import collate, response_logprobs
from fastrl.rollout.base import PromptInput, SamplingConfig

PAIR_COLUMNS = ("question", "i", "j", "reward_i", "reward_j", "adv_i", "adv_j", "same_adv", "mixed_question",
                "len_i", "len_j", "jaccard_sim", "grad_cosine")


@dataclass(frozen=True)
class CorrelationSettings:
    questions: int
    n: int
    max_new_tokens: int
    exact_max_params: int
    sketch_dim: int  # 0: exact gradients only (error when the model is larger than exact_max_params)
    temperature: float = 1.0
    seed: int = 0
    adv_tol: float = 0.0  # |A_i - A_j| <= adv_tol counts as the same advantage (0: exact, discrete rewards)


@dataclass
class Pair:
    question: str
    i: int
    j: int
    reward_i: float
    reward_j: float
    adv_i: float
    adv_j: float
    same_adv: bool
    mixed_question: bool
    len_i: int
    len_j: int
    jaccard_sim: float
    grad_cosine: float


class GradientFlattener:
    """Flattened (or count-sketched) gradient of the model's trainable parameters."""

    def __init__(self, model: torch.nn.Module, *, exact_max_params: int, sketch_dim: int, seed: int,
                 cache_hashes: bool = False) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.num_params = sum(p.numel() for p in self.params)
        self.sketch_dim = 0 if self.num_params <= exact_max_params else sketch_dim
        if self.num_params > exact_max_params and sketch_dim <= 0:
            raise ValueError(
                f"correlation: the model has {self.num_params} parameters > exact_max_params={exact_max_params}; "
                "set sketch_dim > 0 (count sketch) or raise exact_max_params"
            )
        self.seed = seed
        # Regenerating a tensor's hash costs about as much as its share of a backward pass on one
        # core (1.7 CPU s per call for SmolLM2's 134.5 M parameters); caching it costs 5 bytes per
        # parameter (int32 bucket, int8 sign), which the real-model measurement can afford.
        self._cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        if cache_hashes and self.sketch_dim:
            self._cache = [self._compact(*self._hash(k, p)) for k, p in enumerate(self.params)]

    @staticmethod
    def _compact(bucket: torch.Tensor, sign: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return bucket.to(torch.int32), sign.to(torch.int8)

    @property
    def dim(self) -> int:
        return self.sketch_dim or self.num_params

    def _hash(self, k: int, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bucket [numel] and sign [numel] of parameter tensor k (regenerated: never stored)."""
        g = torch.Generator(device=p.device).manual_seed(self.seed * 1_000_003 + k)
        bucket = torch.randint(0, self.sketch_dim, (p.numel(),), generator=g, device=p.device)
        sign = torch.randint(0, 2, (p.numel(),), generator=g, device=p.device).float().mul_(2).sub_(1)
        return bucket, sign

    def __call__(self) -> torch.Tensor:
        """The current ``.grad`` of every parameter -> float32 vector [dim] on the CPU."""
        if not self.sketch_dim:
            return torch.cat([
                (p.grad.detach().float().reshape(-1) if p.grad is not None else torch.zeros(p.numel()))
                .cpu() for p in self.params
            ])
        out = torch.zeros(self.sketch_dim, device=self.params[0].device)
        for k, p in enumerate(self.params):
            if p.grad is None:
                continue
            bucket, sign = self._cache[k] if self._cache is not None else self._hash(k, p)
            out.index_add_(0, bucket, p.grad.detach().float().reshape(-1) * sign)
        return out.cpu()


def sequence_logprob_grads(
    model: torch.nn.Module, prompt: PromptInput, responses: Sequence[Sequence[int]], pad_id: int,
    flatten: GradientFlattener,
) -> torch.Tensor:
    """Gradient of sum_t log π(y_t) for each response to one prompt -> [n, dim] (one backward each)."""
    model.eval()  # no dropout: the gradient of the policy as it samples
    rows = []
    for resp in responses:
        # Zeroed in place, not freed: re-allocating every .grad per response (0.5 GB for a 135 M
        # model) costs page faults that showed as a quarter of the CPU time; the values are the same.
        model.zero_grad(set_to_none=False)
        batch = collate([prompt], [list(resp)], pad_id)
        logp = response_logprobs(model, batch)  # [1, R]
        logp.sum().backward()
        rows.append(flatten())
    model.zero_grad(set_to_none=True)
    return torch.stack(rows)


def cosine_matrix(g: torch.Tensor) -> torch.Tensor:
    """[n, D] -> [n, n] cosine similarities (float64; a zero gradient gives cosine 0)."""
    g = g.double()
    norms = g.norm(dim=1, keepdim=True)
    unit = g / norms.clamp_min(1e-30)
    return unit @ unit.T


def question_pairs(
    uid: str, token_ids: Sequence[Sequence[int]], rewards: Sequence[float], grads: torch.Tensor, adv_tol: float,
) -> list[Pair]:
    """Every pair of responses to one question, with Jaccard similarity and gradient cosine."""
    n = len(token_ids)
    r = torch.tensor(rewards, dtype=torch.float32)
    adv = grpo_advantages(r, [uid] * n)
    mixed = bool(r.max() > r.min())
    jac = 1.0 - jaccard_distance_matrix([list(t) for t in token_ids]).double()
    cos = cosine_matrix(grads)
    out = []
    for i in range(n):
        for j in range(i + 1, n):
            out.append(Pair(uid, i, j, float(r[i]), float(r[j]), float(adv[i]), float(adv[j]),
                            bool(abs(float(adv[i]) - float(adv[j])) <= adv_tol), mixed, len(token_ids[i]),
                            len(token_ids[j]), float(jac[i, j]), float(cos[i, j])))
    return out


def correlate(pairs: Sequence[Pair]) -> dict[str, float]:
    """Pearson and Spearman of (jaccard_sim, grad_cosine) with p-values; NaN below 3 pairs."""
    from scipy import stats

    x = np.array([p.jaccard_sim for p in pairs])
    y = np.array([p.grad_cosine for p in pairs])
    out: dict[str, float] = {"n_pairs": float(len(pairs))}
    if len(pairs) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        out.update({k: float("nan") for k in ("pearson_r", "pearson_p", "spearman_rho", "spearman_p")})
    else:
        pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
        out.update({"pearson_r": float(pr.statistic), "pearson_p": float(pr.pvalue),
                    "spearman_rho": float(sr.statistic), "spearman_p": float(sr.pvalue)})
    out["mean_cosine"] = float(y.mean()) if len(y) else float("nan")
    out["mean_jaccard_sim"] = float(x.mean()) if len(x) else float("nan")
    return out


def summarize_pairs(pairs: Sequence[Pair]) -> dict[str, dict[str, float]]:
    same = [p for p in pairs if p.same_adv]
    return {
        "same_adv": correlate(same),
        "same_adv_mixed": correlate([p for p in same if p.mixed_question]),
        "same_adv_zero": correlate([p for p in same if not p.mixed_question]),
        "diff_adv": correlate([p for p in pairs if not p.same_adv]),
        "all": correlate(pairs),
    }


def run_correlation(
    model: torch.nn.Module,
    engine: Any,
    encode: Any,
    score: Any,
    records: Sequence[Record],
    settings: CorrelationSettings,
    *,
    pad_id: int,
    out_dir: Path,
    cache_hashes: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    """Sample, score, differentiate, correlate; writes responses.jsonl, pairs.csv and summary.json
    into ``out_dir``.

    ``engine``: a RolloutEngine over ``model``; ``encode(record) -> PromptInput``;
    ``score(texts, records) -> list of {"overall", ...}`` (the run's reward). ``cache_hashes``:
    see GradientFlattener (same numbers, more memory). ``log(line)``: progress per question.

    Every response is scored and responses.jsonl written before the first backward pass, and
    pairs.csv is rewritten after each question, so a run stopped during the gradients leaves the
    similarity regime of all responses and the pairs of the questions done (summary.json, which
    marks a finished run, comes last).
    """
    t0, c0 = time.perf_counter(), time.process_time()
    out_dir.mkdir(parents=True, exist_ok=True)
    flatten = GradientFlattener(model, exact_max_params=settings.exact_max_params, sketch_dim=settings.sketch_dim,
                                seed=settings.seed, cache_hashes=cache_hashes)
    prompts = [encode(r) for r in records]
    sampling = SamplingConfig(temperature=settings.temperature, top_p=1.0, top_k=0,
                              max_new_tokens=settings.max_new_tokens, seed=settings.seed)
    responses = engine.generate(prompts, settings.n, sampling)
    by_q: dict[int, list[Any]] = {}
    for resp in responses:
        by_q.setdefault(resp.prompt_index, []).append(resp)
    t_gen, c_gen = time.perf_counter() - t0, time.process_time() - c0
    groups = score_groups(by_q, records, score)
    (out_dir / "responses.jsonl").write_text("".join(
        json.dumps({"uid": records[qi].uid, "reward": rw, "response_ids": t}) + "\n"
        for qi, (ids, rewards) in groups.items() for rw, t in zip(rewards, ids)))
    pairs: list[Pair] = []
    for done, (qi, (ids, rewards)) in enumerate(groups.items(), 1):
        grads = sequence_logprob_grads(model, prompts[qi], ids, pad_id, flatten)
        pairs += question_pairs(records[qi].uid, ids, rewards, grads, settings.adv_tol)
        write_pairs(pairs, out_dir / "pairs.csv")
        if log is not None:
            log(f"question {done}/{len(groups)}: {time.perf_counter() - t0:.0f} s wall, "
                f"{time.process_time() - c0:.0f} CPU s so far")
    rewards_all = [rw for _, rewards in groups.values() for rw in rewards]
    summary = {
        "settings": asdict(settings),
        "num_questions": len(by_q),
        "num_trajectories": len(responses),
        "num_parameters": flatten.num_params,
        "gradient_dim": flatten.dim,
        "sketched": bool(flatten.sketch_dim),
        "mean_reward": float(np.mean(rewards_all)) if rewards_all else float("nan"),
        "mixed_questions": int(len({p.question for p in pairs if p.mixed_question})),
        "correlation": summarize_pairs(pairs),
        "gen_seconds": t_gen,
        "gen_cpu_seconds": c_gen,
        "total_seconds": time.perf_counter() - t0,
        "total_cpu_seconds": time.process_time() - c0,
        "torch_threads": torch.get_num_threads(),
    }
    tmp = out_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))  # NaN (too few pairs) is written as NaN; json reads it
    tmp.replace(out_dir / "summary.json")
    return summary


def score_groups(by_q: dict[int, list[Any]], records: Sequence[Record], score: Any,
                 ) -> dict[int, tuple[list[list[int]], list[float]]]:
    """question index -> (response token ids, rewards), in question order."""
    out = {}
    for qi, group in sorted(by_q.items()):
        scores = score([r.text for r in group], [records[qi]] * len(group))
        ids = [list(r.response_ids) for r in group]
        if any(len(t) == 0 for t in ids):
            raise ValueError(f"correlation: an empty response for question uid={records[qi].uid}")
        out[qi] = (ids, [float(s["overall"]) for s in scores])
    return out


def write_pairs(pairs: Sequence[Pair], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=PAIR_COLUMNS)
        w.writeheader()
        for p in pairs:
            w.writerow(asdict(p))


def read_pairs(path: Path) -> list[Pair]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for r in rows:
        out.append(Pair(r["question"], int(r["i"]), int(r["j"]), float(r["reward_i"]), float(r["reward_j"]),
                        float(r["adv_i"]), float(r["adv_j"]), r["same_adv"] == "True", r["mixed_question"] == "True",
                        int(r["len_i"]), int(r["len_j"]), float(r["jaccard_sim"]), float(r["grad_cosine"])))
    return out


def sample_records(records: Sequence[Record], k: int, seed: int) -> list[Record]:
    """``k`` records drawn without replacement (all of them when there are fewer)."""
    if k >= len(records):
        return list(records)
    return random.Random(seed).sample(list(records), k)
