"""The hf backend's samplers: each row's draw depends on its own seed and step, never on its batch-mates; the
counter-based sampler draws every row in one call from the distribution the per-row sampler draws from; and a
player decoding with it keeps its seeds, its batch independence and its stop strings."""

from __future__ import annotations

import math

import pytest
import torch

from spag.players import close_player, load_player
from spag.players.hf.sampling import COUNTER, PER_ROW, CounterSampler, Sampler, counter_uniform, sampler_for
from spag.testing import make_tiny_checkpoint

SAMPLERS = [Sampler, CounterSampler]


def draws(kind, seeds, logits, steps, rows=None, top_k=0, temperature=1.0):
    """``steps`` draws of every row (``rows``: which of ``seeds`` are in the batch, in that order)."""
    rows = list(range(len(seeds))) if rows is None else rows
    sampler = kind(seeds, temperature, top_k, "cpu", end_ids=[0])
    return [sampler.sample(logits[rows], rows, suppress_end=False).tolist() for _ in range(steps)]


@pytest.mark.parametrize("kind", SAMPLERS)
def test_a_seed_gives_the_same_tokens_and_another_seed_others(kind):
    logits = torch.zeros(4, 50)
    first, again = draws(kind, [1, 2, 3, 4], logits, 20), draws(kind, [1, 2, 3, 4], logits, 20)
    assert first == again
    assert draws(kind, [5, 6, 7, 8], logits, 20) != first
    assert len({tuple(step[0] for step in first), tuple(step[1] for step in first)}) == 2  # rows differ


@pytest.mark.parametrize("kind", SAMPLERS)
def test_a_rows_tokens_do_not_depend_on_its_batch_mates(kind):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 40, generator=generator)
    together = draws(kind, [11, 12, 13, 14, 15], logits, 12)
    for row in range(5):
        alone = draws(kind, [11, 12, 13, 14, 15], logits, 12, rows=[row])
        assert [step[0] for step in alone] == [step[row] for step in together]
    # the batch in another order, and a smaller batch: each row still draws its own tokens
    reordered = draws(kind, [11, 12, 13, 14, 15], logits, 12, rows=[4, 2, 0])
    assert [[s[0], s[1], s[2]] for s in reordered] == [[s[4], s[2], s[0]] for s in together]


