"""The transformers backend: batched generation on CPU or GPU, built for self-play's shape of work.

Self-play asks one model for many short replies to long prompts. Every prompt starts with the same
rules text, and a game's prompt for its next turn repeats its previous prompt up to the end of the
conversation so far. ``model.generate`` spends most of its time on that shape encoding the same text
again, padding, and decoding rows that already finished. This backend runs its own loop instead:

* **prefix reuse** (what vLLM calls automatic prefix caching): the keys and values of recent prompts
  are kept (within a memory budget, least recently used out first), and each new prompt encodes only
  what follows its longest common token prefix with a kept one. The prefix shared by a whole batch
  (chat header, rules) is encoded once, at batch 1, before the rows that need it;
* prompts are encoded in groups of similar remaining length, every prompt ending in the same slot
  (padding between the shared prefix and a row's own tokens), with explicit position ids and masks,
  so a padded row computes exactly what it would compute alone;
* keys and values live in preallocated buffers written in place: no concatenation per step;
* the shared prefix sits in the same first slots of every row, so a decoding step reads its keys and
  values once for the whole batch rather than once per row (see :func:`_decode_attention`);
* on CPU, a decoding step's linear layers compute ``W @ xᵀ`` rather than ``x @ Wᵀ``: the same
  product, which MKL runs much faster when x has a few rows (see :func:`_weight_first`);
* a row stops costing compute once it ends its turn: finished rows are dropped from the batch and
  from the buffers as they accumulate;
* each row samples from its own seeded generator, so a game's reply does not depend on which other
  games share its batch.

Models whose attention is not plain causal self-attention in every layer (sliding windows, state
space layers) go through ``model.generate`` one prompt at a time instead: correct, slower. So does
every model under a transformers release that lacks a piece the loop builds on
(:func:`missing_fast_path_api`); CI runs the player tests under the transformers of both locks.
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial

from spag.players.allocator import keep_freed_memory
from spag.players.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    Reply,
    cut_at_next_speaker,
    per_prompt_seeds,
    turn_end_ids,
)

_TAIL_TOKENS = 12          # tokens decoded each step to look for a stop string
_MIN_PREFIX = 8            # shorter common prefixes are not worth reusing
_WEIGHT_FIRST_ROWS = 256   # linear layers over at most this many rows compute W @ xᵀ (see _weight_first)
_PACKED_ROWS = 64          # ... or oneDNN's product over a packed weight, up to this many rows
_PACKED_MIN_WEIGHTS = 800_000  # for weights of at least this many elements (see _PackedWeights)


# ------------------------------------------------------------------------------------------ KV store


@dataclass(eq=False)
class _Entry:
    tokens: object            # numpy int64 array: the prompt's token ids
    kv: list                  # per layer (keys, values), each (1, heads, len, head_dim)
    nbytes: int
    used: int = 0


@dataclass
class _KVStore:
    """Keys and values of recent prompts, found again by longest common token prefix."""

    budget_bytes: int
    entries: list = field(default_factory=list)
    clock: int = 0

    def match(self, tokens) -> tuple[_Entry | None, int]:
        import numpy as np

        best, best_len = None, 0
        for entry in self.entries:
            n = min(len(entry.tokens), len(tokens))
            if n <= best_len:
                continue
            differ = np.flatnonzero(entry.tokens[:n] != tokens[:n])
            length = int(differ[0]) if len(differ) else n
            if length > best_len:
                best, best_len = entry, length
        if best is not None:
            self.clock += 1
            best.used = self.clock
        return best, best_len

    def add(self, tokens, kv) -> _Entry:
        self.clock += 1
        entry = _Entry(tokens, kv, sum(k.nbytes + v.nbytes for k, v in kv), self.clock)
        self.entries.append(entry)
        total = sum(e.nbytes for e in self.entries)
        for old in sorted(self.entries, key=lambda e: e.used):
            if total <= self.budget_bytes or old is entry:
                break
            self.entries.remove(old)
            total -= old.nbytes
        return entry

    def clear(self) -> None:
        self.entries.clear()


# What the fast path builds on, module by module. transformers 5.19 (the GPU lock's) to 5.23 (the CPU
# lock's) have all of it; a release without one piece gets the model.generate path and a warning.
_FAST_PATH_API = {
    "transformers.cache_utils": ("Cache", "DynamicCache", "DynamicLayer"),
    "transformers": ("AttentionInterface", "AttentionMaskInterface"),
    "transformers.masking_utils": ("sdpa_mask",),
    "transformers.integrations.sdpa_attention": ("sdpa_attention_forward",),
    "transformers.modeling_utils": ("PreTrainedModel",),
}


def missing_fast_path_api() -> str | None:
    """The first piece of the transformers API that the fast path needs and this install lacks, or None."""
    for module_name, names in _FAST_PATH_API.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return module_name
        for name in names:
            if not hasattr(module, name):
                return f"{module_name}.{name}"
    from transformers.cache_utils import Cache
    from transformers.modeling_utils import PreTrainedModel

    if "layers" not in inspect.signature(Cache.__init__).parameters:
        return "transformers.cache_utils.Cache(layers=...)"
    if not hasattr(PreTrainedModel, "set_attn_implementation"):
        return "transformers.PreTrainedModel.set_attn_implementation"
    return None


def _buffer_layer_class():
    """A cache layer over a preallocated buffer (possibly a view of a bigger one), written in place."""
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        def __init__(self, keys, values, length: int):
            super().__init__()
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self._k, self._v, self._length = keys, values, length
            self._views()

        def _views(self) -> None:
            self.keys = self._k[:, :, : self._length]
            self.values = self._v[:, :, : self._length]

        def update(self, key_states, value_states, *args, **kwargs):
            end = self._length + key_states.shape[-2]
            self._k[:, :, self._length : end] = key_states
            self._v[:, :, self._length : end] = value_states
            self._length = end
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._length

        def keep_rows(self, rows) -> None:
            # Copy only the filled part; the buffer keeps its capacity for the tokens still to come
            # (slots past the length are written before attention reads them, so need no zeros).
            k = self._k.new_empty((len(rows),) + tuple(self._k.shape[1:]))
            v = self._v.new_empty((len(rows),) + tuple(self._v.shape[1:]))
            k[:, :, : self._length] = self._k[rows, :, : self._length]
            v[:, :, : self._length] = self._v[rows, :, : self._length]
            self._k, self._v = k, v
            self._views()

    return BufferLayer


_DECODE_ATTENTION = "spag_decode"
# How many leading cache slots hold the same keys/values in every row (the batch's shared prefix),
# set by the decoding loop for :func:`_decode_attention`.
_SHARED_SLOTS = contextvars.ContextVar("spag_shared_slots", default=0)


def _decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention for one new token per row as two small matmuls, grouped by key/value head.

    On CPU, SDPA's kernel is slow for a single query against a long, masked cache (ten times slower
    than this in bfloat16); prompts (several queries) still go through SDPA, with grouped heads.
    The first ``_SHARED_SLOTS`` slots hold the same keys and values in every row: they are read from
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
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None \
            or (attention_mask is not None and attention_mask.dtype != torch.bool) \
            or (attention_mask is None and (query.shape[2] != 1 or query.shape[0] == 1)):
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                              scaling=scaling, **kwargs)
        return out.to(out_dtype), weights
    if query.shape[2] != 1:
        # A prompt: SDPA's kernel, but told about grouped heads so keys/values are not repeated first.
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, scale=scaling,
            enable_gqa=query.shape[1] != key.shape[1])
        return out.transpose(1, 2).contiguous().to(out_dtype), None
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    scale = scaling if scaling is not None else dim ** -0.5
    group = heads // kv_heads
    grouped = query.reshape(batch, kv_heads, group, dim)
    shared = min(_SHARED_SLOTS.get(), length) if batch > 1 else 0

    def across_batch(x):  # (batch, kv, group, n) <-> (kv, batch * group, n)
        return x.transpose(0, 1).reshape(kv_heads, batch * group, x.shape[-1])

    def back(x):
        return x.reshape(kv_heads, batch, group, x.shape[-1]).transpose(0, 1)

    scores = torch.matmul(grouped, key[:, :, shared:].transpose(-1, -2))       # (batch, kv, group, length)
    if shared:
        prefix = back(torch.matmul(across_batch(grouped), key[0, :, :shared].transpose(-1, -2)))
        scores = torch.cat([prefix, scores], dim=-1)
    scores = scores.float() * scale
    if attention_mask is not None:  # None: no padding anywhere, every slot is seen
        mask = attention_mask[..., -length:].reshape(batch, 1, 1, length)
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1).to(value.dtype)
    out = torch.matmul(probs[..., shared:], value[:, :, shared:])              # (batch, kv, group, dim)
    if shared:
        out = out + back(torch.matmul(across_batch(probs[..., :shared]), value[0, :, :shared]))
    return out.reshape(batch, 1, heads, dim).to(out_dtype), None


@contextmanager
def _shared_slots(count: int) -> Iterator[None]:
    token = _SHARED_SLOTS.set(count)
    try:
        yield
    finally:
        _SHARED_SLOTS.reset(token)


def _register_decode_attention() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(_DECODE_ATTENTION, _decode_attention)
    AttentionMaskInterface.register(_DECODE_ATTENTION, sdpa_mask)


def _weight_first_linear(module, x, packed=None):
    """``module(x)`` for an ``nn.Linear``: ``W @ xᵀ`` (transposed back, not copied) when x has few rows,
    or oneDNN's product with ``packed`` (the weight in oneDNN's layout, see :class:`_PackedWeights`)
    when x has at most ``_PACKED_ROWS`` rows."""
    import torch

    if x.numel() > _WEIGHT_FIRST_ROWS * x.shape[-1]:
        return torch.nn.functional.linear(x, module.weight, module.bias)
    if packed is not None and x.numel() <= _PACKED_ROWS * x.shape[-1]:
        out = _packed_product(x.reshape(-1, x.shape[-1]), packed, module.bias)
        return out.reshape(*x.shape[:-1], module.weight.shape[0])
    rows = x.reshape(-1, x.shape[-1]).t()
    out = torch.mm(module.weight, rows) if module.bias is None else \
        torch.addmm(module.bias[:, None], module.weight, rows)
    return out.t().reshape(*x.shape[:-1], module.weight.shape[0])


def _packed_product(rows, packed, bias):
    """``rows @ Wᵀ + bias`` by oneDNN, W given as its packed copy (``_reorder_linear_weight``)."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")


