"""Kuhn poker, the smallest poker, as a game of words: SPIRAL's first game (Liu et al., 2025).

The deck holds three cards, J < Q < K. Each player puts one chip in the pot and is dealt one card, which
the other does not see; the rest of the deck is not played. Player 0 (the ``first`` role) acts first:

- with no bet to answer a player may ``[check]`` or ``[bet]`` (one more chip);
- facing a bet, ``[call]`` (one more chip) or ``[fold]`` (the pot goes to the bettor);
- check-check, or a call, ends in a showdown: the higher card takes the pot.

So a hand is at most three actions: check-check, check-bet-call, check-bet-fold, bet-call or bet-fold. A
reply plays the first bracketed action it holds; a reply with none, or with an action the state does not
allow, breaks the rules and loses the hand (SPIRAL's invalid move). The game's **target** is the deal,
``"K-Q"`` (the first role's card, then the second's); each prompt shows a player its own card only. With
six deals the game has few targets (:attr:`~spag.game.base.Game.few_targets`): each is dealt many times.

SPAG's rewards need no more than this: the winner's actions earn the decayed shares, the rule breaker's
line can be penalised; a win is a win (``reward.payoff: wins``). With ``reward.payoff: chips`` each player is
paid the chips it won or lost instead (:meth:`KuhnPoker.chips`: ±1, or ±2 after a bet was called; a rule
break counts as a fold).

Self-play's collapse figures (:func:`collapse_metrics`) are the entropy of the actions played at each of the
twelve information sets (a player's card and the actions before its turn).

The teacher strategies play a fixed strategy (:data:`TEACHERS`) instead of the model: ``equilibrium`` a Nash
equilibrium of the game (Kuhn, 1950, with the first player's bluffing frequency 1/3), so that a weak model
still has sound games to imitate; ``uniform`` and ``always_bet`` two weak starting points (each legal action
with probability 1/2; always bet and call).
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from spag.game.base import Game, History, Verdict
from spag.game.kuhn.card import CARDS, DEALS, KUHN, KuhnSettings, KuhnStrategies
from spag.game.kuhn.card import targets as kuhn_targets
from spag.players.base import Speaker, Turn

FIRST, SECOND = "first", "second"
ROLES = (FIRST, SECOND)

CHECK, BET, CALL, FOLD = "check", "bet", "call", "fold"
_ACTION = re.compile(r"\[\s*(check|bet|call|fold)\s*\]", re.IGNORECASE)
_PLAYER_IN_PROMPT = re.compile(r"\bYou are Player ([01])\b")  # the prompt's seat line (KuhnPoker.prompt)

FIRST_WINS, SECOND_WINS = "first_wins", "second_wins"
FIRST_BREAKS_RULES, SECOND_BREAKS_RULES = "first_breaks_rules", "second_breaks_rules"
UNFINISHED = "unfinished"  # the rounds ran out before the hand ended (max_turns 1 after check-bet)
OUTCOMES = (FIRST_WINS, SECOND_WINS, UNFINISHED, FIRST_BREAKS_RULES, SECOND_BREAKS_RULES)
SIDES = {
    FIRST_WINS: (FIRST, None),
    SECOND_WINS: (SECOND, None),
    UNFINISHED: (None, None),
    FIRST_BREAKS_RULES: (None, FIRST),
    SECOND_BREAKS_RULES: (None, SECOND),
}
# How a hand ended: a showdown won by a role, a fold by a role, a role's illegal action, or no end.
CAUSES = {
    FIRST_WINS: ("first_showdown", "second_folded"),
    SECOND_WINS: ("second_showdown", "first_folded"),
    UNFINISHED: ("out_of_turns",),
    FIRST_BREAKS_RULES: ("first_illegal",),
    SECOND_BREAKS_RULES: ("second_illegal",),
}


def _parts(me: str, other: str) -> dict[str, str]:
    """What each way a hand ends is for the role ``me``: the outcome decomposition."""
    return {
        f"{me}_showdown": "win_showdown",
        f"{other}_folded": "win_opponent_folded",
        f"{other}_illegal": "win_opponent_foul",
        f"{other}_showdown": "loss_showdown",
        f"{me}_folded": "loss_folded",
        f"{me}_illegal": "foul_illegal_action",
        "out_of_turns": "tie",
    }


PARTS = {FIRST: _parts(FIRST, SECOND), SECOND: _parts(SECOND, FIRST)}


# A strategy: the probability of the aggressive action (bet, or call facing a bet) at each information set,
# by the actions so far (comma-joined: "" and "check,bet" are the first player's, "check" and "bet" the
# second's) and the card of the player to act. The other legal action (check, or fold) takes the rest.
Strategy = Mapping[str, Mapping[str, float]]
INFORMATION_SETS = ("", "check,bet", "check", "bet")
EQUILIBRIUM: Strategy = {
    "": {"J": 1 / 3, "Q": 0.0, "K": 1.0},  # the first player bluffs J a third of the time, bets K
    "check,bet": {"J": 0.0, "Q": 2 / 3, "K": 1.0},  # and calls with Q two thirds of the time
    "check": {"J": 1 / 3, "Q": 0.0, "K": 1.0},  # the second player bluffs J a third of the time after a check
    "bet": {"J": 0.0, "Q": 1 / 3, "K": 1.0},  # and calls with Q a third of the time
}
UNIFORM: Strategy = {history: dict.fromkeys(CARDS, 0.5) for history in INFORMATION_SETS}
ALWAYS_BET: Strategy = {history: dict.fromkeys(CARDS, 1.0) for history in INFORMATION_SETS}
# The teacher strategies by their knob in KuhnStrategies.
TEACHERS: dict[str, Strategy] = {"equilibrium": EQUILIBRIUM, "uniform": UNIFORM, "always_bet": ALWAYS_BET}


def teacher_table(strategies: KuhnStrategies) -> Strategy | None:
    """The strategy table of the fixed strategy that is on, mixed with the uniform one by ``explore``, or
    None (the model plays)."""
    table = next((TEACHERS[name] for name in TEACHERS if getattr(strategies, name)), None)
    if table is None or not strategies.explore:
        return table
    return mixed(table, UNIFORM, strategies.explore)


def mixed(table: Strategy, other: Strategy, weight: float) -> Strategy:
    """At every decision, ``other``'s probability with weight ``weight`` and ``table``'s with the rest: the
    strategy that follows ``other`` at a decision with probability ``weight``, each decision drawn anew."""
    return {
        history: {card: (1 - weight) * p + weight * other[history][card] for card, p in row.items()}
        for history, row in table.items()
    }


def cards(deal: str) -> tuple[str, str]:
    """(the first role's card, the second's) of a deal such as ``"K-Q"``; ValueError for anything else."""
    if deal not in DEALS:
        raise ValueError(f"not a Kuhn poker deal: {deal!r} (one of {', '.join(DEALS)})")
    first, second = deal.split("-")
    return first, second


def action_of(text: str) -> str | None:
    """The first bracketed action a reply plays (lower case), or None."""
    match = _ACTION.search(text)
    return match.group(1).lower() if match else None


def say(card: str) -> str:
    """The opening of a reply that names the player's card (``game.say_card``): ``My card: K.``"""
    return f"My card: {card}."


