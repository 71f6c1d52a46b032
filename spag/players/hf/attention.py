"""Decode attention: one new token per row against a cache whose first slots every row shares.

Registered with transformers under :data:`DECODE_ATTENTION` and switched on for a call by the player
(and back off after it); prompts still go through SDPA.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

DECODE_ATTENTION = "spag_decode"
# How many leading cache slots hold the same keys/values in every row (the batch's shared prefix),
# set by the decoding loop for :func:`decode_attention`.
SHARED_SLOTS = contextvars.ContextVar("spagshared_slots", default=0)


def decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention for one new token per row as two small matmuls, grouped by key/value head.

    On CPU, SDPA's kernel is slow for a single query against a long, masked cache (ten times slower
    than this in bfloat16); prompts (several queries) still go through SDPA, with grouped heads.
    The first ``SHARED_SLOTS`` slots hold the same keys and values in every row: they are read from
    row 0 only, as one matrix product for the whole batch (reading the cache is most of the cost).
    No mask means no padding (HF leaves the mask out when nothing is masked): one query then sees every
    slot. A batch of prompts of equal length decodes that way, and SDPA took six times longer on such a
    step at batch 32 (it repeats the cache for grouped heads first); for a batch of one, SDPA is the
    faster. Anything unusual (an additive mask, soft-capping, attention sinks) goes to HF's SDPA.
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    out_dtype = query.dtype
    query = query.to(key.dtype)  # the cache may be kept in float32 (see HFPlayer._kv_dtype)
    if (
        kwargs.get("softcap") is not None
        or kwargs.get("s_aux") is not None
        or (attention_mask is not None and attention_mask.dtype != torch.bool)
        or (attention_mask is None and (query.shape[2] != 1 or query.shape[0] == 1))
    ):
        out, weights = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
        return out.to(out_dtype), weights
    if query.shape[2] != 1:
        # A prompt: SDPA's kernel, but told about grouped heads so keys/values are not repeated first.
        out = torch.nn.functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask,
            scale=scaling,
            enable_gqa=query.shape[1] != key.shape[1],
        )
        return out.transpose(1, 2).contiguous().to(out_dtype), None
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    scale = scaling if scaling is not None else dim**-0.5
    group = heads // kv_heads
    grouped = query.reshape(batch, kv_heads, group, dim)
    shared = min(SHARED_SLOTS.get(), length) if batch > 1 else 0

    def across_batch(x):  # (batch, kv, group, n) <-> (kv, batch * group, n)
        return x.transpose(0, 1).reshape(kv_heads, batch * group, x.shape[-1])

    def back(x):
        return x.reshape(kv_heads, batch, group, x.shape[-1]).transpose(0, 1)

    scores = torch.matmul(grouped, key[:, :, shared:].transpose(-1, -2))  # (batch, kv, group, length)
    if shared:
        prefix = back(torch.matmul(across_batch(grouped), key[0, :, :shared].transpose(-1, -2)))
        scores = torch.cat([prefix, scores], dim=-1)
    scores = scores.float() * scale
    if attention_mask is not None:  # None: no padding anywhere, every slot is seen
        mask = attention_mask[..., -length:].reshape(batch, 1, 1, length)
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1).to(value.dtype)
    out = torch.matmul(probs[..., shared:], value[:, :, shared:])  # (batch, kv, group, dim)
    if shared:
        out = out + back(torch.matmul(across_batch(probs[..., :shared]), value[0, :, :shared]))
    return out.reshape(batch, 1, heads, dim).to(out_dtype), None


@contextmanager
def shared_slots(count: int) -> Iterator[None]:
    token = SHARED_SLOTS.set(count)
    try:
        yield
    finally:
        SHARED_SLOTS.reset(token)


def register_decode_attention() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(DECODE_ATTENTION, decode_attention)
    AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)