class _PackedWeights:
    """The large float32 linear weights of a model, copied once into oneDNN's packed layout.

    For a decoding step (a few rows through each layer, the weights streamed from memory every step)
    oneDNN's product over a packed weight beat MKL's ``W @ xᵀ`` on a 2-core AVX2 CPU: measured in
    place, both on the same inputs over a whole bench run, the 49152-word output layer took 0.55x
    the time, SmolLM2's gate/up layers (1536x576) 0.74x and its down layer 0.92x, while the 576x576
    layers were even (0.98x) and the 192x576 ones slower (1.2x): only weights of at least
    ``_PACKED_MIN_WEIGHTS`` elements are packed. A copy costs memory (430 MB for SmolLM2-135M) and is
    made again when its weight changes (in place, as an optimiser step does, or replaced; an edit through
    ``weight.data`` bypasses the version counter and is not seen). Where the
    oneDNN operators are missing or disagree with ``torch.mm`` on a first check, nothing is packed.
    """

    def __init__(self):
        self._copies: dict[int, tuple[tuple, object]] = {}   # id(module) -> (weight key, packed)
        self.available: bool | None = None                    # None: not checked yet

    @staticmethod
    def _key(weight) -> tuple:
        return (weight.data_ptr(), weight._version, tuple(weight.shape))

    @staticmethod
    def _pack(weight):
        import torch

        return torch.ops.mkldnn._reorder_linear_weight(weight, _PACKED_ROWS)

    def _first_pack(self, weight):
        """The first weight's packed copy if oneDNN's product with it agrees with ``torch.mm``, else None."""
        import torch

        try:
            packed = self._pack(weight)
            x = torch.randn(3, weight.shape[1], generator=torch.Generator().manual_seed(0))
            agrees = torch.allclose(_packed_product(x, packed, None), x @ weight.t(), rtol=1e-4, atol=1e-4)
        except (AttributeError, RuntimeError, NotImplementedError):
            return None
        return packed if agrees else None

    def get(self, module):
        """The packed copy of ``module.weight``, or None where this layer keeps ``W @ xᵀ``."""
        import torch

        weight = module.weight
        if weight.dtype != torch.float32 or weight.device.type != "cpu" \
                or weight.numel() < _PACKED_MIN_WEIGHTS or self.available is False:
            return None
        key = self._key(weight)
        kept = self._copies.get(id(module))
        if kept is not None and kept[0] == key:
            return kept[1]
        if self.available is None:        # the first weight: packed once, and checked
            packed = self._first_pack(weight.detach())
            self.available = packed is not None
            if packed is None:
                return None
        else:
            packed = self._pack(weight.detach())
        self._copies[id(module)] = (key, packed)
        return packed


