"""End to end, judge -> rewards -> loss -> trainer: does training move the policy the way the rewards say?

A few hand-written games are judged by the real judge, turned into rows by the real reward code, and a
tiny real Llama is trained on them by the real trainer. Each row's sequence log-likelihood (the quantity
the losses act on) is then compared before and after. A sign error, a wrong role picked as the winner, a
mask over the wrong tokens or a reduction that drops a term makes one of these tests fail.
"""

import pytest

from spag.config import Reward
from spag.game.taboo.outcomes import ATTACKER, ATTACKER_BREAKS_RULES, ATTACKER_WINS, DEFENDER, DEFENDER_WINS
from spag.game.taboo.rules import judge_episode
from spag.harness import training
from spag.rewards.build import imitation_rows, reward_rows
from spag.rewards.rows import validate_row, write_rows
from spag.testing import make_tiny_checkpoint
from spag.train.data import encode_rows
from spag.train.reference import compute_reference_logprobs

A, D = ATTACKER, DEFENDER


def episode(word, *lines):
    return {
        "target_word": word,
        "max_turns": 3,
        "history": [{"role": A if i % 2 == 0 else D, "content": text} for i, text in enumerate(lines)],
    }


# Three outcomes, each one the judge decides (checked below): the attacker wins when the defender says the
# word, the defender wins with a right guess, the attacker fouls by saying the word itself.
EPISODES = [
    episode(
        "coffee",
        "What dark drink do people have first thing in the morning?",
        "Usually coffee, with some milk.",
    ),
    episode("tea", "Think of a hot drink made by steeping leaves in water.", "I know the word! It is tea"),
    episode("fox", "The quick brown fox jumps over the lazy dog."),
    episode(
        "dog",
        "A loyal pet that barks at the postman.",
        "A cat, maybe? Cats are pets too.",
        "It fetches sticks and wags its tail.",
        "Hmm, a lazy question answer true false.",
    ),
]

