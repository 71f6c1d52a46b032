"""A two-armed bandit for the trainer: how far one offline-po run moves a model toward a rewarded reply.

    python scripts/bandit.py [--model embedded] [--learning-rate 2e-5 ...] [--steps 8] [--out runs/bandit]
                             [--rewarded "[call]"] [--other "[fold]"] [--cards [--card-last]]
                             [--clip-range C] [--kl-coeff K] [--overlap [--say-card]]

One prompt (Kuhn poker's second player holding J, facing a bet) and two replies: the rewarded one (+1) and
the other (-1), each row twice (a batch of 4, the pipeline's). ``spag train --method offline-po`` runs
``--steps`` optimiser steps against the model itself as the reference, at each learning rate, with the
pipeline's other settings (KL 0.2, clip 0.2, cosine schedule, warm-up 3% of the steps: the first step runs
at rate 0), keeping every step's checkpoint. The model's probability of the rewarded reply against the
other (the two replies' sequence probabilities, normalised over the pair, as ``spag strategy``'s exact way
reads one) is read at the start and after every step; the log-odds step is what the tabular twin's
learning rate stands for (``twin.learning_rate``: about how far a logit moves in one AdamW step).

``--model embedded`` is SmolLM2-135M-Instruct from its wheel; tests/test_bandit.py runs the same function on
a tiny random model.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spag.game.kuhn import FIRST, SECOND, KuhnPoker
from spag.harness.claims import prepare_output_dir
from spag.harness.rule import claim_file
from spag.players import close_player, load_player
from spag.runtime.atomic import write_json_atomic, write_jsonl_atomic
from spag.runtime.errors import DataError

GAME = KuhnPoker()
PROMPT = GAME.prompt(SECOND, "J-K", [{"role": FIRST, "content": "[bet]"}], GAME.Strategies())


def preference(model: str | Path, rewarded: str, other: str, prompt: str = PROMPT) -> dict:
    """The model's probability of ``rewarded`` against ``other`` after ``prompt`` (normalised over the pair),
    its log-odds, and each reply's sequence log-probability."""
    player = load_player(str(model), "hf", dtype="float32")
    try:
        good, bad = player.continuation_logprobs([prompt], "", [rewarded, other], lead="")[0].tolist()
    finally:
        close_player(player)
    return {
        "p": 1 / (1 + math.exp(min(bad - good, 700.0))),
        "log_odds": good - bad,
        "rewarded_logprob": good,
        "other_logprob": bad,
    }


def bandit_rows(rewarded: str, other: str, prompt: str = PROMPT, copies: int = 2) -> list[dict]:
    return [
        {
            "prompt": prompt,
            "completion": reply,
            "reward": reward,
            "weight": 1.0,
            "kind": "game",
            "role": SECOND,
        }
        for _ in range(copies)
        for reply, reward in ((rewarded, 1.0), (other, -1.0))
    ]


def _train(
    model: str | Path, out: Path, rows: list[dict], *, learning_rate: float, steps: int, **train
) -> Path:
    """``steps`` offline-po steps on ``rows`` from ``model``, every step's checkpoint kept, into ``out``: cleared
    first of what an earlier bandit run wrote there (a folder of anyone else's files is refused,
    :class:`OutputRefused`). ``train``: other ``spag train`` settings (the pipeline's by default). Returns the
    folder of the checkpoints."""
    from spag.harness.training import train as train_model

    prepare_output_dir(out, "bandit", overwrite=True)
    data = out / "rows.jsonl"
    write_jsonl_atomic(data, rows)
    settings = {
        "batch_size": 4,
        "grad_accum": 1,
        "warmup_ratio": 0.03,
        "kl_coeff": 0.2,
        "clip_range": 0.2,
        "show_progress": False,
        "live": False,
        "seed": 0,
        **train,
    }
    train_model(
        "offline-po",
        str(model),
        data,
        out / "model",
        learning_rate=learning_rate,
        max_steps=steps,
        save_steps=1,
        keep_checkpoints=True,
        save_total_limit=steps + 1,
        **settings,
    )
    return out / "model" / "checkpoints"


def bandit(
    model: str | Path,
    out: Path,
    rewarded: str,
    other: str,
    *,
    learning_rate: float,
    steps: int,
    prompt: str = PROMPT,
    **train,
) -> list[dict]:
    """One offline-po run of ``steps`` steps on the bandit's rows from ``model``: the preference at the start
    (step 0) and after every step. ``train``: other ``spag train`` settings (the pipeline's by default)."""
    checkpoints = _train(
        model, out, bandit_rows(rewarded, other, prompt), learning_rate=learning_rate, steps=steps, **train
    )
    points = [{"step": 0, **preference(model, rewarded, other, prompt)}]
    for step in range(1, steps + 1):
        checkpoint = checkpoints / f"checkpoint-{step}"
        points.append({"step": step, **preference(checkpoint, rewarded, other, prompt)})
        if step < steps:
            shutil.rmtree(checkpoint)  # 1.5 GB a step at 135M, with the optimiser's state
    return points


