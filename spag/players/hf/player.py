"""The transformers player: prompts in, replies out, through the decoding loop described in
:mod:`spag.players.hf` (or ``model.generate`` where that loop cannot serve the model, and with ``decoder:
generate``)."""

from __future__ import annotations

import copy
import itertools
import os
import warnings
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from spag.models.batching import shared_prefix_length
from spag.models.chat import model_input_ids
from spag.models.loading import load_model, setup_special_tokens
from spag.players.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    Reply,
    cut_at,
    per_prompt_seeds,
    text_ids,
    turn_end_ids,
)
from spag.players.hf.attention import DECODE_ATTENTION, register_decode_attention, shared_slots
from spag.players.hf.compat import fallback_reason, tell_fallback
from spag.players.hf.generate import generate_replies
from spag.players.hf.ledger import DeviceLedger
from spag.players.hf.linear import PackedWeights, weight_first
from spag.players.hf.prefix_store import (
    MIN_PREFIX,
    Entry,
    KVStore,
    buffer_layer_class,
    common_length,
    copy_kept_prefixes,
)
from spag.players.hf.sampling import PER_ROW, CounterSampler, make_sampler
from spag.players.options import DECODERS, HFOptions
from spag.runtime.errors import PlayerError

_TAIL_TOKENS = 12  # tokens decoded each step to look for a stop string
GENERATE = DECODERS[1]


@dataclass(frozen=True)
class _Ends:
    """What ends a reply besides an end-of-turn token: literal strings and a stop pattern (a regex)."""

    strings: tuple[str, ...] = ()
    pattern: str | None = None


@dataclass
class _Plan:
    """How one batch of prompts is encoded (:meth:`HFPlayer._plan`), by prompt unless said otherwise."""

    arrays: list  # token ids
    shared: int  # slots [0, shared) of every row hold the prefix the whole batch shares
    shared_entry: object  # the store's entry holding that prefix
    sources: list  # (kept entry, tokens reused from it)
    past: list  # tokens reused
    todo: list  # tokens to encode
    order: list  # decode position -> prompt (by tokens to encode)
    spans: list  # prefill groups: (start, end, past width, new width), in decode positions
    width: int  # every prompt ends at this slot


@dataclass
class _Continuations:
    """The continuations :meth:`HFPlayer.continuation_logprobs` scores: each one's first token, and the
    rows of those of more than one token (``longer``), right-padded (``tokens``, ``mask``)."""

    first_tokens: object
    longer: list
    tokens: object
    mask: object


@dataclass
class _PromptState:
    """A prompt as the model left it: each layer's keys and values, the slots they hold (``attention``,
    padding among them 0) and the prompt's length in tokens."""

    kv: list
    attention: object
    length: int


def _group_prefixes(arrays: list, longer_than: int) -> list:
    """The beginnings that groups of at least two of ``arrays`` share (each row's last token left out),
    where a group's is at least ``longer_than`` tokens: adjacent rows in sorted order, split where their
    common beginning is shorter."""
    order = sorted(range(len(arrays)), key=lambda i: arrays[i].tolist())
    prefixes, run = [], None  # run: (first row, common length so far)
    for a, b in itertools.pairwise(order):
        common = common_length(arrays[a], arrays[b], min(len(arrays[a]), len(arrays[b])) - 1)
        if common >= longer_than:
            run = (a if run is None else run[0], common if run is None else min(run[1], common))
            continue
        if run is not None:
            prefixes.append(arrays[run[0]][: run[1]])
        run = None
    if run is not None:
        prefixes.append(arrays[run[0]][: run[1]])
    return prefixes


