"""The transformers and torch internals the hf engine (spag/players/hf) builds on, each tested for the behaviour
the engine relies on, not only for being there: an upgrade that changes one fails the test named after it.

What the engine touches, and where it is tested (tiny float32 tensors and a tiny random Llama, fast tier):

- ``DynamicCache``: the keys/values of each layer after a forward pass (``HFPlayer._layout``, the prefix
  store), a cache seeded through ``update`` (``HFPlayer._ensure_prefix``), seeded with a prompt's keys
  repeated once per continuation, and copied (``HFPlayer.continuation_logprobs``);
- ``DynamicLayer``: built with no arguments, its fields after an update (``keys``, ``values``, ``dtype``,
  ``device``, ``is_initialized``), which ``prefix_store.BufferLayer`` sets itself;
- ``Cache(layers=...)``: a forward pass writes through each layer's ``update`` and sizes its masks by the
  layers' ``get_seq_length`` (the engine's in-place buffers);
- the model's forward pass with explicit ``position_ids`` and ``logits_to_keep=1``;
- ``AttentionInterface.register`` with ``PreTrainedModel.set_attn_implementation`` (and the
  ``config._attn_implementation`` the player reads), ``AttentionMaskInterface.register`` with
  ``masking_utils.sdpa_mask`` (the masks the decode attention is given), ``sdpa_attention_forward`` (its
  fallback) and torch's SDPA with ``enable_gqa`` (its prompt path);
- the config fields ``supports_fast_path`` reads (``layer_types``, ``sliding_window``, ...);
- torch: oneDNN's private ``mkldnn._reorder_linear_weight`` and ``mkldnn._linear_pointwise``
  (``linear.PackedWeights``), a parameter's ``_version``, and a module's ``forward`` replaced on the
  instance (``linear.weight_first``).

That compat.FAST_PATH_API's names exist is tests/test_players.py::test_this_transformers_runs_the_fast_path;
the decode attention's own arithmetic and the packed layers inside the engine are tested there too.
"""

from __future__ import annotations

import copy
from functools import partial
from types import SimpleNamespace

import pytest
import torch

HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 4, 2, 8, 2, 96


@pytest.fixture(scope="module")
def model():
    """A tiny random Llama with grouped key/value heads, float32, SDPA attention."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HEADS * HEAD_DIM,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=128,
    )
    tiny = LlamaForCausalLM(config).to(torch.float32).eval()
    tiny.set_attn_implementation("sdpa")
    return tiny


def _ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _forward(model, ids, **kwargs):
    with torch.inference_mode():
        return model(input_ids=ids, use_cache=True, **kwargs)


# ------------------------------------------------------------------------------------ caches and layers


def test_dynamic_cache_holds_each_layers_keys_and_values_by_kv_head(model):
    """HFPlayer._layout reads (kv heads, head dim, dtype) from ``cache.layers[i].keys``; the prefix store keeps
    ``(layer.keys, layer.values)`` of shape (batch, kv heads, tokens, head dim)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    _forward(model, _ids(2, 5), past_key_values=cache, logits_to_keep=1)
    assert len(cache.layers) == LAYERS
    for layer in cache.layers:
        assert layer.keys.shape == layer.values.shape == (2, KV_HEADS, 5, HEAD_DIM)
        assert layer.keys.dtype == torch.float32
    assert cache.get_seq_length() == 5


def test_dynamic_cache_seeded_through_update_continues_a_prompt(model):
    """HFPlayer._ensure_prefix copies kept keys/values into a fresh DynamicCache with ``update(k, v, layer)`` and
    encodes only the rest of the prompt, at explicit positions: the logits are those of the whole prompt."""
    from transformers import DynamicCache

    ids = _ids(1, 9)
    whole = _forward(model, ids, logits_to_keep=1).logits[0, -1]
    kept = DynamicCache()
    _forward(model, ids[:, :6], past_key_values=kept)
    seeded = DynamicCache()
    for index, layer in enumerate(kept.layers):
        seeded.update(layer.keys[:, :, :4], layer.values[:, :, :4], index)  # reuse 4 of the 6 kept tokens
    assert seeded.get_seq_length() == 4
    rest = _forward(
        model, ids[:, 4:], position_ids=torch.arange(4, 9)[None], past_key_values=seeded, logits_to_keep=1
    ).logits[0, -1]
    torch.testing.assert_close(rest, whole, rtol=1e-4, atol=1e-5)
    assert seeded.get_seq_length() == 9


