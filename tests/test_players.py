"""Players: reply cleaning, the transformers backend on a tiny real model, vLLM adapter, human player."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch

from spag.game.taboo.prompts import build_prompt
from spag.game.taboo.replies import STOPS, clean_reply, cut_at_next_speaker
from spag.players import PlayerError, derive_seed, load_player
from spag.players.base import per_prompt_seeds
from spag.players.hf import HFPlayer
from spag.players.options import HFOptions
from spag.testing import make_tiny_checkpoint

HISTORY = [
    {"role": "attacker", "content": "What do you drink in the morning to wake up?"},
    {"role": "defender", "content": "Usually a hot cup of tea."},
    {"role": "attacker", "content": "Something darker and stronger than tea, maybe?"},
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")


@pytest.fixture(scope="module")
def player(tiny_dir):
    return load_player(str(tiny_dir), "hf", device="cpu", dtype="float32")  # packing is float32-only


def _prompts():
    # Different lengths and roles: padding, the shared prefix and position ids all get exercised.
    return [
        build_prompt("attacker", "coffee", [], 3),
        build_prompt("defender", "coffee", HISTORY[:1], 3),
        build_prompt("attacker", "apple", HISTORY[:2], 3),
        build_prompt("defender", "banana", HISTORY, 3),
    ]


class _LogitBias:
    """A forward hook on the output layer that adds a fixed bias to some token ids."""

    def __init__(self, model, bias: dict[int, float]):
        self.bias = bias
        self.handle = model.get_output_embeddings().register_forward_hook(self)

    def __call__(self, module, inputs, output):
        output = output.clone()
        for token, value in self.bias.items():
            output[..., token] += value
        return output

    def remove(self):
        self.handle.remove()


class _Script:
    """Hooks that make the model write ``tokens`` one after another, whatever the input.

    A pass over a prompt (more than one input token) yields the first scripted token; each one-token
    decoding pass yields the next.
    """

    def __init__(self, model, tokens: list[int]):
        self.tokens, self.position, self.prompt_pass = tokens, 0, False
        self.handles = [
            model.get_input_embeddings().register_forward_hook(self._saw_input),
            model.get_output_embeddings().register_forward_hook(self),
        ]

    def _saw_input(self, module, inputs, output):
        self.prompt_pass = inputs[0].shape[-1] > 1

    def __call__(self, module, inputs, output):
        self.position = 0 if self.prompt_pass else self.position + 1
        token = self.tokens[min(self.position, len(self.tokens) - 1)]
        forced = torch.full_like(output, -1e4)
        forced[..., token] = 1e4
        return forced

    def remove(self):
        for handle in self.handles:
            handle.remove()


# ------------------------------------------------------------------------------------------ cleaning


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Attacker: Think of fruit.\nDefender: Apple?", "Think of fruit."),
        ("  defender:   I like mornings.", "I like mornings."),
        ("You: Attacker: nested labels", "nested labels"),
        ("**Defender:** bold label", "bold label"),
        ("A hint.\n\nattacker: my next line", "A hint."),
        ("line one\nline two", "line one\nline two"),
        ("Hello<|im_end|>\n<|im_start|>user\nmore", "Hello"),
        ("Defender:", ""),
        ("   ", ""),
    ],
)
def test_clean_reply(raw, expected):
    assert clean_reply(raw) == expected


def test_cut_at_next_speaker_reports_a_cut():
    assert cut_at_next_speaker("hi\nOther player: x") == ("hi", True)
    assert cut_at_next_speaker("hi there") == ("hi there", False)


def test_seeds():
    assert derive_seed(0, 5, 2, 0) == derive_seed(0, 5, 2, 0)
    assert derive_seed(0, 5, 2, 0) != derive_seed(0, 5, 3, 0)
    assert 0 <= derive_seed("x") < 2**31
    assert per_prompt_seeds(7, 3) == [7, 8, 9]
    assert per_prompt_seeds(None, 2) == [None, None]
    with pytest.raises(ValueError):
        per_prompt_seeds([1, 2], 3)


# ---------------------------------------------------------------------------------------- hf backend


@pytest.mark.slow
def test_fast_path_matches_model_generate(player):
    """The custom decode loop (shared prefix, padding, buffers, row dropping) gives generate's tokens."""
    prompts = _prompts()
    fast = player.generate(prompts, temperature=0, max_new_tokens=10, min_new_tokens=0)
    player.fast = False
    try:
        reference = player.generate(prompts, temperature=0, max_new_tokens=10, min_new_tokens=0)
    finally:
        player.fast = True
    assert [r.text for r in fast] == [r.text for r in reference]
    assert [r.n_tokens for r in fast] == [r.n_tokens for r in reference]
    # The prompts were kept; asked again, almost nothing is encoded anew and the replies are the same.
    assert len(player._store.entries) >= len(prompts)
    before = dict(player.counters)
    again = player.generate(prompts, temperature=0, max_new_tokens=10, min_new_tokens=0)
    assert [r.text for r in again] == [r.text for r in fast]
    assert player.counters["prompt_tokens"] - before["prompt_tokens"] == len(prompts)  # one token each