def reply(action: str, card: str | None = None) -> str:
    """The canonical reply that plays ``action``, the teacher's whole reply: ``[bet]``, or with ``card``
    named first (``game.say_card``) ``My card: K. [bet]``."""
    return f"[{action}]" if card is None else f"{say(card)} [{action}]"


def legal(actions: Sequence[str]) -> tuple[str, str]:
    """The two actions the next player may take after ``actions``."""
    return (CALL, FOLD) if actions and actions[-1] == BET else (CHECK, BET)


def aggressive(actions: Sequence[str]) -> str:
    """The aggressive one of the two legal actions after ``actions``: bet, or call facing a bet."""
    return BET if legal(actions)[1] == BET else CALL


def _ended(actions: Sequence[str], deal: str) -> tuple[str, str] | None:
    """(outcome, cause) of a hand whose legal ``actions`` are these, or None while it goes on."""
    if actions[-1] == FOLD:
        folder = ROLES[(len(actions) - 1) % 2]
        return (SECOND_WINS, "first_folded") if folder == FIRST else (FIRST_WINS, "second_folded")
    if actions[-1] == CALL or list(actions) == [CHECK, CHECK]:
        first, second = cards(deal)
        return (
            (FIRST_WINS, "first_showdown")
            if CARDS.index(first) > CARDS.index(second)
            else (SECOND_WINS, "second_showdown")
        )
    return None


