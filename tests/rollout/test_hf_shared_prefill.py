"""HFRolloutEngine's shared prefill (issue 25): each distinct prompt's KV cache is computed once per
chunk and copied to its rows; the sampling distribution stays the model's.

- Work: the model sees each distinct prompt once (the vision tower each distinct image once),
  then one token per row, with ragged ``n`` and a prompt split over two chunks.
- Log-probs: what the engine reports equals a teacher-forced forward of the same tokens
  (``response_logprobs``, the trainer's forward) within 1e-4 absolute, text and VL.
- Distribution: on a fixed seed, the first tokens of each prompt (two prompts in one call, n = 4,000 and 2,000)
  pass a chi-square test against the model's own softmax (20 equal-mass bins, p > 1e-3), at T = 1
  and T = 0.6, text and VL (whose image placeholder tokens are suppressed, so renormalized away).
- The old path (``shared_prefill=False``) and the new one agree: same greedy tokens, log-probs
  within 1e-5.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from scipy.stats import chi2

from fastrl.mini.tasks import generate_task
from fastrl.models.forward import collate, response_logprobs
from fastrl.models.loaders import load_policy
from fastrl.models.processing import PromptEncoder
from fastrl.rollout.base import SamplingConfig
from fastrl.rollout.hf import HFRolloutEngine
from tests.mini.conftest import one_torch_thread, text_model_dir, vl_model_dir  # noqa: F401  (fixtures)

LOGPROB_ATOL = 1e-4  # engine vs teacher-forced forward (float32; the batch shapes differ)
CHI2_MIN_P = 1e-3  # fixed seed: deterministic, and a wrong distribution fails by orders of magnitude
BINS = 20


def _setup(model_dir: Path, task: str, num: int, **engine_kwargs):
    model, proc = load_policy(model_dir)
    enc = PromptEncoder.from_processor(proc)
    tok = enc.tokenizer
    prompts = [enc.encode(r.uid, r.problem, r.images) for r in generate_task(task, split="val", num=num, seed=0)]
    kwargs = dict(eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id, batch_size=4)
    kwargs.update(engine_kwargs)
    return model, tok, prompts, HFRolloutEngine(model, tok, **kwargs)


def _sharpened(model: torch.nn.Module) -> torch.nn.Module:
    """The model with its output embeddings doubled: a random tiny model is near-uniform over its
    vocabulary (entropy 5.5 nats, top token 2 %), where a wrong distribution would hardly show;
    doubled, the top token has about 27 % and the entropy is 4.5 nats."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(2.0)
    return model


def _teacher_forced(model, prompts, responses, pad_id: int) -> torch.Tensor:
    batch = collate([prompts[r.prompt_index] for r in responses], [r.response_ids for r in responses], pad_id)
    with torch.no_grad():
        return response_logprobs(model, batch)


@pytest.mark.parametrize("model_fixture, task", [("text_model_dir", "mini-math"), ("vl_model_dir", "mini-geo")])
def test_each_distinct_prompt_is_prefilled_once(model_fixture: str, task: str, request: pytest.FixtureRequest) -> None:
    """Old path: every row ran its whole prompt (and its image) through the model."""
    model, tok, prompts, eng = _setup(request.getfixturevalue(model_fixture), task, 3, batch_size=4)
    seen: list[tuple[int, int]] = []  # (rows, positions) of each forward
    images: list[int] = []  # images per vision-tower call
    hooks = [model.register_forward_pre_hook(lambda m, a, kw: seen.append(tuple(kw["input_ids"].shape)),
                                             with_kwargs=True)]
    if hasattr(model.model, "visual"):
        hooks.append(model.model.visual.register_forward_pre_hook(
            lambda m, a, kw: images.append(int((kw.get("grid_thw") if "grid_thw" in kw else a[1]).shape[0])),
            with_kwargs=True))
    ns = [5, 0, 2]  # chunks of 4 rows: [p0 x4], [p0, p2 x2] (p0 split over two chunks)
    out = eng.generate(prompts, ns, SamplingConfig(temperature=1.0, max_new_tokens=3, seed=0))
    for h in hooks:
        h.remove()
    assert [r.prompt_index for r in out] == [0] * 5 + [2] * 2
    width = [max(len(prompts[i].prompt_ids) for i in c) for c in ([0], [0, 2])]
    prefills = [s for s in seen if s[1] > 1]
    assert prefills == [(1, width[0] - 1), (2, width[1] - 1)]  # distinct prompts, all but the last token
    assert all(s[1] == 1 for s in seen if s[1] <= 1)  # then one position per row and step
    if images:
        assert images == [1, 2]  # one image per distinct prompt and chunk, not one per row
    torch.testing.assert_close(_teacher_forced(model, prompts, out, tok.pad_token_id),
                               _padded([r.logprobs for r in out]), atol=LOGPROB_ATOL, rtol=0)


