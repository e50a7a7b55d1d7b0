"""The ``hf`` rollout engine: batched transformers ``generate`` with KV cache (the CPU default).

- Prompt-major output; ``n`` may be one int or one per prompt (ragged groups).
- Left padding, sampling with temperature / top-p / top-k, greedy when ``temperature == 0``.
- Seeded: with ``sampling.seed`` set, chunk c is sampled under ``torch.manual_seed(seed + c)``
  inside a forked RNG, so the caller's global RNG stream is left untouched; the same prompts,
  ``n``, seed and ``batch_size`` give the same responses.
- ``Response.logprobs`` are log-probs of the sampled tokens under the RAW logits (temperature 1,
  before top-k/top-p), i.e. the policy's own log pi, comparable to ``response_logprobs`` at
  temperature 1.
- Shared prefill (``shared_prefill``, the default): in each chunk, every distinct prompt's KV cache
  is computed once (one forward over the distinct prompts, all but their last token) and copied to
  each of its rows (``DynamicCache.batch_select_indices``, so ragged ``n`` is just an index);
  ``generate`` then continues from that cache, running the last prompt token and the decoding
  steps per row. A VL prompt's images go through the vision tower once per distinct prompt, and
  Qwen2.5-VL's multimodal RoPE offsets (``rope_deltas``) are those of the prompt's rows. The
  sampling distribution is the model's as before; sampled tokens can differ from the unshared
  path's only through float rounding (the same seed draws the same uniforms, but the logits are
  computed in other batch shapes). ``shared_prefill=False`` is the old path (every row
  re-runs its prompt), kept for ``bench/rollout_throughput.py`` and the equivalence tests.
- Multimodal placeholder tokens (``<|image_pad|>``, ``<|vision_start|>``, ...) are never sampled
  (``suppress_token_ids``); log-probs still come from the unsuppressed raw logits.
  They are gathered step by step (:class:`_RawLogprobRecorder`): only one step's [batch, vocab]
  log-softmax is alive at a time, never every step's logits (``output_logits`` would keep
  float32 [batch, vocab] per generated token: ~80 GB per chunk at the paper's lengths).
- ``response_ids`` stop after the first stop token (``eos_token_ids``: the policy kit passes the
  tokenizer's EOS and generation_config.json's, the set vLLM uses), which is kept (as verl does);
  ``finish_reason`` is ``"stop"`` then, ``"length"`` when ``max_new_tokens`` ran out first.
- Under ZeRO-3 on several ranks every forward gathers parameters collectively, so all ranks must
  run the same forwards: ``generate`` then runs with ``synced_gpus`` (a rank whose responses have
  all stopped keeps stepping until every rank's have) and every rank runs the same number of
  chunks (the largest rank's; the others sample dummy chunks and drop them), also with no prompts.
  Every chunk then runs one prefill forward on every rank, or none on any: the ranks agree on
  whether all their prompts can share a prefill (:func:`agreed_chunks`).

Weights: the engine holds a reference to a ``torch.nn.Module``. Colocated with the trainer it is
usually the very module being trained (``shares_trainer_weights``), so ``update_weights`` finds
each incoming tensor already in place and copies nothing. Given a separate copy it copies the
tensors in.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Sequence

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from fastrl.models.device import module_device, to_device
from fastrl.models.forward import collate, response_logprobs
from fastrl.rollout.base import EngineContext, PromptInput, Response, SamplingConfig

log = logging.getLogger(__name__)


def _expand_n(n: int | Sequence[int], num_prompts: int) -> list[int]:
    ns = [int(n)] * num_prompts if isinstance(n, int) else [int(x) for x in n]
    if len(ns) != num_prompts:
        raise ValueError(f"HFRolloutEngine.generate: n has {len(ns)} entries for {num_prompts} prompts")
    bad = [(i, x) for i, x in enumerate(ns) if x < 0]
    if bad:
        raise ValueError(f"HFRolloutEngine.generate: negative n for prompts (index, n) {bad[:5]}")
    return ns


def multimodal_token_ids(config: Any) -> list[int]:
    """Ids of image/video placeholder and vision-boundary tokens a model config names.

    A response containing one would be read as an image slot by the next forward (Qwen2.5-VL
    raises "Image features and image tokens do not match"), so the engine never samples them.
    """
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return sorted({int(v) for k in names if (v := getattr(config, k, None)) is not None})


def generation_config(sampling: SamplingConfig, *, eos_token_ids: Sequence[int], pad_token_id: int,
                      suppress_token_ids: Sequence[int] = ()) -> GenerationConfig:
    """A GenerationConfig that fixes every sampling knob explicitly.

    transformers fills unset fields from the checkpoint's generation_config.json (Qwen ships
    ``repetition_penalty`` 1.05, ``top_k`` 20, ...); setting them here keeps the sampling
    distribution exactly the policy's at ``sampling.temperature``.
    """
    if sampling.temperature < 0:
        raise ValueError(f"SamplingConfig.temperature must be >= 0, got {sampling.temperature}")
    if not 0 < sampling.top_p <= 1:
        raise ValueError(f"SamplingConfig.top_p must be in (0, 1], got {sampling.top_p}")
    if sampling.top_k < 0:
        raise ValueError(f"SamplingConfig.top_k must be >= 0 (0 = off), got {sampling.top_k}")
    if sampling.max_new_tokens < 1:
        raise ValueError(f"SamplingConfig.max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
    common: dict[str, Any] = dict(
        max_new_tokens=sampling.max_new_tokens,
        min_new_tokens=0,
        eos_token_id=list(eos_token_ids),
        pad_token_id=pad_token_id,
        bos_token_id=None,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        num_beams=1,
        use_cache=True,
        return_dict_in_generate=True,
        suppress_tokens=list(suppress_token_ids) or None,
    )
    if sampling.temperature == 0:
        return GenerationConfig(do_sample=False, **common)
    return GenerationConfig(
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,  # 0 disables top-k in transformers
        min_p=None,
        typical_p=1.0,
        epsilon_cutoff=0.0,
        eta_cutoff=0.0,
        **common,
    )


class _RawLogprobRecorder(StoppingCriteria):
    """Log-prob of each sampled token under the step's RAW logits, gathered as generation runs.

    A forward hook on the model keeps the last forward's log-softmax of the final position (the
    logits ``generate`` reads, before any processor: what ``output_logits`` returned); the
    stopping-criteria call that follows the token choice gathers the chosen token from it. Alive at
    once: one [batch, vocab] float32 tensor, and the gathered [batch] values of each step. Under
    ``synced_gpus`` a finished rank's extra forwards overwrite the pending step without a
    stopping-criteria call, so they record nothing.
    """

    def __init__(self) -> None:
        self._pending: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        logits = output["logits"] if isinstance(output, dict) else output.logits
        self._pending = torch.log_softmax(logits[:, -1].float(), dim=-1)

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        if self._pending is None:
            raise RuntimeError("HFRolloutEngine: no forward output seen before a token was chosen")
        chosen = input_ids[:, -1:].to(self._pending.device)
        self.steps.append(self._pending.gather(-1, chosen).squeeze(-1))
        self._pending = None
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def logprobs(self, num_rows: int, num_tokens: int) -> torch.Tensor:
        """[num_rows, num_tokens] on the CPU (generate may run and then undo a few steps)."""
        if len(self.steps) < num_tokens:
            raise RuntimeError(f"HFRolloutEngine: recorded {len(self.steps)} steps for {num_tokens} tokens")
        if num_tokens == 0:
            return torch.zeros((num_rows, 0))
        return torch.stack(self.steps[:num_tokens], dim=1).cpu()


def _hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The HF model inside a DeepSpeed engine (``.module``), or the model itself."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model


def is_zero3_partitioned(model: torch.nn.Module) -> bool:
    """DeepSpeed ZeRO-3 marks its partitioned parameters with ``ds_id``."""
    first = next(iter(model.parameters()), None)
    return first is not None and hasattr(first, "ds_id")


def _world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _all_gather_object(obj: Any) -> list[Any]:
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def agreed_chunks(num_local: int, first_prompt: PromptInput | None,
                  prefill: bool = False) -> tuple[int, PromptInput | None, bool]:
    """(the largest chunk count over ranks, a prompt to fill dummy chunks with, whether every rank
    shares prefills: ``prefill`` on all of them).

    The filler is this rank's own first prompt, else (a rank with no prompts) another rank's, so
    dummy chunks have the same modality as the real ones (a VL model's vision tower runs in both).
    """
    votes = _all_gather_object((num_local, prefill))
    counts = [c for c, _ in votes]
    total = max(counts)
    if min(counts) == 0 < total:  # some rank has nothing to sample: it borrows a prompt
        donors = [p for p in _all_gather_object(first_prompt if num_local else None) if p is not None]
        first_prompt = first_prompt if num_local else donors[0]
    return total, first_prompt, all(ok for _, ok in votes)


def can_share_prefill(prompt: PromptInput, multimodal_ids: Sequence[int]) -> bool:
    """A prompt's cache can be prefilled without its last token, which ``generate`` then runs: it
    needs two tokens, and a last token that is text (an image placeholder's features come only
    with the prompt's ``pixel_values``, which the prefill consumes)."""
    return len(prompt.prompt_ids) >= 2 and int(prompt.prompt_ids[-1]) not in multimodal_ids


class HFRolloutEngine:
    """RolloutEngine over an HF causal LM / Qwen2.5-VL model (see module docstring)."""

    name = "hf"
    shares_trainer_weights = True  # samples from the trainer's module: nothing to push or check
    progress: Callable[[int], None] | None = None  # called with each chunk's number of responses (evaluation)

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        batch_size: int,
        suppress_token_ids: Sequence[int] | None = None,
        shared_prefill: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"HFRolloutEngine: batch_size must be >= 1, got {batch_size}")
        if not eos_token_ids:
            raise ValueError("HFRolloutEngine: eos_token_ids is empty")
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = [int(e) for e in eos_token_ids]
        self.pad_token_id = int(pad_token_id)
        self.batch_size = batch_size
        # None: the model's multimodal placeholder tokens (see multimodal_token_ids).
        # A DeepSpeed engine's ``config`` is its own dict: read the wrapped model's (``.module``).
        model_config = getattr(getattr(model, "module", model), "config", None)
        self.multimodal_ids = multimodal_token_ids(model_config)
        self.suppress_token_ids = (list(self.multimodal_ids)
                                   if suppress_token_ids is None else [int(t) for t in suppress_token_ids])
        self.shared_prefill = shared_prefill  # False: every row re-runs its prompt (the old path)
        self.num_synced_tensors = 0  # tensors actually copied by update_weights (0 when colocated)

    # ------------------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[PromptInput], n: int | Sequence[int], sampling: SamplingConfig) -> list[Response]:
        """Sample ``n`` (or ``n[i]``) responses per prompt, prompt-major order."""
        ns = _expand_n(n, len(prompts))
        flat = [i for i, k in enumerate(ns) for _ in range(k)]  # prompt index of each sequence
        gen_cfg = generation_config(sampling, eos_token_ids=self.eos_token_ids, pad_token_id=self.pad_token_id,
                                    suppress_token_ids=self.suppress_token_ids)
        starts = list(range(0, len(flat), self.batch_size))
        prefill = self.shared_prefill and all(can_share_prefill(prompts[i], self.multimodal_ids) for i in set(flat))
        # ZeRO-3 on several ranks: every rank runs the same forwards (see the module docstring).
        synced = _world_size() > 1 and is_zero3_partitioned(self.model)
        total, filler = len(starts), None
        if synced:
            total, filler, prefill = agreed_chunks(len(starts), prompts[flat[0]] if flat else None, prefill)
        was_training = self.model.training
        self.model.eval()
        responses: list[Response] = []
        try:
            for c in range(total):
                chunk_seed = None if sampling.seed is None else sampling.seed + c
                if c < len(starts):
                    idx = flat[starts[c]:starts[c] + self.batch_size]
                    responses += self._generate_chunk(prompts, idx, gen_cfg, chunk_seed, synced, prefill)
                    if self.progress is not None:
                        self.progress(len(idx))
                else:  # a dummy chunk: this rank's forwards keep pace with the others'; dropped, and
                    # seeded (in a forked RNG) so that it leaves this rank's RNG stream as it was
                    assert filler is not None
                    self._generate_chunk([filler], [0], gen_cfg, 0 if chunk_seed is None else chunk_seed, synced,
                                         prefill)
        finally:
            self.model.train(was_training)
            self._reset_rope_cache()
        return responses

    def _generate_chunk(
        self, prompts: Sequence[PromptInput], prompt_index: list[int], gen_cfg: GenerationConfig, seed: int | None,
        synced: bool = False, prefill: bool = False,
    ) -> list[Response]:
        """Rows ``prompts[i] for i in prompt_index``, sampled in one ``generate``."""
        device = module_device(self.model)  # prompts go where the model is; results come back on the CPU
        # collate with empty responses = left-padded prompts plus image tensors (none with a prefill:
        # its cache holds the images' work, so the rows need no copies of their prompt's pixels)
        rows = [prompts[i] for i in prompt_index]
        if prefill:
            rows = [PromptInput(uid=p.uid, prompt_ids=p.prompt_ids) for p in rows]
        batch = collate(rows, [[] for _ in rows], self.pad_token_id)
        kwargs: dict[str, Any] = {
            "input_ids": batch["input_ids"].to(device),
            "attention_mask": batch["attention_mask"].to(device),
        }
        if prefill:
            kwargs["past_key_values"] = self._prefill(prompts, prompt_index, batch["input_ids"].shape[1], device)
        for key in ("pixel_values", "image_grid_thw", "mm_token_type_ids"):
            if key in batch:
                kwargs[key] = batch[key].to(device)
        P = batch["input_ids"].shape[1]
        recorder = _RawLogprobRecorder()
        kwargs.update(generation_config=gen_cfg, stopping_criteria=StoppingCriteriaList([recorder]),
                      synced_gpus=synced)
        handle = _hf_model(self.model).register_forward_hook(recorder.hook)
        try:
            with torch.no_grad():
                if seed is None:
                    out = self.model.generate(**kwargs)
                else:
                    devices = [device] if device.type == "cuda" else []
                    with torch.random.fork_rng(devices=devices):
                        torch.manual_seed(seed)
                        out = self.model.generate(**kwargs)
        finally:
            handle.remove()
        gen = out.sequences[:, P:].cpu()  # [b, T]
        return self._responses(gen, recorder.logprobs(gen.shape[0], gen.shape[1]), prompt_index)

    def _prefill(self, prompts: Sequence[PromptInput], prompt_index: list[int], width: int,
                 device: torch.device) -> Any:
        """The KV cache of the chunk's rows: each distinct prompt run once, all but its last token,
        left-padded to ``width - 1`` (so it lines up with the chunk's rows), then copied per row.

        Positions are the ones ``generate`` gives (``attention_mask.cumsum - 1``); Qwen2.5-VL builds
        its multimodal ones itself and keeps its ``rope_deltas``, which are copied per row too, so
        ``generate`` continues each row at its prompt's offset.
        """
        distinct = list(dict.fromkeys(prompt_index))
        rows = torch.tensor([distinct.index(i) for i in prompt_index], device=device)
        batch = collate([prompts[i] for i in distinct], [[] for _ in distinct], self.pad_token_id)
        assert batch["input_ids"].shape[1] == width  # the chunk's widest prompt is one of these
        inputs: dict[str, Any] = {"input_ids": batch["input_ids"][:, :-1],
                                  "attention_mask": batch["attention_mask"][:, :-1]}
        if "pixel_values" in batch:  # the VL model builds its 3-D positions from these
            inputs.update(pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"],
                          mm_token_type_ids=batch["mm_token_type_ids"][:, :-1])
        else:
            inputs["position_ids"] = batch["position_ids"][:, :-1]
        model = _hf_model(self.model)
        self._reset_rope_cache()  # a text prefill on a VL model must not reuse a training batch's offsets
        with torch.no_grad():
            out = model(**to_device(inputs, device), use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        cache.batch_select_indices(rows)
        inner = getattr(model, "model", None)
        if getattr(inner, "rope_deltas", None) is not None:
            inner.rope_deltas = inner.rope_deltas[rows.to(inner.rope_deltas.device)]
        return cache

    def _responses(self, gen: torch.Tensor, logps: torch.Tensor, prompt_index: list[int]) -> list[Response]:
        """One Response per generated row, cut after its first stop token."""
        T = gen.shape[1]
        eos = torch.tensor(self.eos_token_ids)
        results = []
        for row in range(gen.shape[0]):
            toks = gen[row]
            is_eos = torch.isin(toks, eos).nonzero()
            if len(is_eos):
                end, reason = int(is_eos[0]) + 1, "stop"
            else:
                end, reason = T, "length"
            ids = toks[:end].tolist()
            results.append(Response(
                prompt_index=prompt_index[row],
                response_ids=ids,
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                logprobs=logps[row, :end].tolist(),
                finish_reason=reason,
            ))
        return results

    def _reset_rope_cache(self) -> None:
        """Drop Qwen2.5-VL's cached multimodal RoPE offsets left by ``generate``.

        The next training forward recomputes them anyway; clearing them keeps no stale,
        batch-shaped state on the shared module.
        """
        inner = getattr(_hf_model(self.model), "model", None)
        if inner is not None and hasattr(inner, "rope_deltas"):
            inner.rope_deltas = None

    # ------------------------------------------------------------------------------------------
    def logprobs_of(self, prompts: Sequence[PromptInput], response_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """Log-probs of given responses under the engine's model: one forward per ``batch_size`` rows."""
        if len(prompts) != len(response_ids):
            raise ValueError(f"HFRolloutEngine.logprobs_of: {len(prompts)} prompts but {len(response_ids)} responses")
        out: list[list[float]] = []
        device = module_device(self.model)
        with torch.no_grad():
            for start in range(0, len(prompts), self.batch_size):
                rows = range(start, min(start + self.batch_size, len(prompts)))
                batch = collate([prompts[i] for i in rows], [list(response_ids[i]) for i in rows], self.pad_token_id)
                batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                logp = response_logprobs(self.model, batch).float().cpu()
                out += [logp[j, : len(response_ids[i])].tolist() for j, i in enumerate(rows)]
        self._reset_rope_cache()
        return out

    def sleep(self) -> None:
        """Nothing to release: the weights are the trainer's and no KV cache outlives ``generate``."""

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Nothing to restore (see :meth:`sleep`)."""

    def close(self) -> None:
        """Nothing to free: the model belongs to the caller."""

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new weights (HF parameter names) into the engine's model.

        Colocated (the engine's model IS the trainer's module) every tensor is already the
        engine's own parameter and nothing is copied. Otherwise each tensor is copied in place
        (shape checked). Unknown names are an error naming the parameter.
        """
        state = self.model.state_dict(keep_vars=True)
        copied = 0
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in state:
                    raise ValueError(f"HFRolloutEngine.update_weights: unknown parameter {name!r}")
                target = state[name]
                if target is tensor or (target.data_ptr() == tensor.data_ptr() and target.device == tensor.device):
                    continue
                if target.shape != tensor.shape:
                    raise ValueError(
                        f"HFRolloutEngine.update_weights: {name} has shape {tuple(tensor.shape)}, "
                        f"engine expects {tuple(target.shape)}"
                    )
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
                copied += 1
        self.num_synced_tensors += copied


def build_hf_engine(config: Any, spec: Any, context: EngineContext) -> HFRolloutEngine:
    """The registry's ``hf`` factory (``fastrl.engines``): samples from ``context.model`` itself,
    configured by ``config``, its section (``rollout.hf``: a ``fastrl.sections.HFEngineConfig``)."""
    return HFRolloutEngine(context.model, context.tokenizer, eos_token_ids=context.stop_token_ids,
                           pad_token_id=context.pad_token_id, batch_size=config.batch_size)