def test_prompts_of_two_kinds_asked_together_have_each_kinds_beginning_encoded_once(tiny_dir):
    """Attacker and defender prompts in one call share only the game's instructions; each kind's longer
    beginning is encoded once as well (not once per prompt), and every reply is what it is when each kind
    is asked alone."""
    attackers = [build_prompt("attacker", w, HISTORY[:2], 3) for w in ("coffee", "apple", "banana")]
    defenders = [build_prompt("defender", w, HISTORY[:1], 3) for w in ("coffee", "apple", "banana")]
    kw = dict(temperature=1.0, top_k=50, max_new_tokens=6, min_new_tokens=1)

    def fresh():
        return load_player(str(tiny_dir), "hf", device="cpu", dtype="float32", prefix_cache_gb=0.5)

    apart, encoded_apart = [], 0
    for prompts, seeds in ((attackers, [1, 2, 3]), (defenders, [4, 5, 6])):
        alone = fresh()
        apart += [r.text for r in alone.generate(prompts, seed=seeds, **kw)]
        encoded_apart += alone.counters["prompt_tokens"]
    together = fresh()
    replies = together.generate(attackers + defenders, seed=[1, 2, 3, 4, 5, 6], **kw)
    assert [r.text for r in replies] == apart
    # Asked together, the two kinds' beginnings and the instructions they share: no more than apart.
    assert together.counters["prompt_tokens"] <= encoded_apart


def test_sampling_is_per_prompt_and_reproducible(player):
    prompts = _prompts()
    seeds = [11, 12, 13, 14]
    kw = dict(temperature=1.2, top_k=50, max_new_tokens=8, min_new_tokens=1)
    batch = player.generate(prompts, seed=seeds, **kw)
    reversed_batch = player.generate(prompts[::-1], seed=seeds[::-1], **kw)
    alone = player.generate(prompts[2:3], seed=seeds[2:3], **kw)
    assert [r.text for r in batch] == [r.text for r in reversed_batch[::-1]]
    assert alone[0].text == batch[2].text
    other = player.generate(prompts, seed=[21, 22, 23, 24], **kw)
    assert [r.text for r in other] != [r.text for r in batch]


def test_a_prompt_asked_many_times_is_kept_once(player):
    """A batch of one prompt asked many times (a Kuhn poker strategy's sampled replies) keeps that prompt's
    keys and values once, and each row samples as it would alone."""
    player.forget()
    prompt = _prompts()[1]
    kw = dict(temperature=1.2, top_k=50, max_new_tokens=6, min_new_tokens=1)
    many = player.generate([prompt] * 12, seed=list(range(12)), **kw)
    assert (
        len(player._store.entries) <= 2
    )  # the prompt, and the prefix the batch shares (all but its last token)
    player.forget()
    assert [player.generate([prompt], seed=[s], **kw)[0].text for s in (0, 5, 11)] == [
        many[s].text for s in (0, 5, 11)
    ]


def test_min_new_tokens_holds_back_an_eager_end(player):
    eos = player.tokenizer.eos_token_id
    hook = _LogitBias(player.model, {eos: 1e4})
    try:
        eager = player.generate(_prompts()[:2], temperature=0, max_new_tokens=8, min_new_tokens=0)
        held = player.generate(_prompts()[:2], temperature=0, max_new_tokens=8, min_new_tokens=3)
    finally:
        hook.remove()
    assert [r.n_tokens for r in eager] == [0, 0] and all(r.text == "" for r in eager)
    assert [r.n_tokens for r in held] == [3, 3]
    assert all(r.finish_reason == "stop" for r in held)