def test_a_cache_seeded_with_a_prompts_repeated_keys_continues_each_row_as_a_whole_pass(model):
    """continuation_logprobs seeds a DynamicCache through ``update`` with one prompt's keys and values,
    padding slots among them, repeated once per continuation, and runs the continuations on top with the
    slots' mask and explicit positions: each row's logits are those of the whole sequence run plainly. Its
    plain path first deep-copies a cache, which then grows apart from the original."""
    from transformers import DynamicCache

    prompt, continuations = _ids(1, 5), _ids(3, 2, seed=2)
    padded = torch.cat([torch.zeros((1, 2), dtype=torch.long), prompt], dim=1)  # two padding slots first
    slots = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    seeded = _forward(model, padded, attention_mask=slots, position_ids=torch.tensor([[0, 0, 0, 1, 2, 3, 4]]))
    cache = DynamicCache()
    for index, layer in enumerate(seeded.past_key_values.layers):
        cache.update(layer.keys.repeat(3, 1, 1, 1), layer.values.repeat(3, 1, 1, 1), index)
    copied = copy.deepcopy(cache)
    with torch.inference_mode():
        out = model(
            input_ids=continuations,
            attention_mask=torch.cat([slots.repeat(3, 1), torch.ones((3, 2), dtype=torch.long)], dim=1),
            position_ids=torch.tensor([[5, 6]]).repeat(3, 1),
            past_key_values=cache,
            use_cache=True,
        ).logits
        for row in range(3):
            whole = model(input_ids=torch.cat([prompt[0], continuations[row]])[None]).logits[0, -2:]
            torch.testing.assert_close(out[row], whole, rtol=1e-4, atol=1e-5)
    assert cache.get_seq_length() == 9 and copied.get_seq_length() == 7  # the copy is a cache of its own


def test_dynamic_layer_is_built_bare_and_filled_by_its_first_update():
    """BufferLayer calls ``DynamicLayer.__init__()`` and then sets the fields an update would have set."""
    from transformers.cache_utils import DynamicLayer

    layer = DynamicLayer()
    assert layer.keys is None and layer.values is None and not layer.is_initialized
    assert layer.get_seq_length() == 0
    keys, values = torch.randn(2, KV_HEADS, 3, HEAD_DIM), torch.randn(2, KV_HEADS, 3, HEAD_DIM)
    out_keys, out_values = layer.update(keys, values)
    assert layer.is_initialized and layer.dtype == torch.float32 and layer.device == keys.device
    assert out_keys is layer.keys and out_values is layer.values
    torch.testing.assert_close(layer.keys, keys)
    assert layer.get_seq_length() == 3
    assert layer.get_mask_sizes(1) == (4, 0)  # the mask of one more token covers the cache and that token


class _Recorded:
    """Wraps the engine's buffer layer class to record what the model hands each layer's ``update``."""

    def __init__(self):
        from spag.players.hf.prefix_store import buffer_layer_class

        calls = self.calls = []
        buffer = buffer_layer_class()

        class RecordingLayer(buffer):
            def update(self, key_states, value_states, *args, **kwargs):
                calls.append((self, tuple(key_states.shape), tuple(value_states.shape)))
                return super().update(key_states, value_states, *args, **kwargs)

        self.layer_class = RecordingLayer