# A format variant for the card bandit: the card said again as the prompt's last words, next to the reply,
# where Kuhn poker's prompt names it once, three lines before.
CARD_LAST = "\nYou hold {card}: [call] or [fold]?"


def card_prompts(card_last: bool = False) -> dict[str, str]:
    """Kuhn poker's second player facing a bet, holding K and holding J: the prompts differ in the card alone
    (``card_last``: the card said again at the very end, :data:`CARD_LAST`)."""
    return {
        card: GAME.prompt(SECOND, deal, [{"role": FIRST, "content": "[bet]"}], GAME.Strategies())
        + (CARD_LAST.format(card=card) if card_last else "")
        for card, deal in (("K", "Q-K"), ("J", "Q-J"))
    }


def card_bandit(
    model: str | Path, out: Path, *, learning_rate: float, steps: int, card_last: bool = False, **train
) -> list[dict]:
    """Whether offline-po can tell two cards apart: calling a bet is rewarded +1 with K and -1 with J, folding
    the other way round, four rows a step. After each step: P(call) with each card (over the pair [call],
    [fold]) and their gap, the rise that the experiment's criterion (b) asks of self-play."""
    prompts = card_prompts(card_last)
    rows = [
        row
        for card, sign in (("K", 1.0), ("J", -1.0))
        for row in bandit_rows("[call]", "[fold]", prompts[card], copies=1)
        for row in [{**row, "reward": row["reward"] * sign}]
    ]
    checkpoints = _train(model, out, rows, learning_rate=learning_rate, steps=steps, **train)
    points = []
    for step in range(steps + 1):
        where = model if step == 0 else checkpoints / f"checkpoint-{step}"
        calls = {card: preference(where, "[call]", "[fold]", prompt)["p"] for card, prompt in prompts.items()}
        points.append(
            {"step": step, "call_K": calls["K"], "call_J": calls["J"], "gap": calls["K"] - calls["J"]}
        )
        if 0 < step < steps:
            shutil.rmtree(where)
    return points


def _history(name: str) -> str:
    """ "second K bet" -> "second bet": an information set's player and history, its card left out."""
    player, _, history = name.split(" ", 2)
    return f"{player} {history}"


def information_set_prompts(say_card: bool = False) -> dict[str, tuple[str, str, str, str]]:
    """Each of the 12 information sets' prompt, the reply's opening (``My card: K.`` with ``say_card``, else
    empty) and its two actions' replies (aggressive, passive), by ``spag.evaluate.strategy``'s label
    ("second K bet")."""
    from spag.evaluate.strategy import state
    from spag.game.kuhn import KuhnSettings, reply, say
    from spag.game.kuhn.exploitability import INFOSETS, label, moves

    game = KuhnPoker(KuhnSettings(say_card=say_card))
    out = {}
    for info in INFOSETS:
        deal, history = state(info)
        aggressive, passive = moves(tuple(a for a in info.history.split(",") if a))
        out[label(info)] = (
            game.prompt(info.player, deal, history, game.Strategies()),
            say(info.card) if say_card else "",
            reply(aggressive),
            reply(passive),
        )
    return out


def gradient_overlap(model: str | Path, say_card: bool = False) -> dict:
    """How much one update moves the other information sets: the gradient, over every weight, of each
    information set's log-odds of its aggressive reply over its passive one, and the cosine of every pair
    (1: an update for one moves the other alike; the twin's 12 logits: 0 between different sets). With
    ``say_card`` the prompts are ``game.say_card``'s and the actions follow the reply's opening, as
    ``spag strategy``'s exact way scores them (the opening encoded alone, each action after a space)."""
    import torch

    from spag.players.base import text_ids

    player = load_player(str(model), "hf", dtype="float32")
    try:
        net, tokenizer = player.model, player.tokenizer
        weights = [p for p in net.parameters() if p.requires_grad]
        gradients = {}
        for name, (prompt, opening, aggressive, passive) in information_set_prompts(say_card).items():
            ids = player.encode(prompt) + text_ids(tokenizer, opening)
            lead = " " if opening else ""
            odds = 0.0
            for reply_text, sign in ((aggressive, 1.0), (passive, -1.0)):
                reply_ids = tokenizer(lead + reply_text, add_special_tokens=False)["input_ids"]
                tokens = torch.tensor([ids + reply_ids])
                logits = net(input_ids=tokens).logits[0, len(ids) - 1 : -1].float()
                odds = (
                    odds
                    + sign
                    * torch.log_softmax(logits, -1)[
                        torch.arange(len(reply_ids)), torch.tensor(reply_ids)
                    ].sum()
                )
            grads = torch.autograd.grad(odds, weights)
            gradients[name] = torch.cat(
                [g.reshape(-1) for g in grads]
            )  # 0.5 GB each at 135M, no stacked copy
            del grads
    finally:
        close_player(player)
    names = list(gradients)
    dots = {(a, b): _dot(gradients[a], gradients[b]) for i, a in enumerate(names) for b in names[: i + 1]}
    cosine = [
        [
            dots[max(a, b, key=names.index), min(a, b, key=names.index)] / math.sqrt(dots[a, a] * dots[b, b])
            for b in names
        ]
        for a in names
    ]
    return {"information_sets": names, "say_card": say_card, "cosine": cosine}