@contextmanager
def _weight_first(model, packs: _PackedWeights | None = None) -> Iterator[None]:
    """Route the model's plain ``nn.Linear`` layers through :func:`_weight_first_linear` meanwhile.

    On a 2-core AVX2 CPU in float32, SmolLM2's linear layers took 1.5x longer as ``x @ Wᵀ`` (what
    ``nn.Linear`` asks of MKL) than as ``W @ xᵀ`` for 32 rows (one decoding step of a batch of 32); for
    one row both are the same matrix-vector product. Over many rows (a group of prompts) the
    transposed result slowed the layers after it more than the product gained, so inputs over
    ``_WEIGHT_FIRST_ROWS`` rows keep ``nn.Linear``'s own path. The largest layers take oneDNN's
    product over a packed copy of their weight instead, where ``packs`` holds one (see
    :class:`_PackedWeights`). Layers that already carry their own ``forward`` (hooks of accelerate,
    adapters) and subclasses are left alone.
    """
    import torch

    layers = [m for m in model.modules() if type(m) is torch.nn.Linear and "forward" not in vars(m)]
    for layer in layers:
        packed = packs.get(layer) if packs is not None else None
        layer.forward = partial(_weight_first_linear, layer, packed=packed)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def supports_fast_path(config) -> bool:
    """True for decoder-only models with plain causal self-attention in every layer."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        return False
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return False
    return not getattr(text, "is_encoder_decoder", False)


# -------------------------------------------------------------------------------------------- player


class HFPlayer:
    """A transformers causal LM as a player.

    ``max_batch`` bounds how many replies are decoded together (None: all prompts of a call),
    ``prefill_tokens`` how many prompt tokens are encoded in one forward pass, and ``prefix_cache_gb``
    the memory kept for reusable prompt keys/values (0 keeps nothing between calls).
    ``max_prompt_tokens`` keeps the last that many tokens of a longer prompt (None: the whole prompt).
    """

    def __init__(self, model, tokenizer, name: str | None = None, *, max_batch: int | None = None,
                 prefill_tokens: int = 4096, prefix_cache_gb: float = 2.0, max_prompt_tokens: int | None = None):
        from spag.modeling import setup_special_tokens

        setup_special_tokens(tokenizer, model)
        self.model, self.tokenizer = model, tokenizer
        self.name = name or str(getattr(model, "name_or_path", "") or type(model).__name__)
        self.max_batch = max_batch
        self.prefill_tokens = prefill_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.fast = supports_fast_path(model.config) and self._transformers_has_fast_path()
        self._store = _KVStore(int(prefix_cache_gb * 2**30))
        self._keep_between_calls = prefix_cache_gb > 0
        self._end_ids = self._turn_end_ids()
        self._kv_layout = None
        self._packs = _PackedWeights()
        self._decode_attention = False    # whether this call borrowed _decode_attention (see generate)
        # Counters for benchmarks: prompt tokens encoded, prompt tokens reused, tokens generated.
        self.counters = {"prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0}

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike, device: str | None = None, dtype: str | None = None,
                        trust_remote_code: bool = False, name: str | None = None, **options) -> HFPlayer:
        from spag.modeling import load_model

        loaded, tokenizer = load_model(model, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
        return cls(loaded, tokenizer, name=name or str(model), **options)

    # -------------------------------------------------------------------------------------- helpers

    @staticmethod
    def _transformers_has_fast_path() -> bool:
        missing = missing_fast_path_api()
        if missing is not None:
            warnings.warn(f"transformers lacks {missing}: the hf player falls back to model.generate, "
                          "one prompt at a time (correct, slower)", stacklevel=3)
        return missing is None

    @property
    def device(self):
        return next(self.model.parameters()).device

    def _turn_end_ids(self) -> list[int]:
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen else None
        eos_ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        return turn_end_ids(self.tokenizer, eos_ids, self.model.get_output_embeddings().weight.shape[0])

    def encode(self, prompt: str) -> list[int]:
        """Token ids of the model input for one user-message text."""
        from spag.game.prompts import model_input_ids

        return model_input_ids(self.tokenizer, prompt, self.max_prompt_tokens)

    def _layout(self) -> list[tuple[int, int, object]]:
        """(kv heads, head dim, dtype) of each layer's cache, read once from a one-token forward pass."""
        if self._kv_layout is None:
            import torch
            from transformers import DynamicCache

            cache = DynamicCache()
            token = torch.tensor([[self._end_ids[0]]], device=self.device)
            self.model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
            self._kv_layout = [(layer.keys.shape[1], layer.keys.shape[3], layer.keys.dtype)
                               for layer in cache.layers]
        return self._kv_layout

    # ------------------------------------------------------------------------------------- generate

    def generate(self, prompts, *, temperature: float = 1.0, top_k: int = 0, max_new_tokens: int = 256,
                 min_new_tokens: int = 1, seed=None, stop: Sequence[str] = ()) -> list[Reply]:
        import torch

        if not prompts:
            return []
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        seeds = per_prompt_seeds(seed, len(prompts))
        encoded = [self.encode(p) for p in prompts]
        size = self.max_batch or len(prompts)
        replies: list[Reply | None] = [None] * len(prompts)
        settings = dict(temperature=temperature, top_k=top_k, max_new_tokens=max_new_tokens,
                        min_new_tokens=min(min_new_tokens, max_new_tokens), stop=tuple(stop))
        swap = self._use_decode_attention()
        on_cpu = self.fast and self.device.type == "cpu"
        if on_cpu:
            keep_freed_memory()
        linears = _weight_first(self.model, self._packs) if on_cpu else nullcontext()
        try:
            with torch.inference_mode(), linears:
                for start in range(0, len(prompts), size):
                    chunk = list(range(start, min(start + size, len(prompts))))
                    run = self._generate_fast if self.fast else self._generate_fallback
                    outs = run([encoded[i] for i in chunk], [seeds[i] for i in chunk], **settings)
                    for i, reply in zip(chunk, outs):
                        replies[i] = reply
        finally:
            if swap is not None:
                self.model.set_attn_implementation(swap)
                self._decode_attention = False
            if not self._keep_between_calls:
                self._store.clear()
        self.counters["generated_tokens"] += sum(r.n_tokens for r in replies if r is not None)
        return replies  # type: ignore[return-value]

    def next_token_logprobs(self, prompts: Sequence[str], opening: str = ""):
        """log p(next token) after each prompt's model input plus ``opening`` (the start of the reply).

        A (len(prompts), vocab) float32 tensor; one plain forward pass per prompt, no cache kept.
        """
        import torch

        opening_ids = self.tokenizer(opening, add_special_tokens=False)["input_ids"] if opening else []
        rows = []
        with torch.inference_mode():
            for prompt in prompts:
                ids = torch.tensor([self.encode(prompt) + opening_ids], device=self.device)
                logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1]
                rows.append(torch.log_softmax(logits.float(), dim=-1).cpu())
        return torch.stack(rows) if rows else torch.empty(0)

    def _use_decode_attention(self) -> str | None:
        """On CPU, route one-token attention through :func:`_decode_attention` for this call.

        Returns the implementation to restore afterwards (None when nothing was changed).
        """
        current = getattr(self.model.config, "_attn_implementation", None)
        if not self.fast or current != "sdpa" or self.device.type != "cpu":
            return None
        _register_decode_attention()
        self.model.set_attn_implementation(_DECODE_ATTENTION)
        # A model that cannot switch at run time keeps its attention (transformers logs why).
        self._decode_attention = self.model.config._attn_implementation == _DECODE_ATTENTION
        return current if self._decode_attention else None

    def _kv_dtype(self, dtype):
        """The cache's dtype: float32 on CPU whatever the model's (with the decode attention above).

        CPU matrix kernels read a strided slice of a growing float32 buffer in place, but copy a
        bfloat16 one first, and that copy cost more than the rest of a decoding step.
        """
        import torch

        if self.device.type == "cpu" and self._decode_attention:
            return torch.float32
        return dtype

    def _finish(self, ids: list[int], finish: str, stop: Sequence[str]) -> Reply:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        for s in stop:
            if s in text:
                text = text[: text.index(s)]
        if stop:
            text, _ = cut_at_next_speaker(text)
        return Reply(text=text, n_tokens=len(ids), finish_reason=finish)

    def _stopped_by_text(self, ids: list[int], stop: Sequence[str]) -> bool:
        tail = self.tokenizer.decode(ids[-_TAIL_TOKENS:], skip_special_tokens=True)
        if any(s in tail for s in stop):
            return True
        return bool(stop) and cut_at_next_speaker(tail)[1]

    # ----------------------------------------------------------------------------------- prefix reuse

    def _ensure_prefix(self, prefix) -> _Entry:
        """The stored entry that starts with ``prefix``: encoded at batch 1 on top of its best kept match."""
        import torch
        from transformers import DynamicCache

        entry, length = self._store.match(prefix)
        if length == len(prefix):
            return entry
        cache = DynamicCache()
        if entry is not None and length >= _MIN_PREFIX:
            for layer, (k, v) in enumerate(entry.kv):
                cache.update(k[:, :, :length], v[:, :, :length], layer)
        else:
            length = 0
        rest = torch.as_tensor(prefix[length:], dtype=torch.long, device=self.device)[None]
        positions = torch.arange(length, len(prefix), device=self.device)[None]
        self.model(input_ids=rest, position_ids=positions, past_key_values=cache, use_cache=True,
                   logits_to_keep=1)
        self.counters["prompt_tokens"] += len(prefix) - length
        self.counters["reused_tokens"] += length
        return self._store.add(prefix.copy(), [(layer.keys, layer.values) for layer in cache.layers])

    # ------------------------------------------------------------------------------------ fast path

    def _generate_fast(self, encoded, seeds, *, temperature, top_k, max_new_tokens, min_new_tokens, stop):
        import numpy as np
        import torch
        from transformers.cache_utils import Cache

        device = self.device
        arrays = [np.asarray(e, dtype=np.int64) for e in encoded]
        n = len(arrays)

        # 1. The prefix the whole batch shares is encoded once (or found in the store).
        shared, shared_entry = 0, None
        if n > 1:
            shared = min(len(a) for a in arrays) - 1
            for a in arrays[1:]:
                differ = np.flatnonzero(arrays[0][:shared] != a[:shared])
                shared = int(differ[0]) if len(differ) else shared
            if shared >= _MIN_PREFIX:
                shared_entry = self._ensure_prefix(arrays[0][:shared])

        # 2. Each row reuses its longest kept prefix and encodes the rest (at least one token).
        sources = []
        for a in arrays:
            entry, length = self._store.match(a)
            length = min(length, len(a) - 1)
            sources.append((entry, length) if length >= _MIN_PREFIX else (None, 0))
        past = [length for _, length in sources]
        todo = [len(a) - p for a, p in zip(arrays, past)]
        if shared_entry is None or min(past) < shared:
            shared = 0    # every row holds the shared prefix in slots [0, shared), copied from shared_entry
        self.counters["prompt_tokens"] += sum(todo)
        self.counters["reused_tokens"] += sum(past)

        # 3. Rows in decode order (by length still to encode), grouped so padding stays small.
        order = sorted(range(n), key=lambda i: todo[i])
        groups = self._prefill_groups([todo[i] for i in order])     # ranges of decode positions
        spans = []                                                  # (start, end, past width, new width)
        for g in groups:
            rows = [order[b] for b in g]
            spans.append((g[0], g[-1] + 1, max(past[i] for i in rows), max(todo[i] for i in rows)))
        width = max(c + s for _, _, c, s in spans)                  # every prompt ends at slot `width`
        capacity = width + max_new_tokens

        buffers = [(torch.zeros((n, heads, capacity, dim), dtype=self._kv_dtype(dtype), device=device),
                    torch.zeros((n, heads, capacity, dim), dtype=self._kv_dtype(dtype), device=device))
                   for heads, dim, dtype in self._layout()]
        attention = torch.zeros((n, capacity), dtype=torch.long, device=device)
        first_logits = [None] * n
        BufferLayer = _buffer_layer_class()
        for start, end, c_width, s_width in spans:
            ids = torch.zeros((end - start, s_width), dtype=torch.long, device=device)
            positions = torch.zeros((end - start, s_width), dtype=torch.long, device=device)
            for b in range(start, end):
                i = order[b]
                entry, c = sources[i]
                if shared:
                    for (kb, vb), (k, v) in zip(buffers, shared_entry.kv):
                        kb[b, :, :shared], vb[b, :, :shared] = k[0, :, :shared], v[0, :, :shared]
                    attention[b, :shared] = 1
                if c > shared:
                    past_slots = slice(width - s_width - (c - shared), width - s_width)
                    for (kb, vb), (k, v) in zip(buffers, entry.kv):
                        kb[b, :, past_slots], vb[b, :, past_slots] = k[0, :, shared:c], v[0, :, shared:c]
                    attention[b, past_slots] = 1
                s = todo[i]
                ids[b - start, s_width - s :] = torch.as_tensor(arrays[i][c:], device=device)
                positions[b - start, s_width - s :] = torch.arange(c, c + s, device=device)
                attention[b, width - s : width] = 1
            # The group writes straight into its rows of the decode buffers (views, no copies).
            cache = Cache(layers=[BufferLayer(kb[start:end], vb[start:end], width - s_width)
                                  for kb, vb in buffers])
            out = self.model(input_ids=ids, attention_mask=attention[start:end, :width], position_ids=positions,
                             past_key_values=cache, use_cache=True, logits_to_keep=1)
            for b in range(start, end):
                first_logits[b] = out.logits[b - start, -1]
            del cache, out
        if self._keep_between_calls:
            self._keep_prompts(arrays, order, spans, past, todo, buffers, width, shared)

        # 4. Decode all rows together; finished rows leave the batch as they accumulate.
        layers = [BufferLayer(kb, vb, width) for kb, vb in buffers]
        cache = Cache(layers=layers)
        del buffers
        next_position = torch.tensor([len(arrays[i]) for i in order], device=device)
        sampler = _Sampler([seeds[i] for i in order], temperature, top_k, device, self._end_ids)
        logits = torch.stack(first_logits)
        generated: list[list[int]] = [[] for _ in range(n)]       # by decode position
        finish: list[str | None] = [None] * n
        active = list(range(n))                                     # batch row -> decode position
        length = width
        with _shared_slots(shared):
            for step in range(max_new_tokens):
                tokens = sampler.sample(logits, active, suppress_end=step < min_new_tokens)
                for b, r in enumerate(active):
                    if finish[r] is not None:
                        continue
                    token = int(tokens[b])
                    if token in sampler.end_ids:
                        finish[r] = FINISH_STOP
                        continue
                    generated[r].append(token)
                    if self._stopped_by_text(generated[r], stop):
                        finish[r] = FINISH_STOP
                    elif len(generated[r]) >= max_new_tokens:
                        finish[r] = FINISH_LENGTH
                if step == max_new_tokens - 1 or all(finish[r] is not None for r in active):
                    break
                finished = sum(finish[r] is not None for r in active)
                # Dropping rows copies the cache, so do it once a few rows have finished, not for each one.
                if finished and finished >= max(1, (len(active) + 7) // 8):
                    keep = [b for b, r in enumerate(active) if finish[r] is None]
                    index = torch.tensor(keep, dtype=torch.long, device=device)
                    for layer in layers:
                        layer.keep_rows(index)
                    attention = attention[index]
                    next_position = next_position[index]
                    tokens = tokens[index]
                    active = [active[b] for b in keep]
                attention[:, length] = 1
                out = self.model(input_ids=tokens[:, None], attention_mask=attention[:, : length + 1],
                                 position_ids=next_position[:, None], past_key_values=cache, use_cache=True)
                logits = out.logits[:, -1]
                length += 1
                next_position = next_position + 1

        replies: list[Reply | None] = [None] * n
        for b, i in enumerate(order):
            replies[i] = self._finish(generated[b], finish[b] or FINISH_LENGTH, stop)
        return replies

    def _keep_prompts(self, arrays, order, spans, past, todo, buffers, width, shared) -> None:
        """Store each prompt's keys/values so the game's next prompt can reuse them."""
        import torch

        for start, end, _, s_width in spans:
            for b in range(start, end):
                i = order[b]
                c, s = past[i], todo[i]
                slots = [slice(0, shared), slice(width - s_width - (c - shared), width - s_width),
                         slice(width - s, width)]
                kv = [(torch.cat([kb[b : b + 1, :, x] for x in slots], dim=2),
                       torch.cat([vb[b : b + 1, :, x] for x in slots], dim=2)) for kb, vb in buffers]
                self._store.add(arrays[i], kv)

    def _prefill_groups(self, lengths: list[int]) -> list[list[int]]:
        """Consecutive rows (sorted by length) grouped so padding stays small and memory bounded."""
        groups: list[list[int]] = []
        current: list[int] = []
        for r, length in enumerate(lengths):
            if current:
                widest = max(length, max(lengths[c] for c in current))
                padded = widest * (len(current) + 1)
                useful = sum(lengths[c] for c in current) + length
                if padded > self.prefill_tokens or padded > 1.25 * useful + 16:
                    groups.append(current)
                    current = []
            current.append(r)
        if current:
            groups.append(current)
        return groups

    # -------------------------------------------------------------------------------- fallback path

    def _generate_fallback(self, encoded, seeds, *, temperature, top_k, max_new_tokens, min_new_tokens, stop):
        """``model.generate`` one prompt at a time: slow, but correct for any architecture."""
        import torch

        replies = []
        for ids, seed in zip(encoded, seeds):
            if seed is not None:
                torch.manual_seed(seed)
            input_ids = torch.tensor([ids], device=self.device)
            kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                          eos_token_id=self._end_ids, pad_token_id=self.tokenizer.pad_token_id,
                          attention_mask=torch.ones_like(input_ids))
            if stop:
                kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
            if temperature > 0:
                kwargs.update(do_sample=True, temperature=temperature, top_k=top_k or None)
            else:
                kwargs.update(do_sample=False)
            out = self.model.generate(input_ids, **kwargs)[0, len(ids):].tolist()
            ended = bool(out) and out[-1] in self._end_ids
            if ended:
                out = out[:-1]
            finish = FINISH_STOP if ended or len(out) < max_new_tokens else FINISH_LENGTH
            self.counters["prompt_tokens"] += len(ids)
            replies.append(self._finish(out, finish, stop))
        return replies