class HFPlayer:
    """A transformers causal LM as a player, with the hf backend's options (:class:`HFOptions`): how many
    replies are decoded together (``max_batch``), how many prompt tokens one forward pass encodes
    (``prefill_tokens``), the memory kept for reusable prompt keys/values (``prefix_cache_gb``), and how much
    of a long prompt is kept (``max_prompt_tokens``).
    """

    # With the counter sampler, the steps a decode loop runs between two reads of its tokens to the host.
    read_every = 8

    def __init__(self, model, tokenizer, name: str | None = None, options: HFOptions | None = None):
        options = options or HFOptions()
        setup_special_tokens(tokenizer, model)
        self.model, self.tokenizer = model, tokenizer
        self.name = name or str(getattr(model, "name_or_path", "") or type(model).__name__)
        self.max_batch = options.max_batch
        self.prefill_tokens = options.prefill_tokens
        self.sampler = options.sampler
        self.decoder = options.decoder
        if self.decoder == GENERATE and self.sampler == PER_ROW:
            raise PlayerError(
                "hf backend: decoder generate draws with the counter sampler's noise; "
                "set sampler: counter (or auto) with it, or decoder: engine for per-row"
            )
        self._static = None  # decoder generate: the static cache of the last call's shape
        self._stops: dict = {}  # decoder generate: stopping criteria by stop strings
        self.max_prompt_tokens = options.max_prompt_tokens
        self.fallback_reason = fallback_reason(model.config)  # None: the fast path serves the model here
        self.fast = self.fallback_reason is None
        if self.fallback_reason:
            tell_fallback(self.fallback_reason)
        self._store = KVStore(int(options.prefix_cache_gb * 2**30))
        self._keep_between_calls = options.prefix_cache_gb > 0
        self._end_ids = self._turn_end_ids()
        self._kv_layout = None
        self._packs = PackedWeights()
        self._decode_attention = False  # whether this call borrowed decode_attention (see generate)
        self._told_batch = False  # a batch cut to the free memory is said once
        # Counters for benchmarks: prompt tokens encoded, prompt tokens reused, tokens generated.
        self.counters = {"prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0}

    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike,
        options: HFOptions | None = None,
        *,
        name: str | None = None,
        trust_remote_code: bool = False,
    ) -> HFPlayer:
        options = options or HFOptions()
        loaded, tokenizer = load_model(
            model, device=options.device, dtype=options.dtype, trust_remote_code=trust_remote_code
        )
        return cls(loaded, tokenizer, name=name or str(model), options=options)

    # -------------------------------------------------------------------------------------- helpers

    def forget(self) -> None:
        """Drop the prompts' keys and values kept between calls (up to ``prefix_cache_gb``): for a caller
        that holds several players and moves on to prompts that share nothing with the kept ones."""
        self._store.clear()

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
        return model_input_ids(self.tokenizer, prompt, self.max_prompt_tokens)

    def _layout(self) -> list[tuple[int, int, object]]:
        """(kv heads, head dim, dtype) of each layer's cache, read once from a one-token forward pass."""
        if self._kv_layout is None:
            import torch
            from transformers import DynamicCache

            cache = DynamicCache()
            token = torch.tensor([[self._end_ids[0]]], device=self.device)
            self.model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
            self._kv_layout = [
                (layer.keys.shape[1], layer.keys.shape[3], layer.keys.dtype) for layer in cache.layers
            ]
        return self._kv_layout

    # ---------------------------------------------------------------------------------- memory planning

    def _free_device_memory(self) -> int | None:
        """Bytes the model's GPU can still give (free, plus what torch's allocator holds unused); None on a
        CPU, where no plan is made."""
        if self.device.type != "cuda":
            return None
        import torch

        free, _ = torch.cuda.mem_get_info(self.device)
        return free + torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)

    def _row_bytes(self, tokens: int) -> int:
        """One row's share of a batch of ``tokens`` slots: its key/value buffers in every layer, its attention
        mask and the float32 logits of its next token."""
        kv = sum(2 * heads * dim * self._kv_dtype(dtype).itemsize for heads, dim, dtype in self._layout())
        vocab = self.model.get_output_embeddings().weight.shape[0]
        return tokens * (kv + 8) + 4 * vocab

    def _working_bytes(self) -> int:
        """What a batch needs beside its rows: a prefill group's activations (``prefill_tokens`` tokens through
        the widest layer, with room for the attention's temporaries) and the part of the prompt cache's
        budget not yet used (it may fill during the call)."""
        config = self.model.config.get_text_config()
        widest = max(config.hidden_size * 6, getattr(config, "intermediate_size", 0) * 3)
        element = next(self.model.parameters()).element_size()
        kept = sum(entry.nbytes for entry in self._store.entries)
        return 2 * self.prefill_tokens * widest * element + max(0, self._store.budget_bytes - kept)

    def _rows_that_fit(self, tokens: int, wanted: int) -> int:
        """How many of ``wanted`` rows of ``tokens`` slots to decode together: all of them on a CPU, as many
        as the GPU has memory for there, at least one; PlayerError with the numbers when not even one fits."""
        free = self._free_device_memory()
        if free is None:
            return wanted
        row, working = self._row_bytes(tokens), self._working_bytes()
        fit = (free - working) // row
        if fit < 1:
            gib = 2**30
            raise PlayerError(
                f"hf backend: one game of {tokens} tokens needs {row / gib:.2f} GiB of key/value "
                f"buffers and {working / gib:.2f} GiB of working memory, {self.device} has "
                f"{free / gib:.2f} GiB free beside the model: lower max_prompt_tokens or "
                "max_new_tokens, play in bfloat16/float16, or give the model a GPU of its own"
            )
        if fit < wanted and not self._told_batch:
            warnings.warn(
                f"hf backend: {wanted} games of up to {tokens} tokens do not fit in the "
                f"{free / 2**30:.1f} GiB free on {self.device}; playing {fit} at a time",
                stacklevel=3,
            )
            self._told_batch = True
        return min(wanted, fit)

    # ------------------------------------------------------------------------------------- generate

    def generate(
        self,
        prompts,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 256,
        min_new_tokens: int = 1,
        seed=None,
        stop: Sequence[str] = (),
        stop_pattern: str | None = None,
    ) -> list[Reply]:
        import torch

        if not prompts:
            return []
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        seeds = per_prompt_seeds(seed, len(prompts))
        encoded = [self.encode(p) for p in prompts]
        size = self.max_batch or len(prompts)
        replies: list[Reply | None] = [None] * len(prompts)
        settings = dict(
            temperature=temperature,
            top_k=top_k,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min(min_new_tokens, max_new_tokens),
            stop=_Ends(tuple(stop), stop_pattern),
        )
        by_generate = self.decoder == GENERATE
        swap = None if by_generate else self._use_decode_attention()
        on_cpu = self.fast and self.device.type == "cpu" and not by_generate
        linears = weight_first(self.model, self._packs) if on_cpu else nullcontext()
        try:
            with torch.inference_mode(), linears:
                start = 0
                while start < len(prompts):
                    end = min(start + size, len(prompts))
                    if self.fast:  # as many rows as the device has memory for (a row's result is its own)
                        longest = max(len(encoded[i]) for i in range(start, end))
                        end = start + min(
                            end - start, self._rows_that_fit(longest + max_new_tokens, end - start)
                        )
                    chunk = list(range(start, end))
                    run = (
                        self._generate_by_transformers
                        if by_generate
                        else self._generate_fast
                        if self.fast
                        else self._generate_fallback
                    )
                    outs = run([encoded[i] for i in chunk], [seeds[i] for i in chunk], **settings)
                    for i, reply in zip(chunk, outs):
                        replies[i] = reply
                    start = end
        finally:
            if swap is not None:
                self.model.set_attn_implementation(swap)
                self._decode_attention = False
            if not self._keep_between_calls:
                self._store.clear()
        self.counters["generated_tokens"] += sum(r.n_tokens for r in replies if r is not None)
        return replies  # type: ignore[return-value]

    def next_token_logprobs(self, prompts: Sequence[str], opening: str = "", *, token_ids=None):
        """log p(next token) after each prompt's model input plus ``opening`` (the start of the reply).

        A (len(prompts), vocab) float32 tensor; with ``token_ids``, its columns of those tokens only (what
        the vllm backend gives). The prompts are encoded as :meth:`generate` encodes them
        (their common beginning once, kept prompts reused, rows of similar length together), as many at a
        time as fit; without the fast path, one plain forward pass per prompt.
        """
        import torch

        opening_ids = text_ids(self.tokenizer, opening)
        encoded = [self.encode(prompt) + opening_ids for prompt in prompts]
        columns = (
            None if token_ids is None else torch.as_tensor(token_ids, dtype=torch.long, device=self.device)
        )
        rows: list = [None] * len(encoded)
        linears = (
            weight_first(self.model, self._packs)
            if self.fast and self.device.type == "cpu"
            else nullcontext()
        )
        with torch.inference_mode(), linears:
            start = 0
            while start < len(encoded):
                if not self.fast:
                    ids = torch.tensor([encoded[start]], device=self.device)
                    logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1:]
                    order, end = [0], start + 1
                else:
                    end = min(start + (self.max_batch or len(encoded)), len(encoded))
                    longest = max(len(encoded[i]) for i in range(start, end))
                    end = start + self._rows_that_fit(longest + 1, end - start)
                    plan = self._plan(encoded[start:end])
                    _, _, logits = self._prefill(plan, max_new_tokens=1, keep=False)
                    order = plan.order
                for b, i in enumerate(order):
                    logp = torch.log_softmax(logits[b].float(), dim=-1)
                    rows[start + i] = (logp if columns is None else logp[columns]).cpu()  # named ones only
                start = end
            if not self._keep_between_calls:
                self._store.clear()
        if not rows:
            return torch.empty(0, len(columns) if columns is not None else 0)
        return torch.stack(rows)

    def continuation_logprobs(
        self, prompts: Sequence[str], opening: str, continuations: Sequence[str], *, lead: str = " "
    ):
        """log p(continuation | prompt's model input + ``opening``) for every prompt and continuation.

        A (len(prompts), len(continuations)) float32 tensor: each continuation's tokens (encoded after
        ``lead``, a space as a word follows the opening; ``""`` for a reply's very beginning) summed. The prompts are encoded as :meth:`generate` encodes
        them (their common beginning once, kept prompts reused, rows of similar length together); each
        prompt's last position scores every continuation's first token, and its keys and values are
        repeated for the continuations of more than one token only, which are scored in one batch (most
        words are one token, so this pass is small). Without the fast path, one prompt at a time.
        """
        import torch

        opening_ids = text_ids(self.tokenizer, opening)
        pieces = [self.tokenizer(lead + c, add_special_tokens=False)["input_ids"] for c in continuations]
        if not pieces or any(not p for p in pieces):
            raise ValueError("every continuation needs at least one token")
        longer = [i for i, p in enumerate(pieces) if len(p) > 1]
        width = max((len(pieces[i]) for i in longer), default=1)
        pad = self._end_ids[0]
        # Right padding: a continuation's tokens never attend to the padding after them.
        tokens = torch.tensor(
            [pieces[i] + [pad] * (width - len(pieces[i])) for i in longer],
            dtype=torch.long,
            device=self.device,
        ).reshape(len(longer), width)
        mask = torch.tensor(
            [[1.0] * len(pieces[i]) + [0.0] * (width - len(pieces[i])) for i in longer]
        ).reshape(len(longer), width)
        continuation = _Continuations(torch.tensor([p[0] for p in pieces]), longer, tokens, mask)
        encoded = [self.encode(prompt) + opening_ids for prompt in prompts]
        if not self.fast:
            return self._continuation_logprobs_plainly(encoded, continuation)
        rows: list = [None] * len(encoded)
        linears = weight_first(self.model, self._packs) if self.device.type == "cpu" else nullcontext()
        with torch.inference_mode(), linears:
            start = 0
            while start < len(encoded):
                end = min(start + (self.max_batch or len(encoded)), len(encoded))
                longest = max(len(encoded[i]) for i in range(start, end))
                end = start + self._rows_that_fit(longest + width, end - start)
                plan = self._plan(encoded[start:end])
                layers, attention, logits = self._prefill(plan, max_new_tokens=width, keep=False)
                for b, i in enumerate(plan.order):
                    prompt = _PromptState(
                        [(layer.keys[b : b + 1], layer.values[b : b + 1]) for layer in layers],
                        attention[b : b + 1, : plan.width],
                        len(plan.arrays[i]),
                    )
                    rows[start + i] = self._score_continuations(logits[b], prompt, continuation)
                start = end
            if not self._keep_between_calls:
                self._store.clear()
        return torch.stack(rows) if rows else torch.empty(0, len(pieces))

    def _score_continuations(self, last_logits, prompt: _PromptState, continuation: _Continuations):
        """One prompt's row of :meth:`continuation_logprobs`, from the logits of its last position and its
        keys and values (``prompt.kv``, over ``prompt.attention``'s slots)."""
        import torch
        from transformers import DynamicCache

        logp = torch.log_softmax(last_logits.float(), dim=-1).cpu()[continuation.first_tokens]
        longer = continuation.longer
        if longer:
            cache = DynamicCache()
            for index, (keys, values) in enumerate(prompt.kv):
                cache.update(keys.repeat(len(longer), 1, 1, 1), values.repeat(len(longer), 1, 1, 1), index)
            steps = continuation.tokens.shape[1] - 1
            attention = torch.cat(
                [
                    prompt.attention.repeat(len(longer), 1),
                    torch.ones(
                        (len(longer), steps), dtype=prompt.attention.dtype, device=prompt.attention.device
                    ),
                ],
                dim=1,
            )
            positions = (prompt.length + torch.arange(steps, device=self.device)).repeat(len(longer), 1)
            logits = self.model(
                input_ids=continuation.tokens[:, :-1],
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            ).logits
            later = torch.log_softmax(logits.float(), dim=-1).cpu()
            picked = later.gather(2, continuation.tokens[:, 1:].cpu().unsqueeze(-1)).squeeze(-1)
            logp[longer] += (picked * continuation.mask[:, 1:]).sum(dim=1)
        return logp

    def _continuation_logprobs_plainly(self, encoded: list[list[int]], continuation: _Continuations):
        """:meth:`continuation_logprobs` without the fast path: the prompts' common beginning run once, then
        each prompt's own end on top of it, one prompt at a time."""
        import torch
        from transformers import DynamicCache

        shared = shared_prefix_length(encoded)
        rows = []
        with torch.inference_mode():
            prefix_cache = DynamicCache()
            if shared:  # the prompts' common beginning (the game's instructions), run once
                self.model(
                    input_ids=torch.tensor([encoded[0][:shared]], device=self.device),
                    past_key_values=prefix_cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
            for prompt_ids in encoded:
                cache = copy.deepcopy(prefix_cache)
                ids = torch.tensor([prompt_ids[shared:]], device=self.device)
                first = self.model(
                    input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1
                ).logits
                kv = [(layer.keys, layer.values) for layer in cache.layers]
                attention = torch.ones((1, len(prompt_ids)), dtype=torch.long, device=self.device)
                rows.append(
                    self._score_continuations(
                        first[0, -1], _PromptState(kv, attention, len(prompt_ids)), continuation
                    )
                )
        return torch.stack(rows) if rows else torch.empty(0, len(continuation.first_tokens))

    def _use_decode_attention(self) -> str | None:
        """On CPU, route one-token attention through :func:`decode_attention` for this call.

        Returns the implementation to restore afterwards (None when nothing was changed).
        """
        current = getattr(self.model.config, "_attn_implementation", None)
        if not self.fast or current != "sdpa" or self.device.type != "cpu":
            return None
        register_decode_attention()
        self.model.set_attn_implementation(DECODE_ATTENTION)
        # A model that cannot switch at run time keeps its attention (transformers logs why).
        self._decode_attention = self.model.config._attn_implementation == DECODE_ATTENTION
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

    def _finish(self, ids: list[int], finish: str, stop: _Ends) -> Reply:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        for s in stop.strings:
            if s in text:
                text = text[: text.index(s)]
        text, _ = cut_at(text, stop.pattern)
        return Reply(text=text, n_tokens=len(ids), finish_reason=finish)

    def _stopped_by_text(self, ids: list[int], stop: _Ends) -> bool:
        if not stop.strings and not stop.pattern:
            return False
        tail = self.tokenizer.decode(ids[-_TAIL_TOKENS:], skip_special_tokens=True)
        if any(s in tail for s in stop.strings):
            return True
        return cut_at(tail, stop.pattern)[1]

    # ----------------------------------------------------------------------------------- prefix reuse

    def _ensure_prefix(self, prefix) -> Entry:
        """The stored entry that starts with ``prefix``: encoded at batch 1 on top of its best kept match."""
        import torch
        from transformers import DynamicCache

        entry, length = self._store.match(prefix)
        if length == len(prefix):
            return entry
        cache = DynamicCache()
        if entry is not None and length >= MIN_PREFIX:
            for layer, (k, v) in enumerate(entry.kv):
                cache.update(k[:, :, :length], v[:, :, :length], layer)
        else:
            length = 0
        rest = torch.as_tensor(prefix[length:], dtype=torch.long, device=self.device)[None]
        positions = torch.arange(length, len(prefix), device=self.device)[None]
        self.model(
            input_ids=rest, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1
        )
        self.counters["prompt_tokens"] += len(prefix) - length
        self.counters["reused_tokens"] += length
        return self._store.add(prefix.copy(), [(layer.keys, layer.values) for layer in cache.layers])

    # ------------------------------------------------------------------------------------ fast path

    def _generate_fast(self, encoded, seeds, *, temperature, top_k, max_new_tokens, min_new_tokens, stop):
        plan = self._plan(encoded)
        layers, attention, logits = self._prefill(plan, max_new_tokens)
        order = [seeds[i] for i in plan.order]
        sampler = make_sampler(self.sampler, order, temperature, top_k, self.device, self._end_ids)
        decode = self._decode_on_device if isinstance(sampler, CounterSampler) else self._decode
        generated, finish = decode(
            plan,
            layers,
            attention,
            logits,
            sampler,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
            stop=stop,
        )
        replies: list[Reply | None] = [None] * len(encoded)
        for b, i in enumerate(plan.order):
            replies[i] = self._finish(generated[b], finish[b] or FINISH_LENGTH, stop)
        return replies

    def _plan(self, encoded) -> _Plan:
        """Which tokens of each prompt are found in the store and which are encoded, in which groups."""
        arrays = [np.asarray(e, dtype=np.int64) for e in encoded]
        n = len(arrays)
        # 1. The prefix the whole batch shares is encoded once (or found in the store).
        shared, shared_entry = 0, None
        if n > 1:
            shared = min(len(a) for a in arrays) - 1
            for a in arrays[1:]:
                shared = common_length(arrays[0], a, shared)
            if shared >= MIN_PREFIX:
                shared_entry = self._ensure_prefix(arrays[0][:shared])
            # Rows that begin alike beyond it (two roles' prompts asked together) have their beginning
            # encoded once too, and take it from the store below.
            for prefix in _group_prefixes(arrays, shared + MIN_PREFIX):
                self._ensure_prefix(prefix)
        # 2. Each row reuses its longest kept prefix and encodes the rest (at least one token).
        sources = []
        for a in arrays:
            entry, length = self._store.match(a)
            length = min(length, len(a) - 1)
            sources.append((entry, length) if length >= MIN_PREFIX else (None, 0))
        past = [length for _, length in sources]
        todo = [len(a) - p for a, p in zip(arrays, past)]
        if shared_entry is None or min(past) < shared:
            shared = 0  # every row holds the shared prefix in slots [0, shared), copied from shared_entry
        self.counters["prompt_tokens"] += sum(todo)
        self.counters["reused_tokens"] += sum(past)
        # 3. Rows in decode order (by length still to encode), grouped so padding stays small.
        order = sorted(range(n), key=lambda i: todo[i])
        spans = []
        for g in self._prefill_groups([todo[i] for i in order]):  # ranges of decode positions
            rows = [order[b] for b in g]
            spans.append((g[0], g[-1] + 1, max(past[i] for i in rows), max(todo[i] for i in rows)))
        width = max(c + s for _, _, c, s in spans)
        return _Plan(arrays, shared, shared_entry, sources, past, todo, order, spans, width)

    def _prefill(self, plan: _Plan, max_new_tokens: int, keep: bool = True):
        """Encode every prompt into preallocated buffers (room for ``max_new_tokens`` more); return the
        cache layers over them, the attention mask and the logits of each prompt's last token. ``keep``: the
        prompts go to the store for later calls (a prompt that is only scored, never continued, does not)."""
        import torch
        from transformers.cache_utils import Cache

        device, n, width, shared = self.device, len(plan.arrays), plan.width, plan.shared
        capacity = width + max_new_tokens
        buffers = [
            (
                torch.zeros((n, heads, capacity, dim), dtype=self._kv_dtype(dtype), device=device),
                torch.zeros((n, heads, capacity, dim), dtype=self._kv_dtype(dtype), device=device),
            )
            for heads, dim, dtype in self._layout()
        ]
        # The mask, the ids and the positions are laid out on the host and copied over once (per group for
        # the ids and positions), not row by row.
        mask = np.zeros((n, capacity), dtype=np.int64)
        mask[:, :shared] = 1
        for start, end, _, s_width in plan.spans:
            for b in range(start, end):
                i = plan.order[b]
                c, s = plan.sources[i][1], plan.todo[i]
                if c > shared:
                    mask[b, width - s_width - (c - shared) : width - s_width] = 1
                mask[b, width - s : width] = 1
        attention = torch.from_numpy(mask).to(device)
        first_logits = []
        BufferLayer = buffer_layer_class()
        for start, end, c_width, s_width in plan.spans:
            ids = np.zeros((end - start, s_width), dtype=np.int64)
            positions = np.zeros((end - start, s_width), dtype=np.int64)
            if shared:  # the prefix every row shares: one copy per layer for the group's rows
                for (kb, vb), (k, v) in zip(buffers, plan.shared_entry.kv):
                    kb[start:end, :, :shared], vb[start:end, :, :shared] = k[0, :, :shared], v[0, :, :shared]
            kept = [(b, *plan.sources[plan.order[b]]) for b in range(start, end)]
            own = [(b, entry, c) for b, entry, c in kept if c > shared]  # beyond what the batch shares
            copy_kept_prefixes(buffers, own, shared, width - s_width, at_once=device.type == "cuda")
            for b in range(start, end):
                i = plan.order[b]
                c, s = plan.sources[i][1], plan.todo[i]
                ids[b - start, s_width - s :] = plan.arrays[i][c:]
                positions[b - start, s_width - s :] = np.arange(c, c + s)
            # The group writes straight into its rows of the decode buffers (views, no copies).
            cache = Cache(
                layers=[BufferLayer(kb[start:end], vb[start:end], width - s_width) for kb, vb in buffers]
            )
            out = self.model(
                input_ids=torch.from_numpy(ids).to(device),
                attention_mask=attention[start:end, :width],
                position_ids=torch.from_numpy(positions).to(device),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            first_logits.append(out.logits[:, -1])
            del cache, out
        if keep and self._keep_between_calls:
            self._keep_prompts(
                plan.arrays, plan.order, plan.spans, plan.past, plan.todo, buffers, width, shared
            )
        return [BufferLayer(kb, vb, width) for kb, vb in buffers], attention, torch.cat(first_logits)

    def _decode(
        self, plan: _Plan, layers, attention, logits, sampler, *, max_new_tokens, min_new_tokens, stop
    ):
        """4. Decode all rows together; finished rows leave the batch as they accumulate. Returns the
        generated ids and the finish reason of each row, by decode position."""
        import torch
        from transformers.cache_utils import Cache

        n, device = len(plan.arrays), self.device
        cache = Cache(layers=layers)
        next_position = torch.tensor([len(plan.arrays[i]) for i in plan.order], device=device)
        generated: list[list[int]] = [[] for _ in range(n)]  # by decode position
        finish: list[str | None] = [None] * n
        active = list(range(n))  # batch row -> decode position
        length = plan.width
        with shared_slots(plan.shared):
            for step in range(max_new_tokens):
                tokens = sampler.sample(logits, active, suppress_end=step < min_new_tokens)
                for r, token in zip(active, tokens.tolist()):  # one copy to the host per step
                    if finish[r] is not None:
                        continue
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
                    attention, next_position, tokens = attention[index], next_position[index], tokens[index]
                    active = [active[b] for b in keep]
                logits = self._step(cache, tokens, attention, length, next_position)
                length += 1
                next_position = next_position + 1
        return generated, finish

    def _step(self, cache, tokens, attention, length: int, next_position):
        """One decoding step of every row in the batch: its next-token logits. ``attention``'s slot
        ``length`` (the new token's) is set."""
        attention[:, length] = 1
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=attention[:, : length + 1],
            position_ids=next_position[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        return out.logits[:, -1]

    def _decode_on_device(
        self, plan: _Plan, layers, attention, logits, sampler, *, max_new_tokens, min_new_tokens, stop
    ):
        """4. Decode all rows together, the tokens kept on the device (:class:`DeviceLedger`): read back
        every :attr:`read_every` steps, when the finished rows leave the batch; nothing else is copied to
        the host. Returns what :meth:`_decode` returns, the same replies for the same draws."""
        import torch
        from transformers.cache_utils import Cache

        n, device = len(plan.arrays), self.device
        cache = Cache(layers=layers)
        next_position = torch.tensor([len(plan.arrays[i]) for i in plan.order], device=device)
        ledger = DeviceLedger(n, max_new_tokens, sampler.end_index, device, self.read_every)
        active, index = list(range(n)), torch.arange(n, device=device)  # batch row -> decode position
        length = plan.width
        with shared_slots(plan.shared):
            for step in range(max_new_tokens):
                tokens = sampler.sample(logits, active, suppress_end=step < min_new_tokens)
                ledger.record(tokens, index, step)
                if ledger.due(step):
                    ledger.read(active, index, step, lambda ids: self._stopped_by_text(ids, stop))
                    keep = [b for b, r in enumerate(active) if ledger.finish[r] is None]
                    if not keep or step == max_new_tokens - 1:
                        break
                    if len(keep) < len(active):
                        rows = torch.tensor(keep, dtype=torch.long, device=device)
                        for layer in layers:
                            layer.keep_rows(rows)
                        attention, next_position, tokens = attention[rows], next_position[rows], tokens[rows]
                        active, index = [active[b] for b in keep], index[rows]
                logits = self._step(cache, tokens, attention, length, next_position)
                length += 1
                next_position = next_position + 1
        return ledger.generated, ledger.finish

    def _keep_prompts(self, arrays, order, spans, past, todo, buffers, width, shared) -> None:
        """Store each prompt's keys/values so the game's next prompt can reuse them (once: a prompt the
        store already holds whole, as when a batch asks the same prompt many times, is not stored again)."""
        import torch

        for start, end, _, s_width in spans:
            for b in range(start, end):
                i = order[b]
                if self._store.match(arrays[i])[1] == len(arrays[i]):
                    continue
                c, s = past[i], todo[i]
                slots = [
                    slice(0, shared),
                    slice(width - s_width - (c - shared), width - s_width),
                    slice(width - s, width),
                ]
                kv = [
                    (
                        torch.cat([kb[b : b + 1, :, x] for x in slots], dim=2),
                        torch.cat([vb[b : b + 1, :, x] for x in slots], dim=2),
                    )
                    for kb, vb in buffers
                ]
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

    def _generate_by_transformers(self, encoded, seeds, **settings):
        """``decoder: generate``: the rows by ``model.generate`` with a static cache (:mod:`.generate`)."""
        return generate_replies(self, encoded, seeds, **settings)

    def _stop_criteria(self, strings: tuple[str, ...]):
        """transformers' stopping criterion for ``strings`` (``decoder: generate``), built once for them."""
        if strings not in self._stops:
            from transformers import StopStringCriteria

            self._stops[strings] = StopStringCriteria(self.tokenizer, list(strings))
        return self._stops[strings]

    def _static_cache(self, rows: int, length: int):
        """A static cache for ``rows`` rows of ``length`` tokens: the last call's, emptied, where the shape is
        the same (its compiled step then serves again), else a new one."""
        from transformers import StaticCache

        if self._static is not None and self._static[0] == (rows, length):
            self._static[1].reset()
            return self._static[1]
        self._static = None  # the old cache's memory goes before the new one takes its own
        cache = StaticCache(config=self.model.config, max_cache_len=length)
        self._static = ((rows, length), cache)
        return cache

    def _generate_fallback(self, encoded, seeds, *, temperature, top_k, max_new_tokens, min_new_tokens, stop):
        """``model.generate`` one prompt at a time: slow, but correct for any architecture."""
        import torch

        replies = []
        for ids, seed in zip(encoded, seeds):
            if seed is not None:
                torch.manual_seed(seed)
            input_ids = torch.tensor([ids], device=self.device)
            kwargs = dict(
                max_new_tokens=max_new_tokens,
                min_new_tokens=min_new_tokens,
                eos_token_id=self._end_ids,
                pad_token_id=self.tokenizer.pad_token_id,
                attention_mask=torch.ones_like(input_ids),
            )
            if stop.strings:
                kwargs.update(stop_strings=list(stop.strings), tokenizer=self.tokenizer)
            if temperature > 0:
                kwargs.update(do_sample=True, temperature=temperature, top_k=top_k or None)
            else:
                kwargs.update(do_sample=False)
            out = self.model.generate(input_ids, **kwargs)[0, len(ids) :].tolist()
            ended = bool(out) and out[-1] in self._end_ids
            if ended:
                out = out[:-1]
            finish = FINISH_STOP if ended or len(out) < max_new_tokens else FINISH_LENGTH
            self.counters["prompt_tokens"] += len(ids)
            replies.append(self._finish(out, finish, stop))
        return replies
