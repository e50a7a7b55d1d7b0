"""HFRolloutEngine: ragged n, EOS handling, seeding, raw log-probs == response_logprobs, sync."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastrl.mini.tasks import generate_task
from fastrl.models.forward import collate, response_logprobs
from fastrl.models.loaders import load_policy
from fastrl.models.processing import PromptEncoder
from fastrl.rollout.base import RolloutEngine, SamplingConfig
from fastrl.rollout.hf import HFRolloutEngine
from tests.mini.conftest import one_torch_thread, text_model_dir, vl_model_dir  # noqa: F401  (fixtures)


def _setup(model_dir: Path, task: str, num: int, **engine_kwargs):
    model, proc = load_policy(model_dir)
    enc = PromptEncoder.from_processor(proc)
    tok = enc.tokenizer
    recs = generate_task(task, split="val", num=num, seed=0)
    prompts = [enc.encode(r.uid, r.problem, r.images) for r in recs]
    kwargs = dict(eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id, batch_size=4)
    kwargs.update(engine_kwargs)
    return model, tok, prompts, HFRolloutEngine(model, tok, **kwargs)


def _assert_logprobs_match(model, prompts, responses, pad_id: int) -> None:
    batch = collate([prompts[r.prompt_index] for r in responses], [r.response_ids for r in responses], pad_id)
    with torch.no_grad():
        logp = response_logprobs(model, batch)
    for i, r in enumerate(responses):
        assert len(r.logprobs) == len(r.response_ids)
        torch.testing.assert_close(logp[i, :len(r.logprobs)], torch.tensor(r.logprobs), atol=1e-4, rtol=0)


def test_ragged_n_prompt_major_and_logprobs(text_model_dir: Path) -> None:
    model, tok, prompts, eng = _setup(text_model_dir, "mini-math", 3)
    assert isinstance(eng, RolloutEngine) and eng.name == "hf"
    out = eng.generate(prompts, [2, 0, 3], SamplingConfig(temperature=1.0, max_new_tokens=6, seed=1))
    assert [r.prompt_index for r in out] == [0, 0, 2, 2, 2]
    for r in out:
        assert 1 <= len(r.response_ids) <= 6 and r.finish_reason in ("stop", "length")
        assert r.text == tok.decode(r.response_ids, skip_special_tokens=True)
        assert all(lp <= 0 for lp in r.logprobs)
    _assert_logprobs_match(model, prompts, out, tok.pad_token_id)
    assert len(eng.generate(prompts, 2, SamplingConfig(max_new_tokens=2, seed=0))) == 6
    with pytest.raises(ValueError, match="n has 2 entries for 3 prompts"):
        eng.generate(prompts, [1, 1], SamplingConfig())


def test_eos_cut_and_finish_reason(text_model_dir: Path) -> None:
    # Half the vocabulary counts as EOS: responses stop early and often, the rest run to length.
    model, tok = load_policy(text_model_dir)
    eos = list(range(0, len(tok), 2))
    _, _, prompts, eng = _setup(text_model_dir, "mini-math", 4, eos_token_ids=eos, batch_size=8)
    out = eng.generate(prompts, 4, SamplingConfig(temperature=1.0, max_new_tokens=3, seed=0))
    reasons = {r.finish_reason for r in out}
    assert reasons == {"stop", "length"}
    for r in out:
        is_eos = [t in eos for t in r.response_ids]
        if r.finish_reason == "stop":
            assert is_eos[-1] and not any(is_eos[:-1])  # cut right after the first EOS, EOS kept
        else:
            assert len(r.response_ids) == 3 and not any(is_eos)
    _assert_logprobs_match(model, prompts, out, tok.pad_token_id)


def test_greedy_and_seeding(text_model_dir: Path) -> None:
    model, tok, prompts, eng = _setup(text_model_dir, "mini-math", 3)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=5)
    g1, g2 = eng.generate(prompts, 2, greedy), eng.generate(prompts, 2, greedy)
    assert [r.response_ids for r in g1] == [r.response_ids for r in g2]
    assert g1[0].response_ids == g1[1].response_ids  # greedy: copies of a prompt agree
    # Greedy picks the argmax of the raw logits at every step.
    p = prompts[0].prompt_ids
    with torch.no_grad():
        first = model(input_ids=torch.tensor([p])).logits[0, -1].argmax().item()
    assert g1[0].response_ids[0] == first
    rng = torch.get_rng_state()
    s = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=7)
    a, b = eng.generate(prompts, 4, s), eng.generate(prompts, 4, s)
    assert torch.equal(torch.get_rng_state(), rng)  # seeded sampling leaves the caller's RNG alone
    assert [r.response_ids for r in a] == [r.response_ids for r in b]
    c = eng.generate(prompts, 4, SamplingConfig(temperature=1.0, max_new_tokens=8, seed=8))
    assert [r.response_ids for r in a] != [r.response_ids for r in c]


def test_top_k_one_is_greedy_and_logprobs_stay_raw(text_model_dir: Path) -> None:
    model, tok, prompts, eng = _setup(text_model_dir, "mini-math", 2)
    greedy = eng.generate(prompts, 1, SamplingConfig(temperature=0.0, max_new_tokens=4))
    topk1 = eng.generate(prompts, 1, SamplingConfig(temperature=0.7, top_k=1, max_new_tokens=4, seed=3))
    assert [r.response_ids for r in greedy] == [r.response_ids for r in topk1]
    # Log-probs are of the raw (T=1, unfiltered) distribution, not the truncated one (which is 0).
    assert all(lp < 0 for r in topk1 for lp in r.logprobs)
    _assert_logprobs_match(model, prompts, topk1, tok.pad_token_id)


def test_bad_sampling_is_an_error(text_model_dir: Path) -> None:
    _, _, prompts, eng = _setup(text_model_dir, "mini-math", 1)
    for bad, match in [(dict(temperature=-1.0), "temperature"), (dict(top_p=0.0), "top_p"),
                       (dict(top_k=-1), "top_k"), (dict(max_new_tokens=0), "max_new_tokens")]:
        with pytest.raises(ValueError, match=match):
            eng.generate(prompts, 1, SamplingConfig(**bad))


def test_update_weights(text_model_dir: Path) -> None:
    model, tok, prompts, eng = _setup(text_model_dir, "mini-math", 2)
    eng.update_weights(model.named_parameters())  # colocated: the same tensors, nothing copied
    assert eng.num_synced_tensors == 0
    trainer_copy, _ = load_policy(text_model_dir)
    with torch.no_grad():
        for p in trainer_copy.parameters():
            p.mul_(1.5)
    eng.update_weights(trainer_copy.named_parameters())
    assert eng.num_synced_tensors == len(list(trainer_copy.parameters()))
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), trainer_copy.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2)
    with pytest.raises(ValueError, match="unknown parameter 'nope'"):
        eng.update_weights([("nope", torch.zeros(1))])
    name, p = next(iter(trainer_copy.named_parameters()))
    with pytest.raises(ValueError, match=f"{name} has shape"):
        eng.update_weights([(name, torch.zeros(3))])


def test_vl_end_to_end(vl_model_dir: Path) -> None:
    model, tok, prompts, eng = _setup(vl_model_dir, "mini-geo", 3)
    image_ids = {model.config.image_token_id, model.config.video_token_id,
                 model.config.vision_start_token_id, model.config.vision_end_token_id}
    assert set(eng.suppress_token_ids) == image_ids
    out = eng.generate(prompts, [2, 1, 2], SamplingConfig(temperature=1.0, max_new_tokens=8, seed=0))
    assert [r.prompt_index for r in out] == [0, 0, 1, 2, 2]
    assert not any(t in image_ids for r in out for t in r.response_ids)
    assert model.model.rope_deltas is None  # no stale multimodal RoPE state left on the module
    _assert_logprobs_match(model, prompts, out, tok.pad_token_id)


class _EngineLikeWrapper(torch.nn.Module):
    """What DeepSpeed hands the trainer: ``.module`` is the model, ``.config`` is its own dict."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.module = model
        self.config = {"train_batch_size": 8}

    def generate(self, *args, **kwargs):
        return self.module.generate(*args, **kwargs)


def test_multimodal_tokens_are_suppressed_through_a_deepspeed_like_wrapper(vl_model_dir: Path) -> None:
    """A DeepSpeed-wrapped VL model suppressed nothing (its .config is a dict), and a sampled
    <|image_pad|> crashed the next forward ("Image features and image tokens do not match")."""
    model, proc = load_policy(vl_model_dir)
    tok = PromptEncoder.from_processor(proc).tokenizer
    eng = HFRolloutEngine(_EngineLikeWrapper(model), tok, eos_token_ids=[tok.eos_token_id],
                          pad_token_id=tok.pad_token_id, batch_size=4)
    assert set(eng.suppress_token_ids) == {model.config.image_token_id, model.config.video_token_id,
                                           model.config.vision_start_token_id, model.config.vision_end_token_id}