class _Sampler:
    """Temperature / top-k sampling with one seeded generator per row (greedy at temperature 0)."""

    def __init__(self, seeds, temperature: float, top_k: int, device, end_ids: list[int]):
        import torch

        self.temperature, self.top_k = temperature, top_k
        self.end_ids = set(end_ids)
        self._end_index = torch.tensor(end_ids, device=device, dtype=torch.long)
        self._generators = []
        for s in seeds:
            g = torch.Generator(device=device)
            if s is None:
                g.seed()
            else:
                g.manual_seed(int(s))
            self._generators.append(g)

    def sample(self, logits, rows: list[int], suppress_end: bool):
        import torch

        logits = logits.float()
        if suppress_end and len(self._end_index):
            logits = logits.index_fill(1, self._end_index, float("-inf"))
        if self.temperature <= 0:
            return logits.argmax(dim=-1)
        logits = logits / self.temperature
        if self.top_k and self.top_k < logits.shape[-1]:
            values, indices = logits.topk(self.top_k, dim=-1)
        else:
            values, indices = logits, None
        probs = values.softmax(dim=-1)
        picks = torch.stack([
            torch.multinomial(probs[b], 1, generator=self._generators[r])[0] for b, r in enumerate(rows)
        ])
        if indices is not None:
            picks = indices.gather(1, picks[:, None])[:, 0]
        return picks
