"""Adversarial Taboo, the game of the SPAG paper, behind the :class:`~spag.game.base.Game` interface.

The attacker knows a secret target word and tries to make the defender say it without saying it
himself; the defender tries to infer the word and may guess once with "I know the word! It is X". The
parts, each a module here:

- ``card``: what the pipeline knows of the game without playing it: its settings, its teacher's strategy
  knobs, its targets;
- ``outcomes``: the roles, the outcomes and how each came about; ``rules``: the whole-word judge (every
  inflection counts) and ``original``: the original code's substring judge (``game.rules``);
- ``prompts`` with ``templates.yaml``: what each role is asked, as data; ``original_prompts``: the
  original's prompts (``game.play_prompts`` / ``game.row_prompts: original``); ``replies``: where a reply
  ends and what is cleaned off it (``game.replies``);
- ``strategies``: the teacher's strategies and the decode-time word filter (``teacher.strategies``);
- ``skill`` and ``baselines``: the skill metrics (clue rank, guess rank) and the no-training baselines;
- ``collapse``: how varied self-play's replies are, per role (distinct replies and openings, empty and
  truncated replies, words per reply);
- ``queries/``: the named SQL queries only this game has (word frequency bands, the two rule sets);
- ``fresh_eval_words.txt``: 128 nouns no setting was chosen on (``evaluate.word_set: fresh``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from spag.game.base import Game, History, Stops
from spag.game.taboo import strategies as strategy
from spag.game.taboo.card import TABOO, TabooSettings, TabooStrategies
from spag.game.taboo.collapse import collapse_metrics
from spag.game.taboo.original_prompts import play_query, row_query
from spag.game.taboo.outcomes import (
    ATTACKER,
    ATTACKER_GUESSED,
    ATTACKER_SAID_WORD,
    CAUSES,
    CORRECT_GUESS,
    DEFENDER,
    DEFENDER_SAID_WORD,
    OUT_OF_TURNS,
    OUTCOMES,
    SIDES,
    WRONG_GUESS,
)
from spag.game.taboo.prompts import addressed_role, build_prompt, play_template, training_prompt_with_bounds
from spag.game.taboo.replies import STOPS, clean_reply
from spag.game.taboo.rules import judge, normalise_word
from spag.game.taboo.skill import TabooSkill
from spag.game.taboo.targets import targets as taboo_targets
from spag.game.words import read_words

GUESS_PHRASE = "i know the word"  # game.end: guess-phrase stops a game after a defender line with it
FRESH_WORDS = Path(__file__).with_name("fresh_eval_words.txt")


# How each way a game ends counts for the model in each role: the outcome decomposition. A role's parts add
# up to 1; wins by the model's own skill (an induced word, a correct guess) stand apart from wins handed over
# by the opponent's mistake (a wrong guess, a foul).
PARTS = {
    ATTACKER: {
        DEFENDER_SAID_WORD: "win_induced_word",
        WRONG_GUESS: "win_opponent_wrong_guess",
        CORRECT_GUESS: "loss_opponent_correct_guess",
        ATTACKER_SAID_WORD: "foul_said_word",
        ATTACKER_GUESSED: "foul_guessed",
        OUT_OF_TURNS: "tie",
    },
    DEFENDER: {
        CORRECT_GUESS: "win_correct_guess",
        ATTACKER_SAID_WORD: "win_opponent_foul",
        ATTACKER_GUESSED: "win_opponent_foul",
        DEFENDER_SAID_WORD: "loss_said_word",
        WRONG_GUESS: "loss_wrong_guess",
        OUT_OF_TURNS: "tie",
    },
}


class Taboo(Game):
    """Adversarial Taboo (see the package docstring)."""

    name = TABOO.name
    title = TABOO.title
    roles = (ATTACKER, DEFENDER)
    outcomes = OUTCOMES
    causes = CAUSES
    outcome_sides = SIDES
    parts = PARTS
    skill_causes = frozenset({DEFENDER_SAID_WORD, CORRECT_GUESS})
    Settings = TabooSettings
    Strategies = TabooStrategies
    queries = Path(__file__).with_name("queries")
    uses_vocabulary = True
    skill = TabooSkill()

    # -- targets: English words
    def targets(self, words) -> list[str]:
        return taboo_targets(words)

    def fresh_targets(self) -> list[str]:
        return read_words(FRESH_WORDS)

    def same_target(self, target: str) -> str:
        return normalise_word(target)

    # -- play
    def prompt(self, role: str, target: str, history: History, strategies: TabooStrategies) -> str:
        if self.settings.play_prompts == "original":
            return play_query(history, target, self.max_turns)
        template = play_template(self.settings.templates, examples=strategies.examples)
        return build_prompt(role, target, history, self.max_turns, template)

    def stops(self) -> Stops:
        return STOPS if self.settings.replies == "clean" else Stops()  # raw: to the end-of-turn token

    def utterance(self, reply: str) -> str:
        return clean_reply(reply) if self.settings.replies == "clean" else reply

    def judge(self, target: str, history: History):
        return judge(target, history, self.max_turns, self.settings.rules)

    def is_over(self, target: str, history: History) -> bool:
        if self.settings.end == "guess-phrase" and len(history) < 2 * self.max_turns:
            last = history[-1] if history else None
            return last is not None and last["role"] != ATTACKER and GUESS_PHRASE in last["content"].lower()
        return super().is_over(target, history)

    def speaker(
        self,
        player,
        roles: Sequence[str],
        strategies: TabooStrategies,
        *,
        seed: int = 0,
        vocabulary: Sequence[str] | None = None,
    ):
        return strategy.speaker(self, player, roles, strategies, vocabulary)

    # -- self-play health
    def collapse_metrics(self, episodes):
        return collapse_metrics(episodes, self.roles)

    # -- training rows
    def role_in_prompt(self, prompt: str) -> str | None:
        return addressed_role(prompt)

    def row_prompt(self, role: str, target: str, history: History, rng: random.Random):
        if self.settings.row_prompts == "original":  # the model's whole input: no history lines to give up
            return row_query(history, target, self.max_turns, rng), None
        return training_prompt_with_bounds(
            role, target, history, self.max_turns, rng, self.settings.templates
        )
