"""Shared fixtures for the actor tests and the multi-rank scripts: a tiny Qwen2 policy, a fixed
ragged batch, and the token-mean loss normalised by the GLOBAL token count.

Kept free of pytest so the `deepspeed`-launched scripts can import it (they add this folder to
``sys.path``)."""

from __future__ import annotations

import torch

VOCAB = 96
PROMPT_LEN = 3
# Six sequences of different lengths (right-padded): the response mask is ragged.
LENGTHS = (9, 12, 7, 11, 5, 10)


def tiny_qwen2(seed: int = 0, *, tie: bool = True) -> torch.nn.Module:
    """Qwen2 with hidden 64, 2 layers, 2 heads of dim 32 (1 KV head), built from config."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
        attention_dropout=0.0,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.config._attn_implementation = "eager"  # deterministic, same kernels on every rank
    return model


def fixed_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids`` [6, 12], ``attention_mask`` [6, 12], ``loss_mask`` [6, 11] (response
    tokens predicted at positions 1..T-1; prompt tokens and padding are masked out)."""
    g = torch.Generator().manual_seed(seed)
    T = max(LENGTHS)
    ids = torch.randint(1, VOCAB, (len(LENGTHS), T), generator=g)
    attn = torch.zeros(len(LENGTHS), T, dtype=torch.long)
    for i, n in enumerate(LENGTHS):
        attn[i, :n] = 1
    ids = ids * attn  # pad id 0
    loss_mask = attn[:, 1:].clone()
    loss_mask[:, : PROMPT_LEN - 1] = 0
    return ids, attn, loss_mask


def token_logp(module: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """Log-prob of each next token, [B, T-1]."""
    logits = module(input_ids=ids, attention_mask=attn).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    return logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def micro_loss(
    module: torch.nn.Module,
    ids: torch.Tensor,
    attn: torch.Tensor,
    loss_mask: torch.Tensor,
    global_tokens: int,
) -> torch.Tensor:
    """Token-mean NLL contribution of this micro-batch: sum over its tokens / GLOBAL count."""
    logp = token_logp(module, ids, attn)
    return -(logp * loss_mask).sum() / global_tokens


def rank_micro_batches(rank: int, world: int, n_micro: int) -> list[list[int]]:
    """Row indices of the batch for ``rank``: rows rank, rank+world, ...; split into ``n_micro``
    ragged micro-batches (the first ones get the extra rows)."""
    rows = list(range(rank, len(LENGTHS), world))
    if not 1 <= n_micro <= len(rows):
        raise ValueError(f"n_micro={n_micro} must lie in [1, {len(rows)}]")
    chunks = [rows[i::n_micro] for i in range(n_micro)]
    return [sorted(c) for c in chunks]
