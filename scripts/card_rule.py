"""Can a model learn to act on its Kuhn poker card by plain supervised fine-tuning? A check of the model, not
of the loop.

    python scripts/card_rule.py [--model embedded] [--learning-rate 3e-4] [--steps 80] [--seed 0]
                                [--replies plain say_card] [--out runs/card-rule] [-o figures.json]

The rule taught, without noise, at the game's twelve information-set prompts: the aggressive action (bet, or
call facing a bet) holding K, the passive one (check, or fold) holding J or Q. ``--steps`` AdamW steps
(constant rate, no weight decay, batch 4 of the twelve prompts drawn with ``--seed``), the loss the mean
negative log-likelihood of the reply's tokens and end of turn, in a plain torch loop (not the project's
trainer: the question is about the model). It runs once per reply form, each from the base weights:

- ``plain``: the reply is the action alone, ``[bet]`` (the game's default);
- ``say_card``: the reply names the card first, ``My card: K. [bet]`` (``game.say_card``), and the prompt
  asks for that.

After training, each information set's probability of the aggressive reply over the pair (after the
opening ``My card: K.`` where the reply names the card), as ``spag strategy``'s exact way reads it, and the
rule's gap: the mean probability of the aggressive action holding K minus that holding J or Q, over the four
situations (1: the rule learned; 0: the cards played alike).

``--model embedded`` is SmolLM2-135M-Instruct from its wheel; tests/test_card_rule.py runs the same function on
a tiny random model.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spag.evaluate.strategy import state
from spag.game.kuhn import CARDS, KuhnPoker, say
from spag.game.kuhn.card import KuhnSettings
from spag.game.kuhn.exploitability import INFOSETS
from spag.harness.rule import claim_file
from spag.runtime.atomic import write_json_atomic
from spag.runtime.errors import DataError

REPLIES = ("plain", "say_card")
PASSIVE = {"bet": "check", "call": "fold"}


def examples(form: str) -> list[dict]:
    """The twelve information sets' prompts in reply form ``form``, each with its opening (the card named, or
    nothing), its two replies after the opening and the rule's choice."""
    game = KuhnPoker(KuhnSettings(say_card=form == "say_card"))
    out = []
    for infoset in INFOSETS:
        deal, history = state(infoset)
        opening = say(infoset.card) if form == "say_card" else ""
        lead = " " if opening else ""
        aggressive, passive = f"{lead}[{infoset.action}]", f"{lead}[{PASSIVE[infoset.action]}]"
        out.append(
            {
                "player": infoset.player,
                "card": infoset.card,
                "history": infoset.history,
                "prompt": game.prompt(infoset.player, deal, history, game.Strategies()),
                "opening": opening,
                "replies": (aggressive, passive),
                "taught": aggressive if infoset.card == "K" else passive,
            }
        )
    return out


def teach(model: str | Path, form: str, learning_rate: float, steps: int, seed: int = 0) -> dict:
    """Train a fresh copy of ``model`` on the rule in reply form ``form`` and read it back: ``{"losses"
    (every step's), "rows" (each information set's probability of the aggressive reply), "rule_gap"}``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spag.models.chat import model_input_ids

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model)
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    cases = examples(form)

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    for case in cases:
        case["prefix"] = model_input_ids(tokenizer, case["prompt"])
    optimiser = torch.optim.AdamW(net.parameters(), lr=learning_rate, weight_decay=0.0)
    draw = random.Random(seed)
    losses = []
    net.train()
    for _ in range(steps):
        loss = torch.zeros(())
        batch = draw.sample(cases, 4)
        for case in batch:
            reply = ids(case["opening"]) + ids(case["taught"]) + [tokenizer.eos_token_id]
            tokens = torch.tensor([case["prefix"] + reply])
            logits = net(input_ids=tokens).logits[0, len(case["prefix"]) - 1 : -1].float()
            nll = -torch.log_softmax(logits, -1)[torch.arange(len(reply)), torch.tensor(reply)].mean()
            loss = loss + nll / len(batch)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))  # a script's figure, not a hot path
    net.eval()
    rows = []
    with torch.no_grad():
        for case in cases:
            prefix = case["prefix"] + ids(case["opening"])
            logprobs = []
            for reply_text in case["replies"]:
                reply = ids(reply_text)
                logits = net(input_ids=torch.tensor([prefix + reply])).logits[0, len(prefix) - 1 : -1].float()
                logprobs.append(
                    float(torch.log_softmax(logits, -1)[torch.arange(len(reply)), torch.tensor(reply)].sum())
                )
            probability = 1 / (1 + math.exp(min(logprobs[1] - logprobs[0], 700.0)))
            rows.append(
                {key: case[key] for key in ("player", "card", "history")} | {"probability": probability}
            )
    return {"losses": losses, "rows": rows, "rule_gap": rule_gap(rows)}


def rule_gap(rows: list[dict]) -> float:
    """Mean probability of the aggressive action holding K minus that holding J or Q (over the situations)."""
    king = [r["probability"] for r in rows if r["card"] == CARDS[-1]]
    others = [r["probability"] for r in rows if r["card"] != CARDS[-1]]
    return sum(king) / len(king) - sum(others) / len(others)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replies", nargs="+", choices=REPLIES, default=list(REPLIES))
    parser.add_argument(
        "--out", type=Path, default=Path("runs/card-rule"), help="where the embedded model goes"
    )
    parser.add_argument("-o", "--output", type=Path, help="the figures as JSON (a new file)")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except DataError as exc:  # an output file already there
        print(f"[card_rule] error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    if args.output:
        claim_file(args.output, "-o")  # a new file only, checked before any training
    model = args.model
    if model == "embedded":
        from spag.models.embedded import materialize_base_model

        model = args.out / "embedded"
        if not (model / "config.json").exists():
            materialize_base_model(model)
    result = {
        "model": str(args.model),
        "learning_rate": args.learning_rate,
        "steps": args.steps,
        "seed": args.seed,
    }
    for form in args.replies:
        taught = teach(model, form, args.learning_rate, args.steps, args.seed)
        result[form] = taught
        table = "  ".join(
            f"{r['card']} {r['history'] or '-'}: {r['probability']:.3f}" for r in taught["rows"]
        )
        print(f"[card_rule] {form}: {table}", flush=True)
    if args.output:
        write_json_atomic(args.output, result)
    print(
        "[card_rule] rule gap (K minus J and Q), "
        + ", ".join(f"{form} {result[form]['rule_gap']:+.3f}" for form in args.replies)
        + f" after {args.steps} steps at {args.learning_rate:g}"
        + (f" -> {args.output}" if args.output else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