def _padded(rows: list[list[float]]) -> torch.Tensor:
    out = torch.zeros(len(rows), max(len(r) for r in rows))
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r)
    return out


def _equal_mass_bins(probs: torch.Tensor, bins: int) -> list[list[int]]:
    """Token ids grouped into ``bins`` groups of about equal probability (largest first)."""
    order = torch.argsort(probs, descending=True).tolist()
    groups: list[list[int]] = [[]]
    mass = 0.0
    for tok in order:
        if mass >= (len(groups)) / bins and len(groups) < bins:
            groups.append([])
        groups[-1].append(tok)
        mass += float(probs[tok])
    return [g for g in groups if g]


def _chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    total = float(counts.sum())
    groups = _equal_mass_bins(probs, BINS)
    observed = torch.tensor([float(counts[g].sum()) for g in groups], dtype=torch.float64)
    expected = torch.tensor([float(probs[g].sum()) for g in groups], dtype=torch.float64) * total
    stat = float(((observed - expected) ** 2 / expected).sum())
    return float(chi2.sf(stat, df=len(groups) - 1))


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("model_fixture, task", [("text_model_dir", "mini-math"), ("vl_model_dir", "mini-geo")])
def test_first_token_distribution_is_the_models_softmax(
    model_fixture: str, task: str, temperature: float, request: pytest.FixtureRequest,
) -> None:
    model, tok, prompts, eng = _setup(request.getfixturevalue(model_fixture), task, 2, batch_size=1000)
    _sharpened(model)
    ns = [4000, 2000]
    out = eng.generate(prompts, ns, SamplingConfig(temperature=temperature, max_new_tokens=1, seed=11))
    vocab = model.get_output_embeddings().weight.shape[0]
    for i, prompt in enumerate(prompts):
        batch = collate([prompt], [[]], tok.pad_token_id)
        batch = {k: v for k, v in batch.items() if k not in ("response_ids", "response_mask", "position_ids")}
        with torch.no_grad():
            logits = model(**batch, logits_to_keep=1).logits[0, -1].double()
        raw = torch.log_softmax(logits, dim=-1)
        scaled = logits / temperature
        scaled[eng.suppress_token_ids] = float("-inf")  # never sampled (VL placeholders)
        probs = torch.softmax(scaled, dim=-1)
        rows = [r for r in out if r.prompt_index == i]
        assert len(rows) == ns[i]
        first = torch.tensor([r.response_ids[0] for r in rows])
        p = _chi_square_p(torch.bincount(first, minlength=vocab).double(), probs)
        assert p > CHI2_MIN_P, f"prompt {i}: chi-square p = {p:.2e}"
        # and each reported log-prob is the raw (T = 1) log-softmax of the token drawn
        reported = torch.tensor([r.logprobs[0] for r in rows], dtype=torch.float64)
        assert (reported - raw[first]).abs().max() <= LOGPROB_ATOL


def test_first_token_test_rejects_an_off_by_one_prefill(text_model_dir: Path) -> None:
    """The chi-square check has power against the bug a prefill invites: the first token drawn from
    the position before the prompt's last token (the prefill's own last logits)."""
    model, tok, prompts, eng = _setup(text_model_dir, "mini-math", 1, batch_size=1000)
    _sharpened(model)
    out = eng.generate(prompts, 4000, SamplingConfig(temperature=1.0, max_new_tokens=1, seed=11))
    vocab = model.get_output_embeddings().weight.shape[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompts[0].prompt_ids[:-1]]), logits_to_keep=1).logits[0, -1].double()
    counts = torch.bincount(torch.tensor([r.response_ids[0] for r in out]), minlength=vocab).double()
    assert _chi_square_p(counts, torch.softmax(logits, dim=-1)) < CHI2_MIN_P


@pytest.mark.parametrize("model_fixture, task", [("text_model_dir", "mini-math"), ("vl_model_dir", "mini-geo")])
def test_shared_and_unshared_prefill_agree(model_fixture: str, task: str, request: pytest.FixtureRequest) -> None:
    model_dir = request.getfixturevalue(model_fixture)
    model, tok, prompts, new = _setup(model_dir, task, 3)
    old = HFRolloutEngine(model, tok, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                          batch_size=4, shared_prefill=False)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    a, b = new.generate(prompts, [3, 1, 2], greedy), old.generate(prompts, [3, 1, 2], greedy)
    assert [r.response_ids for r in a] == [r.response_ids for r in b]
    for ra, rb in zip(a, b):
        assert max(abs(x - y) for x, y in zip(ra.logprobs, rb.logprobs)) <= 1e-5
