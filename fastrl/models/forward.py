"""Batching (prompt + response) and the log-prob forward used for old/ref/policy log-probs.

Layout (as in verl): prompts are LEFT-padded to P, responses RIGHT-padded to R, so every row's
response occupies columns P..P+R-1 and the logits predicting it are columns P-1..P+R-2, i.e.
the last R+1 positions minus the final one. The forward therefore asks the model for only the
last R+1 positions (``logits_to_keep``): the [B, L, V] logits of the prompt never exist, and
only response positions go through the log-softmax.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from fastrl.models.device import module_device, to_device
from fastrl.models.inputs import PromptInput

# model_inputs keys collate knows how to batch.
_CONCAT_KEYS = ("pixel_values", "image_grid_thw")  # per image / per patch: concatenated along dim 0
_PER_TOKEN_KEYS = ("mm_token_type_ids",)  # one value per prompt token: padded like input_ids


def collate(prompts: Sequence[PromptInput], response_ids: Sequence[Sequence[int]], pad_id: int) -> dict[str, Any]:
    """Batch B (prompt, response) pairs.

    Returns ``input_ids`` [B, P+R], ``attention_mask`` [B, P+R], ``position_ids`` [B, P+R]
    (0-based over real tokens; 0 on padding), ``response_ids`` [B, R] (right-padded with
    ``pad_id``), ``response_mask`` [B, R] (float, 1 on real response tokens), and for VL prompts
    ``pixel_values`` [sum P_i, C], ``image_grid_thw`` [sum I_i, 3] in row order and
    ``mm_token_type_ids`` [B, P+R]. The same prompt may appear in several rows (one per
    response): its image tensors are then repeated, as the model needs one per row.
    """
    if len(prompts) != len(response_ids):
        raise ValueError(f"collate: {len(prompts)} prompts but {len(response_ids)} responses")
    if not prompts:
        raise ValueError("collate: empty batch")
    for p in prompts:
        unknown = set(p.model_inputs) - set(_CONCAT_KEYS) - set(_PER_TOKEN_KEYS)
        if unknown:
            raise ValueError(f"collate: uid={p.uid} has model_inputs {sorted(unknown)} this collate cannot batch")
        if not p.prompt_ids:
            raise ValueError(f"collate: uid={p.uid} has an empty prompt")
    B = len(prompts)
    P = max(len(p.prompt_ids) for p in prompts)
    R = max(len(r) for r in response_ids)
    input_ids = torch.full((B, P + R), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, P + R), dtype=torch.long)
    resp = torch.full((B, R), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((B, R), dtype=torch.float32)
    any_mm = any("mm_token_type_ids" in p.model_inputs for p in prompts)
    mm_types = torch.zeros((B, P + R), dtype=torch.int32) if any_mm else None
    for i, (p, r) in enumerate(zip(prompts, response_ids)):
        pl, rl = len(p.prompt_ids), len(r)
        input_ids[i, P - pl:P] = torch.as_tensor(p.prompt_ids, dtype=torch.long)
        attention_mask[i, P - pl:P + rl] = 1
        if rl:
            r_t = torch.as_tensor(list(r), dtype=torch.long)
            input_ids[i, P:P + rl] = r_t
            resp[i, :rl] = r_t
            resp_mask[i, :rl] = 1.0
        if mm_types is not None and "mm_token_type_ids" in p.model_inputs:
            mm_types[i, P - pl:P] = p.model_inputs["mm_token_type_ids"].reshape(-1).to(torch.int32)
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0) * attention_mask
    batch: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_ids": resp,
        "response_mask": resp_mask,
    }
    for key in _CONCAT_KEYS:
        parts = [p.model_inputs[key] for p in prompts if key in p.model_inputs]
        if parts:
            batch[key] = torch.cat(parts, dim=0)
    if mm_types is not None:
        batch["mm_token_type_ids"] = mm_types
    return batch


def model_forward_kwargs(batch: dict[str, Any], *, logits_to_keep: int) -> dict[str, Any]:
    """The keyword arguments of an HF forward for a collated batch.

    Text batches pass explicit ``position_ids`` (left padding). Batches with images leave
    positions to the model: Qwen2.5-VL builds its 3-D multimodal RoPE positions from
    ``input_ids``, ``image_grid_thw``, ``mm_token_type_ids`` and ``attention_mask``.
    """
    kwargs: dict[str, Any] = {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "use_cache": False,
        "logits_to_keep": logits_to_keep,
    }
    if "pixel_values" in batch:
        kwargs["pixel_values"] = batch["pixel_values"]
        kwargs["image_grid_thw"] = batch["image_grid_thw"]
        kwargs["mm_token_type_ids"] = batch["mm_token_type_ids"]
    else:
        kwargs["position_ids"] = batch["position_ids"]
    return kwargs


def response_logprobs(
    model: torch.nn.Module,
    batch: dict[str, Any],
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log pi(response token t | prompt, response[:t]) for every response position.

    Returns ``logp`` [B, R] (float32, 0 where ``response_mask`` is 0), or ``(logp, entropy)``
    with the per-position entropy [B, R] of the (temperature-scaled) distribution. Gradients
    flow when called outside ``torch.no_grad``. ``temperature`` divides the logits first (use
    the rollout temperature for the PPO ratio, as verl does; 1.0 gives the raw policy).

    Devices: the batch goes to the device of the model's parameters; the results live on the
    device of the model's logits (the same one unless the model is split over devices), so a
    caller combines them with other tensors after moving those to ``logp.device``.
    """
    if temperature <= 0:
        raise ValueError(f"response_logprobs: temperature must be > 0, got {temperature}")
    batch = to_device(batch, module_device(model))
    R = batch["response_ids"].shape[1]
    if R == 0:
        empty = torch.zeros_like(batch["response_mask"])
        return (empty, empty.clone()) if with_entropy else empty
    out = model(**model_forward_kwargs(batch, logits_to_keep=R + 1))
    logits = out.logits[:, :-1, :].float()  # [B, R, V]: position t predicts response token t
    if logits.shape[1] != R:
        raise ValueError(f"response_logprobs: model returned {logits.shape[1] + 1} positions, expected {R + 1}")
    resp = batch["response_ids"].to(logits.device)  # [B, R]
    mask = batch["response_mask"].to(logits.device)  # [B, R]
    if temperature != 1.0:
        logits = logits / temperature
    # log_softmax(x)[y] = x[y] - logsumexp(x): no second [B, R, V] tensor for the log-probs.
    lse = torch.logsumexp(logits, dim=-1)  # [B, R]
    logp = logits.gather(-1, resp.unsqueeze(-1)).squeeze(-1) - lse
    logp = logp * mask
    if not with_entropy:
        return logp
    probs = F.softmax(logits, dim=-1)
    entropy = (lse - (probs * logits).sum(dim=-1)) * mask
    return logp, entropy
