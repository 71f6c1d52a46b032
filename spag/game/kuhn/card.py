"""What the pipeline knows of Kuhn poker without playing it: its settings (the ``game:`` section), its teacher
strategies' knobs (``teacher.strategies``) and its six deals (see :mod:`spag.game.kuhn`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from spag.game.base import GameCard, GameSettings
from spag.runtime.errors import SettingError
from spag.schema import Section, knob

CARDS = ("J", "Q", "K")  # in rank order
DEALS = tuple(f"{a}-{b}" for a in CARDS for b in CARDS if a != b)
SAY_CARD_TOKENS = 12  # max_new_tokens a reply that names the card needs at least


class KuhnSettings(GameSettings):
    """Kuhn poker's settings (the ``game:`` section)."""

    name: Literal["kuhn-poker"] = knob("kuhn-poker", "The game (the registry lists every one).")
    max_turns: int = knob(
        2,
        "Rounds, an action of each player each: a hand takes at most 3 actions, so 2 finishes every hand.",
        ge=1,
    )
    say_card: bool = knob(
        False,
        'Every reply names the player\'s card before its action ("My card: K. [bet]"): the prompt asks for '
        "it and the teacher's replies do it, so that a model's action follows its card in its own reply "
        f"(such a reply takes 8 tokens: max_new_tokens of at least {SAY_CARD_TOKENS}).",
    )

    def fewest_reply_tokens(self) -> int:
        # "My card: K. [bet]" is 8 tokens for SmolLM2's tokenizer; 12 leaves room for one that splits finer
        return SAY_CARD_TOKENS if self.say_card else 1


TABLES = ("equilibrium", "uniform", "always_bet")  # the knobs that turn on a fixed strategy


class KuhnStrategies(Section):
    """Kuhn poker's strategies (``teacher.strategies``): at most one fixed strategy that plays instead of the
    model (:data:`spag.game.kuhn.TEACHERS`), and how much of the uniform strategy is mixed into it."""

    equilibrium: bool = knob(
        False,
        "Play a Nash equilibrium of the game (the first player bluffs with J a third "
        "of the time) instead of the model: a teacher whose games are sound.",
    )
    uniform: bool = knob(
        False,
        "Play each legal action with probability 1/2 instead of the model: a weak "
        "teacher (exploitable by 11/24 chip a hand).",
    )
    always_bet: bool = knob(
        False,
        "Always bet and call instead of the model: a weak teacher that never folds "
        "(exploitable by 1/3 chip a hand).",
    )
    explore: float = knob(
        0.0,
        "Mix the fixed strategy that is on with the uniform one: each probability p becomes "
        "(1 - explore) p + explore/2, so that every action is played (0: the strategy alone).",
        ge=0.0,
        le=1.0,
    )

    @model_validator(mode="after")
    def _one_teacher(self):
        chosen = [name for name in TABLES if getattr(self, name)]
        if len(chosen) > 1:
            raise SettingError(chosen[1], f"one fixed strategy at a time, and {chosen[0]} is on too")
        if self.explore and not chosen:
            raise SettingError(
                "explore",
                f"mixes a fixed strategy ({', '.join(TABLES)}) with the uniform one, and none is on",
            )
        return self


def targets(words) -> list[str]:
    """The six deals, whatever the ``words:`` section says."""
    return list(DEALS)


KUHN = GameCard(
    name="kuhn-poker",
    title="Kuhn poker",
    Settings=KuhnSettings,
    Strategies=KuhnStrategies,
    few_targets=True,
    for_chips=True,
)