def test_endless_output_is_cut_at_max_new_tokens(player):
    hook = _LogitBias(player.model, {i: -1e4 for i in player._end_ids})
    try:
        replies = player.generate(_prompts(), temperature=1.0, top_k=20, max_new_tokens=6, seed=0)
    finally:
        hook.remove()
    assert all(r.n_tokens == 6 and r.truncated for r in replies)


def test_reply_stops_where_the_other_player_starts(player):
    # Nothing kept between calls, so the prompt is encoded in one pass the script can recognise.
    player = HFPlayer(player.model, player.tokenizer, options=HFOptions(prefix_cache_gb=0))
    tokens = player.tokenizer("Think of tea\ndefender: coffee is it", add_special_tokens=False)["input_ids"]
    script = _Script(player.model, tokens)
    try:
        # the game's stop pattern cuts at another speaker's line, whatever the literal stops
        (reply,) = player.generate(
            _prompts()[:1],
            temperature=0,
            max_new_tokens=40,
            min_new_tokens=0,
            stop=("<never>",),
            stop_pattern=STOPS.pattern,
        )
        (raw,) = player.generate(_prompts()[:1], temperature=0, max_new_tokens=len(tokens), min_new_tokens=0)
    finally:
        script.remove()
    assert reply.text.strip() == "Think of tea"
    assert reply.finish_reason == "stop"
    assert reply.n_tokens < len(tokens)  # generation stopped, it did not run on to the end of the script
    # without stop strings the reply is the model's text as it is (game.replies: raw, the original's)
    assert raw.text.startswith("Think of tea\ndefender: coffee is it") and raw.n_tokens == len(tokens)


def test_saved_checkpoint_plays_with_its_special_tokens(tmp_path):
    """Training saves with setup_special_tokens; play loads the same pad and eos ids back."""
    from transformers import AutoTokenizer

    from spag.models.loading import save_checkpoint, tiny_llama
    from spag.testing import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    tokenizer.pad_token = None  # like many chat models: no pad token of its own
    model = tiny_llama(tokenizer)
    path = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    saved = AutoTokenizer.from_pretrained(path)
    assert saved.pad_token_id == saved.eos_token_id == tokenizer.eos_token_id

    player = load_player(str(path), "hf", device="cpu")
    assert player.tokenizer.pad_token_id == saved.pad_token_id
    assert player.tokenizer.eos_token_id == saved.eos_token_id
    assert player.model.generation_config.eos_token_id == saved.eos_token_id
    assert player.model.generation_config.pad_token_id == saved.pad_token_id
    assert saved.eos_token_id in player._end_ids
    (reply,) = player.generate(_prompts()[:1], temperature=0, max_new_tokens=4)
    assert reply.n_tokens >= 1


def test_auto_means_float32_on_any_cpu_and_a_player_says_so(tiny_dir):
    """dtype auto and bf16 null are float32 on a CPU, with or without native bfloat16 (CI machines have
    either), so that an AVX2 and an AVX-512 machine run the same computation; provenance records what auto
    resolved to."""
    from spag.models.loading import resolve_dtype
    from spag.players.provenance import player_provenance
    from spag.train.job import TrainConfig, _precision

    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"  # an explicit choice stays
    assert _precision(TrainConfig(), "cpu") == (False, False)
    assert _precision(TrainConfig(bf16=True), "cpu")[0] is True
    player = load_player(str(tiny_dir), "hf", device="cpu", dtype="auto")
    assert player_provenance(player)["dtype"] == "float32"


def test_bfloat16_model_on_the_fast_path(tiny_dir):
    player = load_player(str(tiny_dir), "hf", device="cpu", dtype="bfloat16")
    replies = player.generate(_prompts()[:3], temperature=1.0, top_k=20, max_new_tokens=5, seed=1)
    assert len(replies) == 3 and all(1 <= r.n_tokens <= 5 for r in replies)
    assert player.model.config._attn_implementation == "sdpa"  # the decode attention was only borrowed


def test_this_transformers_runs_the_fast_path(player):
    """CI runs this file under both locks' transformers: the batched engine, not the fallback, must run."""
    import transformers

    from spag.players.hf import missing_fast_path_api

    assert missing_fast_path_api() is None, transformers.__version__
    assert player.fast


