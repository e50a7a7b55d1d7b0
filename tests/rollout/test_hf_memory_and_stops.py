"""HFRolloutEngine: log-probs gathered step by step (no per-step logits kept), and one stop set.

Defect 6 of issue 15: ``generate(output_logits=True)`` kept float32 [batch, vocab] logits for every
generated token (~80 GB per chunk at the paper's 64 x 2,048 x 151,936). Defect 5: HF stopped on
the tokenizer's EOS only while vLLM also stops on generation_config.json's ``eos_token_id``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from fastrl.mini.tasks import generate_task
from fastrl.models.forward import collate
from fastrl.models.loaders import load_policy
from fastrl.models.processing import PromptEncoder
from fastrl.policy import PolicySpec, load_policy_kit, stop_tokens_of
from fastrl.rollout.base import SamplingConfig, stop_token_ids
from fastrl.rollout.hf import HFRolloutEngine, generation_config
from tests.mini.conftest import one_torch_thread, text_model_dir  # noqa: F401  (fixtures)

SUPPRESS = [3, 4, 5]


def _engine(model_dir: Path, num: int, batch_size: int = 16):
    model, proc = load_policy(model_dir)
    enc = PromptEncoder.from_processor(proc)
    tok = enc.tokenizer
    prompts = [enc.encode(r.uid, r.problem, []) for r in generate_task("mini-math", split="val", num=num, seed=0)]
    eng = HFRolloutEngine(model, tok, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                          batch_size=batch_size, suppress_token_ids=SUPPRESS)
    return model, tok, prompts, eng


def _output_logits_path(model, tok, prompts, n: int, sampling: SamplingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's log-probs as they were computed before the fix: generate(output_logits=True),
    then log-softmax of each step's raw logits (one chunk, seeded as the engine seeds chunk 0)."""
    rows = [p for p in prompts for _ in range(n)]
    batch = collate(rows, [[] for _ in rows], tok.pad_token_id)
    cfg = generation_config(sampling, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                            suppress_token_ids=SUPPRESS)
    cfg.output_logits = True
    model.eval()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(sampling.seed)
        out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             generation_config=cfg)
    seq = out.sequences[:, batch["input_ids"].shape[1]:]
    logps = torch.stack([torch.log_softmax(step.float(), dim=-1).gather(-1, seq[:, t:t + 1]).squeeze(-1)
                         for t, step in enumerate(out.logits)], dim=1)
    return seq, logps


@pytest.mark.parametrize("sampling", [
    SamplingConfig(temperature=1.0, max_new_tokens=12, seed=3),
    SamplingConfig(temperature=0.7, top_k=6, top_p=0.9, max_new_tokens=12, seed=5),  # warpers active
    SamplingConfig(temperature=0.0, max_new_tokens=12, seed=0),
], ids=["t1", "warped", "greedy"])
def test_logprobs_equal_the_output_logits_path(text_model_dir: Path, sampling: SamplingConfig) -> None:
    """Same seed, same tokens, same raw log-probs (before temperature / top-k / top-p / suppression)."""
    model, tok, prompts, eng = _engine(text_model_dir, 3)
    out = eng.generate(prompts, 2, sampling)
    seq, old = _output_logits_path(model, tok, prompts, 2, sampling)
    assert len(out) == seq.shape[0]
    for row, r in enumerate(out):
        k = len(r.response_ids)
        assert r.response_ids == seq[row, :k].tolist()
        assert (torch.tensor(r.logprobs, dtype=torch.float64) - old[row, :k].double()).abs().max() <= 1e-6