def test_a_cache_of_buffer_layers_decodes_as_a_dynamic_cache(model):
    """The engine decodes over ``Cache(layers=[BufferLayer...])``: preallocated buffers written in place by the
    layer's ``update``, read as views of the filled slots. The model must hand each layer its new keys and
    values (by kv head), read back what ``update`` returns, and size masks by ``get_seq_length``, not by
    the buffers' capacity: then the logits are DynamicCache's."""
    from transformers import DynamicCache
    from transformers.cache_utils import Cache

    prompt, steps, capacity = _ids(2, 6), _ids(2, 3, seed=2), 20
    mask = torch.ones(2, 6 + 3, dtype=torch.long)
    reference = DynamicCache()
    expected = [_forward(model, prompt, past_key_values=reference).logits[:, -1]]
    expected += [
        _forward(
            model,
            steps[:, i : i + 1],
            attention_mask=mask[:, : 7 + i],
            past_key_values=reference,
            position_ids=torch.full((2, 1), 6 + i),
        ).logits[:, -1]
        for i in range(3)
    ]

    recorded = _Recorded()
    buffers = [
        (torch.zeros(2, KV_HEADS, capacity, HEAD_DIM), torch.zeros(2, KV_HEADS, capacity, HEAD_DIM))
        for _ in range(LAYERS)
    ]
    layers = [recorded.layer_class(k, v, 0) for k, v in buffers]
    cache = Cache(layers=layers)
    got = [
        _forward(model, prompt, past_key_values=cache, position_ids=torch.arange(6).expand(2, -1)).logits[
            :, -1
        ]
    ]
    for i in range(3):
        out = _forward(
            model,
            steps[:, i : i + 1],
            attention_mask=mask[:, : 7 + i],
            past_key_values=cache,
            position_ids=torch.full((2, 1), 6 + i),
        )
        got.append(out.logits[:, -1])
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    # One update per layer per pass, in layer order, with (batch, kv heads, new tokens, head dim).
    assert [c[0] for c in recorded.calls] == layers * 4
    assert [c[1] for c in recorded.calls] == [(2, KV_HEADS, 6, HEAD_DIM)] * LAYERS + [
        (2, KV_HEADS, 1, HEAD_DIM)
    ] * 6
    assert cache.get_seq_length() == 9
    torch.testing.assert_close(buffers[0][0][:, :, :9], reference.layers[0].keys)