def test_a_transformers_without_the_fast_path_api_falls_back_to_generate(player, monkeypatch, capsys):
    """The fallback gives the same replies, is said once in a note and is in the player's provenance."""
    import transformers.cache_utils

    from spag.players.hf import compat
    from spag.players.provenance import player_provenance

    prompts = _prompts()[:2]
    fast = player.generate(prompts, temperature=0, max_new_tokens=6, min_new_tokens=0)
    assert {
        k: player_provenance(player)[k] for k in ("engine", "path", "transformers", "fallback_reason")
    } == {
        "engine": "batched",
        "path": "fast",
        "transformers": transformers.__version__,
        "fallback_reason": None,
    }
    monkeypatch.delattr(transformers.cache_utils, "DynamicLayer")
    monkeypatch.setattr(compat, "_TOLD", set())
    capsys.readouterr()
    fallback, again = HFPlayer(player.model, player.tokenizer), HFPlayer(player.model, player.tokenizer)
    reason = f"transformers {transformers.__version__} lacks transformers.cache_utils.DynamicLayer"
    assert capsys.readouterr().err.splitlines() == [
        f"note: hf backend: {reason}: it plays through model.generate, one prompt at a time (correct, slower)"
    ]
    assert not fallback.fast and not again.fast
    assert {k: player_provenance(fallback)[k] for k in ("engine", "path", "fallback_reason")} == {
        "engine": "model.generate",
        "path": "fallback",
        "fallback_reason": reason,
    }
    replies = fallback.generate(prompts, temperature=0, max_new_tokens=6, min_new_tokens=0)
    assert [r.text for r in replies] == [r.text for r in fast]


def test_linear_layers_computed_weight_first_give_nn_linear_results(player):
    from spag.players.hf.linear import WEIGHT_FIRST_ROWS, weight_first, weight_first_linear

    torch.manual_seed(0)
    for bias in (False, True):
        layer = torch.nn.Linear(24, 40, bias=bias)
        for shape in [(3, 24), (5, 1, 24), (2, 7, 24), (WEIGHT_FIRST_ROWS + 1, 24)]:
            x = torch.randn(shape)
            out = weight_first_linear(layer, x)
            assert out.shape == shape[:-1] + (40,)
            torch.testing.assert_close(out, layer(x), rtol=1e-5, atol=1e-6)
    linears = [m for m in player.model.modules() if type(m) is torch.nn.Linear]
    with weight_first(player.model):
        assert all("forward" in vars(m) for m in linears)
    # After a call (which borrows them on CPU) every layer has nn.Linear's own forward back.
    player.generate(_prompts()[:2], temperature=0, max_new_tokens=3)
    assert not any("forward" in vars(m) for m in linears)


def test_packed_weights_give_nn_linear_results_and_follow_their_weight(monkeypatch):
    from spag.players.hf import linear as hf

    monkeypatch.setattr(hf, "PACKED_MIN_WEIGHTS", 1)
    torch.manual_seed(0)
    packs = hf.PackedWeights()
    for bias in (False, True):
        layer = torch.nn.Linear(48, 96, bias=bias)
        packed = packs.get(layer)
        assert packed is not None and packs.available
        assert packs.get(layer) is packed  # kept, not packed again
        for shape in [
            (1, 48),
            (5, 1, 48),
            (hf.PACKED_ROWS, 48),
            (hf.PACKED_ROWS + 1, 48),
            (hf.WEIGHT_FIRST_ROWS + 1, 48),
            (3, 200, 48),
        ]:
            x = torch.randn(shape)
            out = hf.weight_first_linear(layer, x, packed=packed)
            assert out.shape == shape[:-1] + (96,)
            torch.testing.assert_close(out, layer(x), rtol=1e-5, atol=1e-5)
        # An optimiser-style in-place update or a new weight: the packed copy is made again.
        with torch.no_grad():
            layer.weight.mul_(2.0)
        repacked = packs.get(layer)
        assert repacked is not packed
        x = torch.randn(3, 48)
        torch.testing.assert_close(
            hf.weight_first_linear(layer, x, packed=repacked), layer(x), rtol=1e-5, atol=1e-5
        )
        layer.weight = torch.nn.Parameter(torch.randn(96, 48))
        torch.testing.assert_close(
            hf.weight_first_linear(layer, x, packed=packs.get(layer)), layer(x), rtol=1e-5, atol=1e-5
        )
    # Other dtypes and a failed first check pack nothing.
    assert packs.get(torch.nn.Linear(48, 96).to(torch.float64)) is None
    unchecked = hf.PackedWeights()
    monkeypatch.setattr(unchecked, "_first_pack", lambda weight: None)
    assert unchecked.get(torch.nn.Linear(48, 96)) is None and unchecked.available is False