def test_generate_keeps_no_per_step_logits(text_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """generate is asked for neither logits nor scores (each would hold steps x batch x vocab),
    and the engine holds no [batch, vocab] tensor once a chunk is done."""
    model, tok, prompts, eng = _engine(text_model_dir, 2)
    seen: list[dict] = []
    real = model.generate

    def spy(*args, **kwargs):
        cfg = kwargs["generation_config"]
        seen.append({"output_logits": cfg.output_logits, "output_scores": cfg.output_scores})
        out = real(*args, **kwargs)
        assert getattr(out, "logits", None) is None and getattr(out, "scores", None) is None
        return out

    monkeypatch.setattr(model, "generate", spy)
    out = eng.generate(prompts, 2, SamplingConfig(temperature=1.0, max_new_tokens=10, seed=0))
    assert len(out) == 4 and seen
    assert all(not s["output_logits"] and not s["output_scores"] for s in seen)
    assert not model._forward_hooks  # the recorder's hook is removed after each chunk


def test_stop_token_ids_union_in_order() -> None:
    assert stop_token_ids(7, [9, 7]) == [7, 9]
    assert stop_token_ids(None, 5) == [5]
    assert stop_token_ids(4, None) == [4]
    with pytest.raises(ValueError, match="no stop token"):
        stop_token_ids(None, None)


def _with_generation_eos(src: Path, dst: Path, extra_eos: int, tokenizer_eos: int) -> Path:
    shutil.copytree(src, dst)
    (dst / "generation_config.json").write_text(json.dumps({"eos_token_id": [tokenizer_eos, extra_eos]}))
    return dst


def test_hf_engine_stops_on_generation_config_eos(text_model_dir: Path, tmp_path: Path) -> None:
    """A checkpoint whose generation_config.json names a second EOS (Llama-3.1's <|eot_id|> beside
    <|end_of_text|>): the kit's HF engine stops on it, as vLLM does. Before the fix it ran on."""
    model, tok, prompts, eng = _engine(text_model_dir, 1)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=6, seed=0)
    [free] = eng.generate(prompts, 1, greedy)  # stops on the tokenizer's EOS only
    first = free.response_ids[0]
    assert first != tok.eos_token_id and len(free.response_ids) > 1
    model_dir = _with_generation_eos(text_model_dir, tmp_path / "model", first, tok.eos_token_id)
    assert stop_tokens_of(model_dir, tok) == [tok.eos_token_id, first]
    kit = load_policy_kit(PolicySpec(path=model_dir), "cpu")
    assert kit.engine.eos_token_ids == [tok.eos_token_id, first] == kit.eos_ids
    [stopped] = kit.engine.generate(prompts, 1, greedy)
    assert stopped.response_ids == [first] and stopped.finish_reason == "stop"


def test_both_engines_get_the_same_stop_set(text_model_dir: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's vllm factory passes the HF engine's stop set to vLLM (no vLLM started here)."""
    import fastrl.rollout.vllm as vllm_module
    from fastrl.config import VLLMEngineConfig
    from fastrl.policy import build_engine

    model, proc = load_policy(text_model_dir)
    tok = PromptEncoder.from_processor(proc).tokenizer
    model_dir = _with_generation_eos(text_model_dir, tmp_path / "model", 11, tok.eos_token_id)
    captured: dict = {}
    monkeypatch.setattr(vllm_module, "VLLMRolloutEngine", lambda path, **kw: captured.update(kw, path=path))
    hf = build_engine(PolicySpec(path=model_dir), model, proc)
    build_engine(PolicySpec(path=model_dir, engine="vllm", vllm=VLLMEngineConfig(max_model_len=300)), model, proc)
    assert captured["stop_token_ids"] == hf.eos_token_ids == [tok.eos_token_id, 11]
    assert captured["max_model_len"] == 300 and captured["enable_sleep_mode"] is True
    assert captured["dtype"] == "float32" and captured["path"] == str(model_dir)


def test_logprobs_of_scores_given_responses_like_generate(text_model_dir: Path) -> None:
    model, tok, prompts, eng = _engine(text_model_dir, 3, batch_size=2)
    out = eng.generate(prompts, 1, SamplingConfig(temperature=1.0, max_new_tokens=8, seed=1))
    scored = eng.logprobs_of([prompts[r.prompt_index] for r in out], [r.response_ids for r in out])
    for r, lps in zip(out, scored):
        assert lps == pytest.approx(r.logprobs, abs=1e-4)
    assert eng.logprobs_of([], []) == []


def test_a_rank_without_prompts_still_calls_generate(text_model_dir: Path) -> None:
    """The trainer calls every engine on every rank, also with no prompts (see test_hf_zero3)."""
    _, _, _, eng = _engine(text_model_dir, 1)
    assert eng.generate([], 2, SamplingConfig(max_new_tokens=4, seed=0)) == []
    assert eng.generate([], [], SamplingConfig(max_new_tokens=4, seed=0)) == []