def test_the_counter_sampler_draws_the_softmax_distribution():
    """20,000 rows of one call, each with its own seed, against softmax(logits / T) over 6 tokens, with and
    without top-k: the chi-square statistic is within the 99.9% point of its distribution."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    n = 20_000
    for temperature, top_k in ((1.0, 0), (0.7, 0), (1.0, 3)):
        sampler = CounterSampler(list(range(n)), temperature, top_k, "cpu", end_ids=[])
        picks = sampler.sample(logits.expand(n, -1), list(range(n)), suppress_end=False)
        expected_logits = logits[0] / temperature
        if top_k:
            expected_logits[top_k:] = -math.inf
        expected = expected_logits.softmax(-1) * n
        counts = torch.bincount(picks, minlength=6).double()
        kept = expected > 0
        assert (counts[~kept] == 0).all()  # never outside the top k
        chi2 = (((counts - expected) ** 2)[kept] / expected[kept]).sum().item()
        assert chi2 < 25.0, (temperature, top_k, counts.tolist(), expected.tolist())  # 99.9%: 20.5 (5 dof)


def test_the_counter_sampler_moves_on_each_step_and_is_greedy_at_temperature_0():
    logits = torch.zeros(1, 1000)
    tokens = [step[0] for step in draws(CounterSampler, [3], logits, 50)]
    assert len(set(tokens)) > 40  # a fresh draw each step, not the same one again
    peaked = torch.randn(3, 30, generator=torch.Generator().manual_seed(1))
    greedy = draws(CounterSampler, [1, 2, 3], peaked, 3, temperature=0.0)
    assert greedy == [peaked.argmax(-1).tolist()] * 3


def test_the_noise_is_uniform_and_a_function_of_seed_step_and_token_only():
    seeds, steps = torch.tensor([[7], [7], [8]]), torch.tensor([[0], [1], [0]])
    tokens = torch.arange(100_000)[None]
    u = counter_uniform(seeds, steps, tokens)
    assert u.shape == (3, 100_000) and 0 < u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.005 and abs(u.var().item() - 1 / 12) < 0.002
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])
    assert torch.equal(u[0, 500:600], counter_uniform(seeds[:1], steps[:1], tokens[:, 500:600])[0])


def test_auto_is_the_counter_sampler_on_a_gpu_and_per_row_on_a_cpu():
    assert sampler_for("auto", "cuda:0") == COUNTER and sampler_for("auto", "cpu") == PER_ROW
    assert sampler_for(COUNTER, "cpu") == COUNTER and sampler_for(PER_ROW, "cuda") == PER_ROW


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny")))


@pytest.mark.parametrize("sampler", [PER_ROW, COUNTER])
def test_a_player_keeps_its_seeds_and_batch_independence_with_either_sampler(tiny, sampler):
    player = load_player(tiny, "hf", dtype="float32", device="cpu", sampler=sampler)
    try:
        prompts = ["The cat", "A river runs", "Seven", "Hello there, friend"]
        kwargs = dict(temperature=1.0, max_new_tokens=12)
        together = player.generate(prompts, seed=[1, 2, 3, 4], **kwargs)
        assert [r.text for r in player.generate(prompts, seed=[1, 2, 3, 4], **kwargs)] == [
            r.text for r in together
        ]
        for i, prompt in enumerate(prompts):
            alone = player.generate([prompt], seed=[i + 1], **kwargs)[0]
            assert alone.text == together[i].text and alone.n_tokens == together[i].n_tokens
        reply = together[0].text
        assert len(reply) > 3  # a random model's 12 tokens
        stop = reply[2:4]  # a stop string taken from the reply ends it there
        cut = player.generate(prompts[:1], seed=[1], stop=[stop], **kwargs)[0]
        assert stop not in cut.text and reply.startswith(cut.text)
    finally:
        close_player(player)


def test_the_two_samplers_draw_different_episodes_from_one_seed(tiny):
    texts = {}
    for sampler in (PER_ROW, COUNTER):
        player = load_player(tiny, "hf", dtype="float32", device="cpu", sampler=sampler)
        try:
            texts[sampler] = [
                r.text
                for r in player.generate(
                    ["The cat"] * 4, seed=[1, 2, 3, 4], max_new_tokens=12, temperature=1.0
                )
            ]
        finally:
            close_player(player)
    assert texts[PER_ROW] != texts[COUNTER]


def replies(player, prompts, seeds, **kwargs):
    return [(r.text, r.n_tokens, r.finish_reason) for r in player.generate(prompts, seed=seeds, **kwargs)]


def test_the_counter_loop_gives_the_same_replies_however_often_it_reads_its_tokens_back(tiny, tmp_path):
    """The counter sampler's decode loop keeps the tokens on the device and reads them back every few steps
    (spag.players.hf.ledger): a stop string, the length limit and an end of turn found in a window end each
    reply where the step-by-step loop would, the tokens drawn after it dropped."""
    from spag.testing import make_scripted_checkpoint

    player = load_player(tiny, "hf", dtype="float32", device="cpu", sampler=COUNTER)
    scripted = load_player(
        str(make_scripted_checkpoint(tmp_path / "scripted", "brown fig")),
        "hf",
        dtype="float32",
        device="cpu",
        sampler=COUNTER,
    )
    try:
        prompts = ["The cat", "A river runs", "Seven", "Hello there, friend", "Up", "Down the road we go"]
        seeds = [11, 12, 13, 14, 15, 16]
        kwargs = dict(temperature=1.0, max_new_tokens=17, min_new_tokens=2)
        player.read_every = 1
        free = replies(player, prompts, seeds, **kwargs)
        stops = sorted({text[3:5] for text, _, _ in free if len(text) > 6})[:3]  # they end some rows early
        for player_, settings in (
            (player, {**kwargs, "stop": stops}),
            (scripted, dict(kwargs, temperature=0.7)),
        ):
            player_.read_every = 1
            each_step = replies(player_, prompts, seeds, **settings)
            for every in (3, 8, 64):
                player_.read_every = every
                assert replies(player_, prompts, seeds, **settings) == each_step, every
        assert any(finish == "stop" for _, _, finish in replies(player, prompts, seeds, **kwargs, stop=stops))
        ended = replies(scripted, prompts, seeds, **dict(kwargs, temperature=0.7))
        assert all(text == "brown fig" and finish == "stop" for text, _, finish in ended)
    finally:
        close_player(player, scripted)


def test_the_counter_loop_reads_its_tokens_back_once_every_few_steps(tiny, monkeypatch):
    """One copy to the host every ``read_every`` steps (and at the last), not one a step: 24 steps read
    every 8 are 3 reads, where the per-row sampler's loop copies every step."""
    from spag.players.hf.ledger import DeviceLedger

    reads = []
    original = DeviceLedger.read

    def counted(self, active, index, step, stopped):
        reads.append(step)
        return original(self, active, index, step, stopped)

    monkeypatch.setattr(DeviceLedger, "read", counted)
    player = load_player(tiny, "hf", dtype="float32", device="cpu", sampler=COUNTER)
    try:
        player.read_every = 8
        out = player.generate(["The cat", "Seven"], seed=[1, 2], temperature=1.0, max_new_tokens=24)
    finally:
        close_player(player)
    if all(r.n_tokens == 24 for r in out):  # a random model's replies run to the limit
        assert reads == [7, 15, 23]
    else:
        assert len(reads) <= 3 and reads == sorted(reads)