def _dot(a, b, chunk: int = 1 << 22) -> float:
    """a · b summed in float64, a chunk at a time (float32 over 10^8 terms drifts by about 1%)."""
    return sum(float(a[k : k + chunk].double() @ b[k : k + chunk].double()) for k in range(0, len(a), chunk))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--learning-rate", type=float, nargs="+", default=[2e-5])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rewarded", default="[call]")
    parser.add_argument("--other", default="[fold]")
    parser.add_argument("--out", type=Path, default=Path("runs/bandit"))
    parser.add_argument("-o", "--output", type=Path, help="the figures as JSON")
    parser.add_argument(
        "--cards", action="store_true", help="the two-card bandit: call rewarded with K, fold with J"
    )
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="the cosine between the 12 information sets' log-odds gradients, no training",
    )
    parser.add_argument(
        "--card-last", action="store_true", help="--cards: the card said again at the prompt's end"
    )
    parser.add_argument(
        "--say-card",
        action="store_true",
        help="--overlap: game.say_card's prompts, each action after the reply's opening (My card: K.)",
    )
    parser.add_argument("--clip-range", type=float, help="spag.clip_range (default the pipeline's 0.2)")
    parser.add_argument("--kl-coeff", type=float, help="spag.kl_coeff (default the pipeline's 0.2)")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except DataError as exc:  # an output folder that is not the bandit's
        print(f"[bandit] error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    if args.output:  # a new file only, checked before any training
        claim_file(args.output, "-o")
    model = args.model
    if model == "embedded":
        from spag.models.embedded import materialize_base_model

        model = args.out / "embedded"
        if not (model / "config.json").exists():
            materialize_base_model(model)
    if args.overlap:
        overlap = gradient_overlap(model, say_card=args.say_card)
        names, cosine = overlap["information_sets"], overlap["cosine"]
        same = [cosine[i][j] for i in range(12) for j in range(i) if _history(names[i]) == _history(names[j])]
        other = [
            cosine[i][j] for i in range(12) for j in range(i) if _history(names[i]) != _history(names[j])
        ]
        if args.output:
            write_json_atomic(args.output, {"model": str(args.model), **overlap})
        print(
            f"[bandit] gradient cosine, another card in the same situation: {min(same):.3f}-{max(same):.3f} "
            f"(mean {sum(same) / len(same):.3f}); another situation: mean {sum(other) / len(other):.3f}"
            + (f" -> {args.output}" if args.output else "")
        )
        return 0
    result = {}
    train = {
        key: value
        for key, value in (("clip_range", args.clip_range), ("kl_coeff", args.kl_coeff))
        if value is not None
    }
    if args.cards:
        for rate in args.learning_rate:
            points = card_bandit(
                model,
                args.out / f"cards-lr-{rate:g}",
                learning_rate=rate,
                steps=args.steps,
                card_last=args.card_last,
                **train,
            )
            result[f"{rate:g}"] = points
            print(
                f"[bandit] cards, lr {rate:g}: P(call | K) - P(call | J) by step "
                + " ".join(f"{p['gap']:+.3f}" for p in points)
                + f" (K {points[-1]['call_K']:.3f}, J {points[-1]['call_J']:.3f} at the end)",
                flush=True,
            )
        if args.output:
            write_json_atomic(
                args.output,
                {
                    "model": str(args.model),
                    "cards": True,
                    "card_last": args.card_last,
                    "train": train,
                    "points": result,
                },
            )
        print(
            f"[bandit] {len(args.learning_rate)} learning rate(s), {args.steps} steps each"
            + (f" -> {args.output}" if args.output else "")
        )
        return 0
    for rate in args.learning_rate:
        points = bandit(
            model,
            args.out / f"lr-{rate:g}",
            args.rewarded,
            args.other,
            learning_rate=rate,
            steps=args.steps,
            **train,
        )
        result[f"{rate:g}"] = points
        steps = " ".join(f"{p['log_odds']:+.2f}" for p in points)
        moved = max(points[k + 1]["log_odds"] - points[k]["log_odds"] for k in range(len(points) - 1))
        print(f"[bandit] lr {rate:g}: log-odds by step {steps}; the largest step {moved:+.2f}", flush=True)
    if args.output:
        write_json_atomic(
            args.output,
            {
                "model": str(args.model),
                "rewarded": args.rewarded,
                "other": args.other,
                "prompt": PROMPT,
                "points": result,
            },
        )
    print(
        f"[bandit] {len(args.learning_rate)} learning rate(s), {args.steps} steps each"
        + (f" -> {args.output}" if args.output else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