def test_logits_to_keep_one_gives_the_last_positions_logits(model):
    ids = _ids(2, 7)
    full = _forward(model, ids).logits
    last = _forward(model, ids, logits_to_keep=1).logits
    assert last.shape == (2, 1, VOCAB)
    torch.testing.assert_close(last[:, 0], full[:, -1], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ attention and masks


@pytest.fixture
def spied_attention(model):
    """A registered attention that records the masks and shapes it gets and computes as SDPA does; the model
    runs it meanwhile, then gets SDPA back."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    seen = []

    def attention(module, query, key, value, attention_mask, **kwargs):
        seen.append(SimpleNamespace(query=query.shape, key=key.shape, mask=attention_mask, kwargs=kwargs))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("spag_test_attention", attention)
    AttentionMaskInterface.register("spag_test_attention", sdpa_mask)
    model.set_attn_implementation("spag_test_attention")
    try:
        yield seen
    finally:
        model.set_attn_implementation("sdpa")


def test_a_registered_attention_is_the_one_the_model_calls(model, spied_attention):
    """HFPlayer._use_decode_attention registers decode_attention, switches to it with set_attn_implementation
    and checks ``config._attn_implementation``; the model then calls it with unrepeated grouped keys."""
    assert model.config._attn_implementation == "spag_test_attention"
    ids = _ids(2, 5)
    got = _forward(model, ids).logits
    assert len(spied_attention) == LAYERS
    for call in spied_attention:
        assert call.query == (2, HEADS, 5, HEAD_DIM) and call.key == (2, KV_HEADS, 5, HEAD_DIM)
        assert call.kwargs["scaling"] == pytest.approx(HEAD_DIM**-0.5) and call.kwargs["dropout"] == 0.0
    model.set_attn_implementation("sdpa")
    assert model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(got, _forward(model, ids).logits, rtol=1e-5, atol=1e-5)
    assert len(spied_attention) == LAYERS  # SDPA again: the registered function is no longer called


def test_the_registered_sdpa_mask_gives_a_boolean_mask_only_where_there_is_padding(model, spied_attention):
    """What decode_attention is given under its registered mask function: a bool (batch, 1, queries, keys)
    mask, True where a row attends, when anything is padded; None for one new token and no padding."""
    from transformers import DynamicCache

    padded = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    cache = DynamicCache()
    _forward(model, _ids(2, 5), attention_mask=padded, past_key_values=cache)
    prompt_mask = spied_attention[-1].mask
    assert prompt_mask.dtype == torch.bool and prompt_mask.shape == (2, 1, 5, 5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    torch.testing.assert_close(prompt_mask[:, 0], causal & padded.bool()[:, None, :])

    step = torch.cat([padded, torch.ones(2, 1, dtype=torch.long)], dim=1)
    _forward(
        model,
        _ids(2, 1, seed=3),
        attention_mask=step,
        past_key_values=cache,
        position_ids=torch.tensor([[3], [5]]),
    )
    step_mask = spied_attention[-1].mask
    assert step_mask.dtype == torch.bool and step_mask.shape == (2, 1, 1, 6)
    torch.testing.assert_close(step_mask[:, 0, 0], step.bool())

    unpadded = DynamicCache()
    _forward(model, _ids(2, 4), past_key_values=unpadded)
    _forward(model, _ids(2, 1), attention_mask=torch.ones(2, 5, dtype=torch.long), past_key_values=unpadded)
    assert spied_attention[-1].mask is None


def test_sdpa_mask_combines_causality_and_padding_after_a_cache():
    """masking_utils.sdpa_mask, called as create_causal_mask calls it (registered under the decode attention's
    name): queries at offset 3 of 6 keys, the first key padded out in row 0."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    padding = torch.tensor([[False, True, True, True, True, True], [True] * 6])
    mask = sdpa_mask(
        batch_size=2,
        q_length=3,
        kv_length=6,
        q_offset=3,
        kv_offset=0,
        mask_function=causal_mask_function,
        attention_mask=padding,
        allow_is_causal_skip=True,
    )
    causal = torch.arange(6)[None, :] <= torch.arange(3, 6)[:, None]
    assert mask.shape == (2, 1, 3, 6) and mask.dtype == torch.bool
    torch.testing.assert_close(mask[:, 0], causal[None] & padding[:, None, :])
    assert (
        sdpa_mask(
            batch_size=2,
            q_length=1,
            kv_length=6,
            q_offset=5,
            kv_offset=0,
            mask_function=causal_mask_function,
            attention_mask=torch.ones(2, 6, dtype=torch.bool),
            allow_is_causal_skip=True,
        )
        is None
    )


def _reference_attention(query, key, value, mask):
    """Softmax attention written out, keys/values repeated for grouped heads: (batch, queries, heads, dim)."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    scores = query @ key.transpose(-1, -2) * query.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ value).transpose(1, 2)


def _attention_inputs(queries: int = 2, keys: int = 7):
    generator = torch.Generator().manual_seed(4)
    query = torch.randn(2, HEADS, queries, HEAD_DIM, generator=generator)
    key = torch.randn(2, KV_HEADS, keys, HEAD_DIM, generator=generator)
    value = torch.randn(2, KV_HEADS, keys, HEAD_DIM, generator=generator)
    mask = torch.ones(2, 1, queries, keys, dtype=torch.bool)
    mask[0, ..., :3] = False  # row 0 padded
    return query, key, value, mask


def test_sdpa_attention_forward_takes_grouped_heads_and_returns_queries_first():
    """decode_attention's fallback: ``(out, weights) = sdpa_attention_forward(module, q, k, v, mask, dropout=,
    scaling=)`` with keys by kv head and a bool mask; ``out`` is (batch, queries, heads, dim)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    query, key, value, mask = _attention_inputs()
    module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True, training=False)
    out, _ = sdpa_attention_forward(module, query, key, value, mask, dropout=0.0, scaling=HEAD_DIM**-0.5)
    assert out.shape == (2, 2, HEADS, HEAD_DIM)
    torch.testing.assert_close(out, _reference_attention(query, key, value, mask), rtol=1e-5, atol=1e-5)


def test_torch_sdpa_with_enable_gqa_equals_repeated_heads():
    """decode_attention's prompt path: torch's SDPA told about grouped heads, keys/values not repeated."""
    query, key, value, mask = _attention_inputs(queries=3)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(
        out.transpose(1, 2), _reference_attention(query, key, value, mask), rtol=1e-5, atol=1e-5
    )