# ----------------------------------------------------------------------- collapse figures of self-play

# Where a player acts, by its role and the actions before it (comma-separated): the situation of its
# information set.
SITUATIONS = {
    (FIRST, ""): "opening",
    (FIRST, "check,bet"): "check_bet",
    (SECOND, "check"): "check",
    (SECOND, "bet"): "bet",
}
RULE_BREAK = "rule_break"  # a third outcome besides the two legal actions


def information_sets() -> list[str]:
    """The twelve information sets as the collapse figures name them, ``ROLE_CARD_SITUATION``
    (``first_J_opening``, ``first_J_check_bet``, ``second_J_check``, ``second_J_bet``, ...)."""
    return [f"{role}_{card}_{situation}" for (role, _), situation in SITUATIONS.items() for card in CARDS]


def entropy_bits(counts: Counter) -> float | None:
    """The Shannon entropy, in bits, of the outcomes ``counts`` holds; None for no outcome."""
    total = sum(counts.values())
    if not total:
        return None
    return max(0.0, -sum(n / total * math.log2(n / total) for n in counts.values() if n))


def collapse_metrics(episodes: Sequence[Mapping]) -> dict[str, dict]:
    """Whether self-play settled into one action: ``{"entropy_bits": {set: bits}, "counts": {set: hands}}``.

    Each information set's entropy is that of the actions played there in ``episodes`` (each hand read as
    the judge reads it: up to its end, a rule break or ``2 * max_turns`` actions): 0 when every hand did the
    same, 1 for an even mix of the two legal actions. A reply that breaks the rules counts as an outcome of
    its own, so the entropy reaches log2(3) ≈ 1.585 and breaking the rules every time scores 0, as always
    betting does (self-play's ``foul_rate`` tells them apart). ``counts``: the hands that reached each
    information set; its entropy is None where none did."""
    played: dict[str, Counter] = {name: Counter() for name in information_sets()}
    for episode in episodes:
        deal = episode["target_word"]
        dealt = cards(deal)
        actions: list[str] = []
        for i, utterance in enumerate(episode["history"][: 2 * int(episode["max_turns"])]):
            role = ROLES[i % 2]
            outcomes = played[f"{role}_{dealt[i % 2]}_{SITUATIONS[role, ','.join(actions)]}"]
            action = action_of(utterance["content"])
            if action not in legal(actions):
                outcomes[RULE_BREAK] += 1
                break
            outcomes[action] += 1
            actions.append(action)
            if _ended(actions, deal):
                break
    return {
        "entropy_bits": {name: entropy_bits(c) for name, c in played.items()},
        "counts": {name: sum(c.values()) for name, c in played.items()},
    }