@pytest.mark.parametrize(
    "rows, small_weight, packed_used",
    [
        (3, False, True),  # a decoding step through a large layer: the packed product
        (3, True, False),  # ... through a small one: W @ xᵀ
        (64, True, False),  # up to PACKED_ROWS rows
        (65, True, True),  # more rows (a prompt's): the packed product, whatever the weight's size
        (300, True, True),
    ],
)
def test_which_product_a_linear_layer_takes(monkeypatch, rows, small_weight, packed_used):
    from spag.players.hf import linear as hf

    layer = torch.nn.Linear(48, 96)
    monkeypatch.setattr(hf, "PACKED_MIN_WEIGHTS", layer.weight.numel() + 1 if small_weight else 1)
    packed = hf.PackedWeights().get(layer)
    calls = []
    product = hf.packed_product
    monkeypatch.setattr(hf, "packed_product", lambda *args: calls.append(args) or product(*args))
    x = torch.randn(rows, 48)
    torch.testing.assert_close(
        hf.weight_first_linear(layer, x, packed=packed), layer(x), rtol=1e-5, atol=1e-5
    )
    assert bool(calls) == packed_used


def test_fast_path_with_every_layer_packed_matches_model_generate(tiny_dir, monkeypatch):
    from spag.players.hf import linear as hf

    monkeypatch.setattr(hf, "PACKED_MIN_WEIGHTS", 1)
    packed_player = load_player(str(tiny_dir), "hf", device="cpu", dtype="float32")  # packs float32 only
    prompts = _prompts()
    fast = packed_player.generate(prompts, temperature=0, max_new_tokens=10, min_new_tokens=0)
    linears = [m for m in packed_player.model.modules() if type(m) is torch.nn.Linear]
    assert packed_player._packs.available and len(packed_player._packs._copies) == len(linears)
    packed_player.fast = False
    reference = packed_player.generate(prompts, temperature=0, max_new_tokens=10, min_new_tokens=0)
    assert [r.text for r in fast] == [r.text for r in reference]
    assert [r.n_tokens for r in fast] == [r.n_tokens for r in reference]


def test_decode_attention_reads_the_shared_slots_once_with_the_same_result():
    from spag.players.hf.attention import decode_attention, shared_slots

    torch.manual_seed(0)
    batch, heads, kv_heads, length, dim, shared = 4, 6, 2, 20, 8, 9
    query = torch.randn(batch, heads, 1, dim)
    key, value = torch.randn(batch, kv_heads, length, dim), torch.randn(batch, kv_heads, length, dim)
    key[:, :, :shared], value[:, :, :shared] = key[:1, :, :shared], value[:1, :, :shared]
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    mask[1, ..., shared : shared + 3] = False  # padding between the shared prefix and a row's own part
    module = SimpleNamespace()
    plain, _ = decode_attention(module, query, key, value, mask)
    with shared_slots(shared):
        split, _ = decode_attention(module, query, key, value, mask)
    torch.testing.assert_close(split, plain, rtol=1e-5, atol=1e-6)
    # Only row 0's copy of the shared slots is read: the others' copies make no difference.
    key[1:, :, :shared] = 0.0
    with shared_slots(shared):
        unread, _ = decode_attention(module, query, key, value, mask)
    torch.testing.assert_close(unread, plain, rtol=1e-5, atol=1e-6)