# ------------------------------------------------------------------------------------ which models


def test_supports_fast_path_reads_the_attention_layout_of_real_configs():
    """compat.supports_fast_path reads ``get_text_config(decoder=True)``, ``layer_types``, ``sliding_window``,
    ``use_sliding_window`` and ``is_encoder_decoder`` as transformers' own configs set them."""
    from transformers import Gemma2Config, LlamaConfig, MistralConfig, Qwen2Config, T5Config

    from spag.players.hf.compat import supports_fast_path

    assert supports_fast_path(LlamaConfig())
    assert supports_fast_path(Qwen2Config())  # a sliding window it does not use
    assert supports_fast_path(MistralConfig(sliding_window=None))
    assert not supports_fast_path(MistralConfig(sliding_window=4096))
    assert not supports_fast_path(
        Qwen2Config(use_sliding_window=True, sliding_window=64, max_window_layers=0)
    )
    assert not supports_fast_path(Gemma2Config())  # alternating sliding layers
    assert not supports_fast_path(T5Config())


# ------------------------------------------------------------------------------------ torch and oneDNN


needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN"
)


@needs_onednn
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("rows", [1, 5, 64, 300])
def test_onednn_packed_linear_equals_x_times_w_transposed_plus_b(rows, bias):
    """PackedWeights: ``_reorder_linear_weight(W, PACKED_ROWS)`` then ``_linear_pointwise(x, packed, b, "none",
    [], "")`` is ``x @ Wᵀ + b``, for a decoding step's few rows and a prompt's hundreds alike."""
    from spag.players.hf.linear import PACKED_ROWS

    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(96, 48, generator=generator)
    b = torch.randn(96, generator=generator) if bias else None
    x = torch.randn(rows, 48, generator=generator)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_ROWS)
    out = torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
    assert out.shape == (rows, 96) and out.dtype == torch.float32
    torch.testing.assert_close(out, x @ weight.t() + (0 if b is None else b), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_onednn_reorder_copies_the_weight():
    """The packed weight is a copy in oneDNN's layout: a later change to W is not seen, which is why
    PackedWeights packs again when the weight's version moves."""
    weight, x = torch.randn(32, 16), torch.randn(2, 16)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
    before = weight.clone()
    weight.mul_(2.0)
    torch.testing.assert_close(
        torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""),
        x @ before.t(),
        rtol=1e-5,
        atol=1e-5,
    )


def test_a_weight_version_moves_with_an_in_place_update_but_not_through_data():
    """PackedWeights keys a packed copy on ``weight._version``: an optimiser-style in-place update moves it; an
    edit through ``weight.data`` does not (the blind spot linear.py's docstring names)."""
    weight = torch.nn.Parameter(torch.randn(4, 4))
    start = weight._version
    with torch.no_grad():
        weight.mul_(2.0)
    assert weight._version > start
    moved = weight._version
    weight.data.mul_(2.0)
    assert weight._version == moved


def test_a_fused_optimiser_step_does_not_move_a_weight_version():
    """The other blind spot linear.py's docstring names: torch's fused AdamW updates weights in place without
    counting a version, so a PackedWeights made before a training step would keep the old weights (online
    training makes a new player every step). The foreach implementation counts them."""
    weight = torch.nn.Parameter(torch.randn(4, 4))
    weight.grad = torch.randn(4, 4)
    before, start = weight.detach().clone(), weight._version
    torch.optim.AdamW([weight], lr=0.1, fused=True).step()
    assert not torch.equal(weight.detach(), before) and weight._version == start
    torch.optim.AdamW([weight], lr=0.1, foreach=True).step()
    assert weight._version > start


def test_an_instance_forward_replaces_the_class_forward_until_deleted():
    """weight_first routes each nn.Linear by setting ``layer.forward`` on the instance, and restores it with
    ``del layer.forward``."""
    layer = torch.nn.Linear(3, 2)
    x = torch.randn(1, 3)
    layer.forward = partial(lambda module, inputs: torch.zeros(1, 2) + 7, layer)
    torch.testing.assert_close(layer(x), torch.full((1, 2), 7.0))
    del layer.forward
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