TRAIN = {
    "batch_size": 8,
    "grad_accum": 1,
    "logging_steps": 1,
    "warmup_ratio": 0.0,
    "show_progress": False,
    "seed": 0,
    "live": False,
    "max_length": 1024,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


def sequence_logprobs(model_dir, rows):
    """log π(completion | prompt) of each row under the checkpoint, as the trainer computes it."""
    from spag.models.loading import load_model

    model, tok = load_model(model_dir, device="cpu")
    encoded = encode_rows([validate_row(r, i) for i, r in enumerate(rows)], tok, 1024, show_progress=False)
    logp = compute_reference_logprobs(model, encoded, tok.pad_token_id, batch_size=8, show_progress=False)
    return [logp[i] for i in range(len(rows))]


def train(tiny, rows, tmp_path, name, method="offline-po", **knobs):
    data = tmp_path / f"{name}.parquet"
    write_rows(rows, data)
    return training.train(method, tiny, data, tmp_path / name, **{**TRAIN, **knobs})


def shifts(tiny, trained, rows):
    before, after = sequence_logprobs(tiny, rows), sequence_logprobs(trained, rows)
    return [a - b for a, b in zip(after, before)]


def test_the_judge_decides_the_hand_written_games():
    assert [judge_episode(e).outcome for e in EPISODES] == [
        ATTACKER_WINS,
        DEFENDER_WINS,
        ATTACKER_BREAKS_RULES,
        "tie",
    ]


@pytest.fixture(scope="module")
def rows():
    rows, stats = reward_rows(EPISODES, options=Reward(foul_line_penalty=1.0))
    # The winner's lines of the two decisive games and the foul line; nothing from the tie, nothing of the losers.
    assert [(r["target_word"], r["role"], r["turn"]) for r in rows] == [
        ("coffee", A, 0),
        ("tea", D, 1),
        ("fox", A, 0),
    ]
    assert stats.negative_rows == 1
    return rows


@pytest.mark.slow
def test_offline_po_moves_each_row_in_its_reward_direction_and_flipping_the_sign_reverses_it(
    tiny, rows, tmp_path
):
    signs = [1 if r["reward"] > 0 else -1 for r in rows]
    assert sorted(signs) == [-1, 1, 1]  # two winners' lines, one penalised foul line

    forward = shifts(tiny, train(tiny, rows, tmp_path, "forward", learning_rate=2e-3, max_steps=8), rows)
    assert all(s * d > 0.02 for s, d in zip(signs, forward)), list(zip(signs, forward))

    flipped_rows = [dict(r, reward=-r["reward"]) for r in rows]
    flipped = shifts(
        tiny, train(tiny, flipped_rows, tmp_path, "flipped", learning_rate=2e-3, max_steps=8), rows
    )
    assert all(s * d < -0.02 for s, d in zip(signs, flipped)), list(zip(signs, flipped))


@pytest.mark.slow
def test_the_losers_lines_are_not_what_rises(tiny, rows, tmp_path):
    """The defender's losing line of the coffee game is no row: it must rise less than the winner's line."""
    loser = reward_rows([EPISODES[0]], options=Reward(loser_reward=-1.0))[0]
    losing_line = [r for r in loser if r["role"] == D]
    assert len(losing_line) == 1 and losing_line[0]["reward"] == pytest.approx(-1.0)
    winners = [r for r in rows if r["reward"] > 0]
    trained = train(tiny, winners, tmp_path, "winners", learning_rate=2e-3, max_steps=8)
    up = shifts(tiny, trained, winners)
    other = shifts(tiny, trained, losing_line)[0]
    assert min(up) > 0.02 and other < min(up), (up, other)

    # With loser_reward the same losing line becomes a row with a negative reward and goes down.
    both, _ = reward_rows([EPISODES[0]], options=Reward(loser_reward=-1.0))
    trained = train(tiny, both, tmp_path, "with_loser", learning_rate=2e-3, max_steps=8)
    moved = dict(zip([r["role"] for r in both], shifts(tiny, trained, both)))
    assert moved[A] > 0.02 and moved[D] < -0.02, moved


@pytest.mark.slow
def test_role_baseline_turns_the_weaker_rows_of_a_role_negative(tiny, tmp_path):
    games = [
        EPISODES[0],
        episode(
            "milk",
            "A white drink that comes from cows, good with cereal.",
            "Maybe juice?",
            "It is white and cows give it.",
            "Then milk!",
        ),
    ]
    rows, stats = reward_rows(games, options=Reward(role_baseline=True))
    attacker = [r for r in rows if r["role"] == A]
    # Before the baseline: 1 for the coffee line, 0.444 and 0.556 for the two milk lines (decay 0.8).
    assert stats.baselines[A] == pytest.approx((1 + 1) / 3)
    assert sorted(r["reward"] for r in attacker) == pytest.approx([4 / 9 - 2 / 3, 5 / 9 - 2 / 3, 1 - 2 / 3])
    trained = train(tiny, rows, tmp_path, "baseline", learning_rate=2e-3, max_steps=8)
    for row, shift in zip(rows, shifts(tiny, trained, rows)):
        assert (shift > 0) == (row["reward"] > 0), (row["completion"], row["reward"], shift)


@pytest.mark.slow
def test_imitation_raises_the_imitated_lines(tiny, tmp_path):
    rows, _ = imitation_rows(EPISODES)
    # The winners' own lines: the coffee attacker's clue and the tea defender's right guess.
    assert [(r["role"], r["completion"]) for r in rows] == [
        (A, EPISODES[0]["history"][0]["content"]),
        (D, EPISODES[1]["history"][1]["content"]),
    ]
    trained = train(tiny, rows, tmp_path, "imitate", method="sft-kl", learning_rate=2e-3, max_steps=8)
    assert all(d > 0.05 for d in shifts(tiny, trained, rows))


def test_the_loss_reaches_the_completion_tokens_and_nothing_else(tiny, rows):
    """The gradient of the SPAG loss with respect to the logits is non-zero exactly at the positions that
    predict a completion token (the reply and its eos), computed here from each row's layout: zero on
    the prompt, on padding, and on the position that predicts the first prompt token."""
    from spag.models.loading import load_model
    from spag.train.data import RowDataset, collate
    from spag.train.losses import compute_loss
    from spag.train.reference import model_forward_logprobs

    model, tok = load_model(tiny, device="cpu")
    sft_row = {
        "prompt": "Name a yellow fruit.",
        "completion": "A banana.",
        "reward": 0.0,
        "weight": 1.0,
        "role": None,
        "kind": "sft",
        "target_word": None,
        "turn": None,
        "episode": None,
    }
    batch_rows = [*rows, sft_row]
    encoded = encode_rows(
        [validate_row(r, i) for i, r in enumerate(batch_rows)], tok, 1024, show_progress=False
    )
    batch = collate([RowDataset(encoded)[i] for i in range(len(batch_rows))], tok.pad_token_id)
    seen = {}
    handle = model.lm_head.register_forward_hook(lambda module, args, out: seen.update(logits=out))
    model.train()
    logp = model_forward_logprobs(model, batch)
    handle.remove()
    seen["logits"].retain_grad()
    loss, _ = compute_loss("offline-po", logp, batch, logp.detach() - 0.01, 0.2, 0.2, 0.5)
    loss.backward()
    touched = seen["logits"].grad.abs().sum(-1) > 0  # [rows, kept positions]
    width, kept = batch["input_ids"].shape[1], touched.shape[1]
    for row, n_completion in enumerate(encoded.completion_lengths):
        # position t predicts token t + 1: the completion's tokens are the row's last n_completion
        expected = [width - 1 - n_completion <= width - kept + j <= width - 2 for j in range(kept)]
        assert touched[row].tolist() == expected, row


def test_rows_run_without_padding_give_the_padded_batchs_numbers(tiny, rows):
    """On a CPU the trainer runs each step's rows in groups of similar length, cut to their own width: the
    log-probabilities and the gradients are the padded batch's, up to float rounding."""
    import torch

    from spag.models.loading import load_model
    from spag.train.data import RowDataset, collate
    from spag.train.reference import model_forward_logprobs

    model, tok = load_model(tiny, device="cpu", dtype="float32")
    long_row = {**rows[0], "prompt": rows[0]["prompt"] + " Think of every drink you know. " * 12}
    batch_rows = [*rows, long_row]
    encoded = encode_rows(
        [validate_row(r, i) for i, r in enumerate(batch_rows)], tok, 1024, show_progress=False
    )
    batch = collate([RowDataset(encoded)[i] for i in range(len(batch_rows))], tok.pad_token_id)
    lengths = batch["attention_mask"].sum(dim=1)
    assert lengths.max() > 1.5 * lengths.min()  # the padded batch holds real padding
    model.train()
    results = []
    for unpadded in (False, True):
        model.zero_grad()
        logp = model_forward_logprobs(model, batch, unpadded=unpadded)
        (logp * torch.arange(1.0, len(batch_rows) + 1)).sum().backward()  # a different weight per row
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    (padded, padded_grads), (unpadded, unpadded_grads) = results
    torch.testing.assert_close(unpadded, padded, rtol=1e-5, atol=1e-5)
    for a, b in zip(unpadded_grads, padded_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


# A tensor turned into a Python value: each of these waits for the device.
HOST_READS = ("tolist", "item", "__int__", "__float__", "__bool__")


def spy_on_host_reads(monkeypatch, names=HOST_READS) -> list[str]:
    """Record each of ``names`` that spag's own code (not a test's, not a library's) calls on a tensor, until
    ``monkeypatch.undo()``: the list the calls are appended to, as "NAME in FILE:LINE"."""
    import os
    import sys

    import torch

    read: list[str] = []
    for name in names:
        original = getattr(torch.Tensor, name)

        def reading(self, *args, _name=name, _original=original, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if f"{os.sep}spag{os.sep}" in caller and f"{os.sep}tests{os.sep}" not in caller:
                read.append(f"{_name} in {caller}:{sys._getframe(1).f_lineno}")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, reading)
    return read


def test_the_padded_forward_of_a_gpu_step_reads_nothing_back_to_the_host(tiny, rows, monkeypatch):
    """spag's code around the padded batch's forward (a GPU's, the policy's and the reference's each step)
    makes no Python value of a tensor: no ``tolist``, ``item``, ``int``, ``float`` or truth of one, each a wait
    for the device. (transformers' own mask building tests its mask once a forward; that one is its.)"""

    import torch

    from spag.models.loading import load_model
    from spag.train.data import RowDataset, collate
    from spag.train.reference import model_forward_logprobs

    model, tok = load_model(tiny, device="cpu", dtype="float32")
    encoded = encode_rows([validate_row(r, i) for i, r in enumerate(rows)], tok, 1024, show_progress=False)
    batch = collate([RowDataset(encoded)[i] for i in range(len(rows))], tok.pad_token_id)
    expected = model_forward_logprobs(model, batch, unpadded=True)
    read = spy_on_host_reads(monkeypatch)
    logp = model_forward_logprobs(model, batch)
    monkeypatch.undo()
    assert read == []
    torch.testing.assert_close(logp, expected, rtol=1e-5, atol=1e-5)
    # the check sees spag's reads: the unpadded path (a CPU's) reads the rows' lengths
    read = spy_on_host_reads(monkeypatch, ("tolist",))
    model_forward_logprobs(model, batch, unpadded=True)
    monkeypatch.undo()
    assert any("reference.py" in r for r in read)


def test_the_beginning_a_batchs_rows_share_runs_once_with_the_padded_batchs_numbers(tiny, rows):
    """Rows that begin alike (the same rules, another word or history) in one CPU step: their shared
    beginning is encoded once and serves every row, so the step computes fewer positions, and the
    log-probabilities and gradients are still the padded batch's, up to float rounding. Rows that differ
    from their first tokens share nothing and run as before."""
    import torch

    from spag.models.batching import MIN_TOKENS, PADDING_SLACK
    from spag.models.loading import load_model
    from spag.train.data import RowDataset, collate
    from spag.train.reference import MIN_SHARED_PREFIX, batch_shared_prefix, model_forward_logprobs

    model, tok = load_model(tiny, device="cpu", dtype="float32")
    rules = "Rules: two players talk in turns; the attacker knows a word the defender must not say. " * 3
    alike = [{**row, "prompt": rules + row["prompt"]} for row in rows]
    alike.append({**alike[0], "prompt": alike[0]["prompt"] + " Think of every drink you know. " * 8})
    encoded = encode_rows([validate_row(r, i) for i, r in enumerate(alike)], tok, 1024, show_progress=False)
    batch = collate([RowDataset(encoded)[i] for i in range(len(alike))], tok.pad_token_id)
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    shared = batch_shared_prefix(batch, lengths)
    assert shared >= len(tok(rules)["input_ids"]) >= MIN_SHARED_PREFIX
    positions = []
    handle = model.get_input_embeddings().register_forward_hook(
        lambda module, args, out: positions.append(args[0].numel())
    )
    model.train()
    results = []
    for unpadded in (False, True):
        model.zero_grad()
        positions.clear()
        logp = model_forward_logprobs(model, batch, unpadded=unpadded, shared_prefix=True)
        (logp * torch.arange(1.0, len(alike) + 1)).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()], sum(positions)))
    handle.remove()
    (padded, padded_grads, padded_positions), (once, once_grads, once_positions) = results
    torch.testing.assert_close(once, padded, rtol=1e-5, atol=1e-5)
    for a, b in zip(once_grads, padded_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert padded_positions == batch["input_ids"].numel()
    # the shared beginning once, then every row's own tokens (with at most a group's slack of padding): fewer
    # positions than the rows' tokens without their padding
    rests = sum(lengths) - len(alike) * shared
    assert once_positions <= shared + (1 + PADDING_SLACK) * rests + MIN_TOKENS * len(alike)
    assert once_positions < sum(lengths) < padded_positions
    # Recomputed activations keep no keys and values: the rows then run whole, with the same numbers.
    model.gradient_checkpointing_enable()
    torch.testing.assert_close(
        model_forward_logprobs(model, batch, unpadded=True, shared_prefix=True).detach(),
        padded,
        rtol=1e-5,
        atol=1e-5,
    )
    different = collate(
        [RowDataset(encoded)[0], {**RowDataset(encoded)[1], "input_ids": [7] + encoded.input_ids[1]}],
        tok.pad_token_id,
    )
    assert batch_shared_prefix(different, different["attention_mask"].sum(dim=1).tolist()) == 0


def test_length_groups_hold_every_row_once_with_little_padding():
    from spag.models.batching import MIN_TOKENS, PADDING_SLACK, length_groups

    lengths = [5, 300, 12, 280, 40, 41, 290, 7, 600, 39]
    groups = length_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        longest = max(lengths[i] for i in g)
        assert longest * len(g) <= (1 + PADDING_SLACK) * sum(lengths[i] for i in g) + MIN_TOKENS
    assert [8] in groups  # the one long row is alone
    assert length_groups([]) == [] and length_groups([3]) == [[0]]


def test_reference_rows_that_begin_alike_reuse_the_row_befores_beginning(tiny, rows):
    """The reference pass on a CPU takes rows one at a time in the order of their tokens, each reusing the
    keys and values of what it shares with the row before: the padded batch's log-probabilities up to
    float rounding."""
    import torch

    from spag.models.loading import load_model
    from spag.train.data import RowDataset, collate
    from spag.train.reference import MIN_SHARED_PREFIX, model_forward_logprobs, reused_prefix_logprobs

    model, tok = load_model(tiny, device="cpu", dtype="float32")
    model.eval()
    later = {
        **rows[0],
        "prompt": rows[0]["prompt"] + " One more line of the game.",
        "completion": "Something you drink hot, often with milk.",
    }
    batch_rows = [rows[0], later, *rows[1:]]
    encoded = encode_rows(
        [validate_row(r, i) for i, r in enumerate(batch_rows)], tok, 1024, show_progress=False
    )
    items = [RowDataset(encoded)[i] for i in range(len(batch_rows))]
    first, second = items[0]["input_ids"], items[1]["input_ids"]
    assert next(k for k in range(len(first)) if first[k] != second[k]) >= MIN_SHARED_PREFIX  # a real reuse
    with torch.no_grad():
        padded = model_forward_logprobs(model, collate(items, tok.pad_token_id))
        for order in ([0, 1, 2, 3], [3, 1, 0, 2], [1, 0, 3, 2]):
            reused = torch.stack(list(reused_prefix_logprobs(model, [items[i] for i in order])))
            torch.testing.assert_close(reused, padded[order], rtol=1e-5, atol=1e-5)
    # the pass the cache is built from: every row gets its own number back
    logp = compute_reference_logprobs(model, encoded, tok.pad_token_id, batch_size=2, show_progress=False)
    torch.testing.assert_close(
        torch.tensor([logp[i] for i in range(len(items))]), padded, rtol=1e-5, atol=1e-5
    )


def test_packed_rows_give_the_padded_batchs_numbers_without_padding_or_host_reads(tiny, rows, monkeypatch):
    """A batch collated padding_free runs as one sequence of its rows' own tokens (positions restart at each
    row, so the attention keeps rows apart): no padded position is computed, spag's code reads nothing back
    to the host, and the log-probabilities and gradients are the padded batch's, up to float rounding."""

    import torch

    from spag.models.loading import load_model
    from spag.train.data import RowDataset, collate
    from spag.train.reference import model_forward_logprobs

    model, tok = load_model(tiny, device="cpu", dtype="float32")
    long_row = {**rows[0], "prompt": rows[0]["prompt"] + " Think of every drink you know. " * 12}
    batch_rows = [*rows, long_row]
    encoded = encode_rows(
        [validate_row(r, i) for i, r in enumerate(batch_rows)], tok, 1024, show_progress=False
    )
    items = [RowDataset(encoded)[i] for i in range(len(batch_rows))]
    padded_batch, packed_batch = collate(items, tok.pad_token_id), collate(items, tok.pad_token_id, True)
    lengths = padded_batch["attention_mask"].sum(dim=1)
    assert lengths.max() > 1.5 * lengths.min()  # the padded batch holds real padding
    positions = []
    handle = model.get_input_embeddings().register_forward_hook(
        lambda module, args, out: positions.append(args[0].numel())
    )
    read: list[str] = []
    model.train()
    results = []
    for batch in (padded_batch, packed_batch):
        model.zero_grad()
        positions.clear()
        if batch is packed_batch:
            read = spy_on_host_reads(monkeypatch)
        logp = model_forward_logprobs(model, batch, unpadded=True)  # packed wins over the CPU's groups
        monkeypatch.undo()
        (logp * torch.arange(1.0, len(batch_rows) + 1)).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()], sum(positions)))
    handle.remove()
    (padded, padded_grads, _), (packed, packed_grads, packed_positions) = results
    assert read == []
    assert packed_positions == int(lengths.sum()) < padded_batch["input_ids"].numel()
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
    for a, b in zip(packed_grads, padded_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_training_padding_free_moves_the_policy_as_padded_training_does(tiny, rows, tmp_path):
    """offline-po with padding_free: the same steps on the same rows give the same model, to float rounding
    (the reference pass on the fly too, as each step's forward takes the packed rows)."""
    padded = train(tiny, rows, tmp_path, "padded", learning_rate=2e-3, max_steps=3, ref_on_the_fly=True)
    packed = train(
        tiny,
        rows,
        tmp_path,
        "packed",
        learning_rate=2e-3,
        max_steps=3,
        ref_on_the_fly=True,
        padding_free=True,
    )
    moved = shifts(tiny, padded, rows)
    assert max(abs(m) for m in moved) > 0.02  # the steps changed the model
    assert shifts(padded, packed, rows) == pytest.approx([0.0] * len(rows), abs=1e-4)


def test_training_in_rebalanced_micro_batches_moves_the_policy_as_one_batch_of_the_steps_rows_does(
    tiny, rows, tmp_path
):
    """batch_rebalance: a step of four rows, one of them long, dealt into two micro-batches of 1 and 3 rows,
    gives the model that one batch of the four gives, step after step: each row's loss divides by the
    step's rows of its kind, not by its micro-batch's. (Divided by the micro-batch's, the long row would
    weigh three times the others and the models would part.) The same with step_tokens: a budget that holds
    the four rows makes each step of them, whatever batch_size says."""
    long = {**rows[0], "completion": " ".join(["Think of what you pour into a cup in the morning."] * 40)}
    four = [*rows, long]
    whole = train(tiny, four, tmp_path, "whole", learning_rate=2e-3, max_steps=3, batch_size=4)
    rebalanced = {"learning_rate": 2e-3, "max_steps": 3, "grad_accum": 2, "batch_rebalance": True}
    dealt = train(tiny, four, tmp_path, "dealt", batch_size=2, **rebalanced)
    budget = train(tiny, four, tmp_path, "budget", batch_size=1, step_tokens=100_000, **rebalanced)
    assert max(abs(m) for m in shifts(tiny, whole, four)) > 0.02  # the steps changed the model
    assert shifts(whole, dealt, four) == pytest.approx([0.0] * len(four), abs=1e-4)
    assert shifts(whole, budget, four) == pytest.approx([0.0] * len(four), abs=1e-4)