# ------------------------------------------------- decoder: generate (transformers' model.generate, static cache)


def test_transformers_generate_draws_what_the_engines_counter_sampler_draws(tiny, tmp_path):
    """``decoder: generate`` plays by model.generate with a static cache and the counter sampler's noise as
    a logits processor: from the same seeds the same replies as the engine's counter loop (sampled, greedy,
    with stop strings, a minimum length and an end of turn), a row's reply the same alone or in a batch, and
    the same again on a second call (the static cache reused)."""
    from spag.testing import make_scripted_checkpoint

    prompts = ["The cat", "A river runs", "Seven", "Hello there, friend", "Up", "Down the road we go"]
    seeds = [11, 12, 13, 14, 15, 16]
    scripted = str(make_scripted_checkpoint(tmp_path / "scripted", "brown fig"))
    players = {
        (model, decoder): load_player(
            model, "hf", dtype="float32", device="cpu", sampler=COUNTER, decoder=decoder
        )
        for model in (tiny, scripted)
        for decoder in ("engine", "generate")
    }
    try:
        kwargs = dict(temperature=1.0, top_k=20, max_new_tokens=17, min_new_tokens=2)
        free = replies(players[tiny, "engine"], prompts, seeds, **kwargs)
        stops = sorted({text[3:5] for text, _, _ in free if len(text) > 6})[:3]
        for model, settings in (
            (tiny, kwargs),
            (tiny, {**kwargs, "stop": stops}),
            (tiny, {**kwargs, "temperature": 0.0}),
            (scripted, {**kwargs, "temperature": 0.7}),  # ends its turn after "brown fig"
        ):
            engine = replies(players[model, "engine"], prompts, seeds, **settings)
            generate = players[model, "generate"]
            assert replies(generate, prompts, seeds, **settings) == engine, settings
            assert replies(generate, prompts, seeds, **settings) == engine  # the cache reused
            for i in (0, 3):
                assert replies(generate, [prompts[i]], [seeds[i]], **settings) == [engine[i]]
        assert any(
            f == "stop"
            for _, _, f in replies(players[tiny, "generate"], prompts, seeds, **kwargs, stop=stops)
        )
        ended = replies(players[scripted, "generate"], prompts, seeds, **{**kwargs, "temperature": 0.7})
        assert all(text == "brown fig" and finish == "stop" for text, _, finish in ended)
    finally:
        close_player(*players.values())


def test_transformers_generate_rounds_its_shapes_up_and_leaves_the_models_own_settings_out(tiny):
    """The rows to a multiple of 8 and the cache to a multiple of 256 tokens, so the compiled step serves
    many calls; a repetition penalty in the model's generation_config (Qwen's has one) changes nothing."""
    from spag.players.hf.generate import CACHE_STEP, ROW_STEP

    player = load_player(tiny, "hf", dtype="float32", device="cpu", sampler=COUNTER, decoder="generate")
    engine = load_player(tiny, "hf", dtype="float32", device="cpu", sampler=COUNTER)
    try:
        kwargs = dict(temperature=1.0, max_new_tokens=9)
        player.generate(["The cat", "Seven", "Up"], seed=[1, 2, 3], **kwargs)
        (rows, length), cache = player._static
        assert (rows, length) == (ROW_STEP, CACHE_STEP)
        player.generate(["Down the road we go", "Up"], seed=[4, 5], **kwargs)
        assert player._static[1] is cache  # the same shape: the same cache
        player.model.generation_config.repetition_penalty = 5.0
        assert replies(player, ["The cat"] * 3, [1, 2, 3], **kwargs) == replies(
            engine, ["The cat"] * 3, [1, 2, 3], **kwargs
        )
    finally:
        close_player(player, engine)


def test_transformers_generate_refuses_the_per_row_sampler_in_one_line(tiny):
    from spag.runtime.errors import PlayerError

    with pytest.raises(PlayerError, match="decoder generate draws with the counter sampler's noise"):
        load_player(tiny, "hf", dtype="float32", device="cpu", sampler=PER_ROW, decoder="generate")