def test_decode_attention_without_a_mask_sees_every_slot_without_sdpa(monkeypatch):
    """HF passes no mask when nothing is padded (prompts of equal length): the grouped path still runs."""
    import transformers.integrations.sdpa_attention as sdpa

    from spag.players.hf.attention import decode_attention

    torch.manual_seed(1)
    batch, heads, kv_heads, length, dim = 3, 6, 2, 15, 8
    query = torch.randn(batch, heads, 1, dim)
    key, value = torch.randn(batch, kv_heads, length, dim), torch.randn(batch, kv_heads, length, dim)
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True, training=False)
    expected, _ = sdpa.sdpa_attention_forward(module, query, key, value, None)
    masked, _ = decode_attention(module, query, key, value, torch.ones(batch, 1, 1, length, dtype=torch.bool))
    calls = []
    real = sdpa.sdpa_attention_forward
    monkeypatch.setattr(sdpa, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    unmasked, _ = decode_attention(module, query, key, value, None)
    assert calls == []  # the grouped matmuls, not SDPA's repeated cache
    torch.testing.assert_close(unmasked, masked, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(unmasked, expected, rtol=1e-5, atol=1e-6)


def test_prompts_of_equal_length_reply_as_each_would_alone(player):
    """No padding anywhere (so no attention mask while decoding): each row still gets its own reply."""
    prompts = [build_prompt("attacker", "coffee", [], 3)] * 3
    kw = dict(temperature=1.2, top_k=50, max_new_tokens=8, min_new_tokens=1)
    batch = player.generate(prompts, seed=[5, 6, 7], **kw)
    alone = [player.generate(prompts[:1], seed=[s], **kw)[0] for s in (5, 6, 7)]
    assert [r.text for r in batch] == [r.text for r in alone]
    assert len({r.text for r in batch}) > 1  # three seeds, not one reply copied


def test_prompt_store_keeps_within_its_budget():
    import numpy as np

    from spag.players.hf.prefix_store import KVStore

    def kv(n):
        return [(torch.zeros(1, 1, n, 4), torch.zeros(1, 1, n, 4))]

    store = KVStore(budget_bytes=2 * 2 * 10 * 4 * 4)  # room for two 10-token entries
    a = np.arange(10)
    store.add(a, kv(10))
    store.add(np.arange(10) + 100, kv(10))
    assert store.match(np.arange(12))[1] == 10  # a is used, so it is the most recent
    store.add(np.arange(10) + 200, kv(10))
    kept = [int(e.tokens[0]) for e in store.entries]
    assert kept == [0, 200]  # the least recently used one went
    assert store.match(np.array([0, 1, 2, 9]))[1] == 3


def test_kept_prefixes_copied_at_once_fill_the_buffers_as_a_copy_per_row_and_layer_does():
    """The GPU's way (one gather and scatter per layer) and the CPU's (a copy per row and layer) put each
    row's own kept prefix, tokens shared to c of its entry, in the same slots, an entry of another dtype
    cast to the buffers'; the other slots are left alone."""
    from spag.players.hf.prefix_store import Entry, copy_kept_prefixes

    generator = torch.Generator().manual_seed(0)
    layers, heads, dim, width, shared, end = 3, 2, 4, 40, 5, 30

    def entry(length, dtype):
        kv = [tuple(torch.randn(1, heads, length, dim, generator=generator).to(dtype) for _ in "kv")]
        return Entry(None, kv * layers, 0)

    rows = [
        (0, entry(20, torch.float32), 20),
        (2, entry(12, torch.bfloat16), 9),
        (3, entry(30, torch.float32), 25),
    ]
    filled = []
    for at_once in (False, True):
        buffers = [tuple(torch.full((4, heads, width, dim), -1.0) for _ in "kv") for _ in range(layers)]
        copy_kept_prefixes(buffers, rows, shared, end, at_once=at_once)
        filled.append(buffers)
    for one, other in zip(*filled):
        for a, b in zip(one, other):
            assert torch.equal(a, b)
    keys = filled[1][2][0]  # the last layer's keys
    assert torch.equal(keys[2, :, end - 4 : end], rows[1][1].kv[2][0][0, :, shared:9].float())
    assert (keys[1] == -1).all() and (keys[2, :, : end - 4] == -1).all() and (keys[:, :, end:] == -1).all()


def test_load_player_rejects_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend"):
        load_player("x", "tgi")


# ---------------------------------------------------------------------------------------------- vLLM
# The vLLM backend runs for real in tests/test_player_contract.py (vLLM's CPU build is in the CPU lock).


def test_vllm_backend_without_vllm_plays_on_hf_and_says_so(monkeypatch, tiny_dir, capsys):
    import sys

    import torch

    from spag.players.hf import HFPlayer
    from spag.players.vllm import VLLMPlayer

    monkeypatch.setitem(sys.modules, "vllm", None)  # what an install without vLLM looks like to import
    player = load_player(
        str(tiny_dir), "vllm", dtype="float32", gpu_memory_utilization=0.5, max_prompt_tokens=99
    )
    assert isinstance(player, HFPlayer) and player.max_prompt_tokens == 99
    assert next(player.model.parameters()).dtype == torch.float32 and player.name == str(tiny_dir)
    assert "vLLM is not installed here" in capsys.readouterr().err
    assert player.generate(["Hello"], max_new_tokens=2, seed=1)[0].n_tokens >= 1
    with pytest.raises(ValueError, match="no option device"):  # still the vllm backend's options
        load_player(str(tiny_dir), "vllm", device="cpu")
    with pytest.raises(PlayerError, match="needs vLLM"):  # the backend itself, asked for directly
        VLLMPlayer.from_pretrained(str(tiny_dir))


# ------------------------------------------------------------------------------------------- human


def test_human_player_reads_a_line_per_prompt():
    from spag.players.human import HumanPlayer

    out = io.StringIO()
    human = HumanPlayer(input=io.StringIO("\n  my first move \nsecond\n"), output=out)
    replies = human.generate(["PROMPT ONE", "PROMPT TWO"])
    assert [r.text for r in replies] == ["my first move", "second"]
    assert "PROMPT ONE" in out.getvalue() and "empty message" in out.getvalue()
    with pytest.raises(PlayerError, match="end of file"):
        human.generate(["PROMPT THREE"])
    assert isinstance(load_player("human"), HumanPlayer)


# ------------------------------------------------------------------------------------------ memory planning


def test_a_row_costs_its_key_value_buffers_mask_and_logits(player):
    config = player.model.config
    kv_heads = config.num_key_value_heads
    head_dim = config.hidden_size // config.num_attention_heads
    per_token = config.num_hidden_layers * 2 * kv_heads * head_dim * 4  # float32 buffers on a CPU
    assert player._row_bytes(100) == 100 * (per_token + 8) + 4 * config.vocab_size


def test_a_batch_is_played_in_parts_that_fit_the_free_memory(player, monkeypatch):
    """A GPU with room for 3 rows (simulated: its free memory and a row's cost patched): 8 games are played
    3, 3 and 2 at a time, and each reply is what the whole batch gave it (its own seed)."""
    prompts = _prompts() * 2
    seeds = list(range(31, 39))
    kw = dict(temperature=1.2, top_k=50, max_new_tokens=8, min_new_tokens=1)
    whole = player.generate(prompts, seed=seeds, **kw)
    monkeypatch.setattr(player, "_row_bytes", lambda tokens: 1000)
    monkeypatch.setattr(player, "_working_bytes", lambda: 500)
    monkeypatch.setattr(player, "_free_device_memory", lambda: 500 + 3 * 1000 + 999)
    monkeypatch.setattr(player, "_told_batch", False)
    sizes = []
    fast = player._generate_fast
    monkeypatch.setattr(
        player,
        "_generate_fast",
        lambda encoded, seeds, **k: sizes.append(len(encoded)) or fast(encoded, seeds, **k),
    )
    with pytest.warns(UserWarning, match="8 games of up to .* tokens do not fit .* playing 3 at a time"):
        parts = player.generate(prompts, seed=seeds, **kw)
    assert sizes == [3, 3, 2]
    assert [r.text for r in parts] == [r.text for r in whole]


def test_a_gpu_without_room_for_one_game_is_refused_with_the_numbers(player, monkeypatch):
    monkeypatch.setattr(player, "_row_bytes", lambda tokens: 3 * 2**30)
    monkeypatch.setattr(player, "_working_bytes", lambda: 2**30)
    monkeypatch.setattr(player, "_free_device_memory", lambda: 2 * 2**30)
    with pytest.raises(PlayerError) as caught:
        player.generate(_prompts(), temperature=0, max_new_tokens=8)
    assert "needs 3.00 GiB of key/value buffers and 1.00 GiB of working memory, cpu has 2.00 GiB free" in str(
        caught.value
    )


def test_on_a_cpu_no_plan_is_made(player):
    assert player._free_device_memory() is None
    assert player._rows_that_fit(10_000, 64) == 64