class KuhnPoker(Game):
    """Kuhn poker (see the package docstring)."""

    name = KUHN.name
    title = KUHN.title
    roles = ROLES
    outcomes = OUTCOMES
    causes = CAUSES
    outcome_sides = SIDES
    parts = PARTS
    skill_causes = frozenset({"first_showdown", "second_folded", "second_showdown", "first_folded"})
    Settings = KuhnSettings
    Strategies = KuhnStrategies
    few_targets = KUHN.few_targets
    for_chips = KUHN.for_chips

    def targets(self, words) -> list[str]:
        return kuhn_targets(words)

    def check_target(self, target: str) -> None:
        cards(target)

    def same_target(self, target: str) -> str:
        return target.strip().upper()

    def judge(self, target: str, history: History) -> Verdict:
        cards(target)
        actions: list[str] = []
        for i, utterance in enumerate(history[: 2 * self.max_turns]):
            role = utterance["role"]
            if role != ROLES[i % 2]:
                raise ValueError(
                    f"unknown role {role!r} in utterance {i}"
                    if role not in ROLES
                    else f"utterance {i} is the {role}'s, but the {ROLES[i % 2]} acts there"
                )
            action = action_of(utterance["content"])
            if action not in legal(actions):
                outcome = FIRST_BREAKS_RULES if role == FIRST else SECOND_BREAKS_RULES
                return Verdict(outcome, i + 1, f"{role}_illegal", None, role)
            actions.append(action)
            ended = _ended(actions, target)
            if ended:
                outcome, cause = ended
                return Verdict(outcome, i + 1, cause, SIDES[outcome][0], None)
        return Verdict(UNFINISHED, min(len(history), 2 * self.max_turns), "out_of_turns")

    def prompt(self, role: str, target: str, history: History, strategies: KuhnStrategies) -> str:
        mine = cards(target)[ROLES.index(role)]
        actions = [action_of(u["content"]) for u in history]
        done = (
            "; ".join(f"Player {ROLES.index(u['role'])}: [{a}]" for u, a in zip(history, actions))
            or "none yet"
        )
        first, second = legal(actions)
        move = (
            f'Your move: reply with "{say(mine)}" and then [{first}] or [{second}].'
            if self.settings.say_card
            else f"Your move: reply with [{first}] or [{second}]."
        )
        return (
            f"You are playing Kuhn poker. The deck has three cards: J, Q and K (K is highest). Each player "
            f"puts 1 chip in the pot and is dealt one card, which the other player does not see. Player 0 acts "
            f"first. Without a bet to answer you may [check] or [bet] (add 1 chip); facing a bet you may "
            f"[call] (add 1 chip) or [fold] (the bettor takes the pot). After check-check or a call, the "
            f"higher card wins the pot.\n"
            f"You are Player {ROLES.index(role)}. Your card: {mine}.\n"
            f"Actions so far: {done}.\n" + move
        )

    def speaker(
        self,
        player,
        roles: Sequence[str],
        strategies: KuhnStrategies,
        *,
        seed: int = 0,
        vocabulary: Sequence[str] | None = None,
    ) -> Speaker:
        plain = Speaker(player)
        table = teacher_table(strategies)
        if table is None:
            return plain
        return TableStrategy(plain, table, seed, say_card=self.settings.say_card)

    def chips(self, target: str, history: History) -> dict[str, float]:
        """Each player's chips won (+) or lost (-) in the hand, within the rounds it is judged in: the pot's
        other half at a showdown or a fold (1, or 2 after a bet was called); a rule break counts as a fold,
        the breaker losing what it has put in; nothing in an unfinished hand. Zero-sum."""
        verdict = self.judge(target, history)
        if verdict.winner is None and verdict.offender is None:
            return dict.fromkeys(ROLES, 0.0)
        loser = verdict.offender or self.other(verdict.winner)
        actions = [action_of(u["content"]) for u in history[: verdict.turns]]
        if verdict.offender is not None:
            actions = actions[:-1]  # the illegal action puts nothing in
        mine = [a for i, a in enumerate(actions) if ROLES[i % 2] == loser]
        lost = 1.0 + sum(a in (BET, CALL) for a in mine)  # the ante, and a bet or a call
        return {loser: -lost, self.other(loser): lost}

    def role_in_prompt(self, prompt: str) -> str | None:
        found = set(_PLAYER_IN_PROMPT.findall(prompt))
        return ROLES[int(found.pop())] if len(found) == 1 else None

    def row_prompt(self, role: str, target: str, history: History, rng: random.Random):
        return self.prompt(role, target, history, self.Strategies()), None

    def collapse_metrics(self, episodes):
        return collapse_metrics(episodes)


class TableStrategy(Speaker):
    """Every turn answered by a strategy table (:data:`Strategy`), without the model: the aggressive action
    with the table's probability for the player's card and the actions so far, the other legal action
    otherwise. Each draw comes from the turn's own seed (its game's and utterance's), so a hand is the same
    whatever hands share its batch and after a resume; a turn without one draws from a stream of the
    strategy's seed, in the order asked. With ``say_card`` each reply names the player's card first."""

    def __init__(self, inner: Speaker, table: Strategy, seed: int, *, say_card: bool = False):
        super().__init__(inner.player)
        self.table = table
        self.rng = random.Random(seed)
        self.say_card = say_card

    def given(self, turns: Sequence[Turn]) -> list[str | None]:
        return [reply(self.action(turn), self._card(turn) if self.say_card else None) for turn in turns]

    @staticmethod
    def _card(turn: Turn) -> str:
        return cards(turn.word)[ROLES.index(turn.role)]

    def action(self, turn: Turn) -> str:
        card = self._card(turn)
        actions = [action_of(u["content"]) for u in turn.history]
        bold = aggressive(actions)
        draw = self.rng.random() if turn.seed is None else random.Random(f"table-{turn.seed}").random()
        if draw < self.table[",".join(actions)][card]:
            return bold
        return next(a for a in legal(actions) if a != bold)
