"""The Game interface: all that the SPAG loop knows of the game it plays.

SPAG trains one model to play both sides of a two-player zero-sum game of words: it imitates a teacher's
winning games, then plays itself, a judge decides each game, the winner's utterances become rewarded
training rows, and the model is evaluated against the imitation model in both roles. Every part of that
loop (the play engine, rewards, training, evaluation, the tournament, ``spag analyze``, the report)
reaches the rules only through a :class:`Game`. A game is one package under ``spag/game/`` holding a
``Game`` subclass, and one line in the registry (:data:`spag.game.GAMES`); ``game.name`` in a params
file picks it.

What a game is, in this interface's terms:

- Two **roles** speak in turn, ``roles[0]`` first. Each utterance is one model reply, a line of text; a
  game's **history** is the list ``[{"role", "content"}, ...]`` so far, at most ``2 * max_turns`` long.
- Each game is set up by a **target**, a string the prompts reveal to each role as the game allows:
  Adversarial Taboo's target is the secret word the attacker knows; Kuhn poker's, the deal (both cards),
  of which each player sees only its own. The pipeline samples targets from the lists :meth:`targets`
  makes; episodes store it as ``target_word`` and statistics cluster by it. A game with few targets
  (:attr:`Game.few_targets`) plays each of them many times.
- The **judge** (:meth:`Game.judge`) reads a target and a history and returns a :class:`Verdict`: the
  outcome (one of :attr:`Game.outcomes`), how many utterances decided it, how it came about (its
  *cause*, one of ``causes[outcome]``), and which role won or broke the rules. Nothing else in spag
  decides a game.
- **Rewards**: the winner's utterances earn the decayed shares of the paper (or, in a game played for
  chips, each player's the chips it won or lost: :meth:`Game.chips`); the offender's rule-breaking
  line can be penalised (``reward.foul_line_penalty``); ``reward.credit: skill`` keeps only wins whose cause is
  in :attr:`Game.skill_causes`. Those are all the hooks rewards need.
- **Evaluation** scores a game 1 for a win, 1/2 for a game neither won, 0 for a loss or one's own foul
  (the opponent's foul is a win), and splits each role's games by cause (:attr:`Game.parts`: the names
  under ``outcomes`` in ``metrics/details.json``).
- **Strategies** are the game's decode-time helps for a weak teacher or a baseline (Adversarial Taboo's
  coached attacker, Kuhn poker's equilibrium player), wrapped around a player by :meth:`Game.speaker`.
- **Collapse figures** (:meth:`Game.collapse_metrics`): how varied self-play's replies are, so that a
  collapse into one reply or one action is seen in each epoch's self-play metrics.
- Optional extras a game may offer: skill metrics that need no opponent and baselines that need no
  training (:class:`SkillMetrics`), and named SQL queries (:attr:`Game.queries`).

The settings of a game are a section of their own (:attr:`Game.Settings`, the ``game:`` section of a
params file, with ``name`` and ``max_turns`` common to all games), and so are its teacher strategies
(:attr:`Game.Strategies`, ``teacher.strategies``): both are knobs like every other (:mod:`spag.schema`).
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from spag.players.base import Player, Speaker
from spag.runtime.errors import SettingError
from spag.schema import Section, knob

History = Sequence[Mapping[str, str]]


@dataclass(frozen=True)
class Verdict:
    """What the judge decided: the outcome, how many utterances it looked at (the deciding one included),
    how it came about (``cause``), the role that won (``winner``) and the role that broke the rules
    (``offender``; its opponent wins in evaluation, and nobody earns reward rows but by penalty)."""

    outcome: str
    turns: int
    cause: str
    winner: str | None = None
    offender: str | None = None

    @property
    def decided(self) -> bool:
        """Whether the game is over before its turns run out: someone won or broke the rules."""
        return self.winner is not None or self.offender is not None


class GameSettings(Section):
    """The settings every game has (the ``game:`` section); a game's own class adds its knobs."""

    name: str = knob(..., "The game (spag.game.GAMES).")
    max_turns: int = knob(5, "Rounds per game, an utterance of each role each (the paper: 5).", ge=1)

    def fewest_reply_tokens(self) -> int:
        """The fewest new tokens a sound reply takes under these settings: every section that samples
        replies (teacher, play, evaluate) must allow at least as many in its ``max_new_tokens``."""
        return 1


class NoStrategies(Section):
    """A game without teacher strategies: ``teacher.strategies`` must be empty."""


@dataclass(frozen=True)
class GameCard:
    """What the pipeline knows of a game without playing it, in a module of its own (``spag/game/NAME/card.py``)
    that imports none of the game's play: the settings are validated from the card alone. The game's
    :class:`Game` subclass takes these from its card; its targets are chosen in :mod:`spag.game.targets`."""

    name: str
    title: str
    Settings: type[GameSettings]
    Strategies: type[Section]
    few_targets: bool = False  # see Game.few_targets
    for_chips: bool = False  # see Game.for_chips
    skill: bool = False  # the game has skill metrics (evaluate.skill)
    baselines: tuple[str, ...] = ()  # the names of its no-training baselines


@dataclass(frozen=True)
class Stops:
    """Where a reply ends besides the model's end-of-turn token: literal ``strings`` (every backend) and a
    regular expression ``pattern`` (cut after generation, and by the hf backend while it generates)."""

    strings: tuple[str, ...] = ()
    pattern: str | None = None


class Game(ABC):
    """One two-player zero-sum game (see the module docstring). An instance holds the game's settings."""

    name: ClassVar[str]
    title: ClassVar[str]  # what the game is called in prose
    roles: ClassVar[tuple[str, str]]
    outcomes: ClassVar[tuple[str, ...]]
    causes: ClassVar[Mapping[str, tuple[str, ...]]]  # outcome -> the ways it can come about
    parts: ClassVar[Mapping[str, Mapping[str, str]]]  # role -> cause -> what that ending is for the role
    skill_causes: ClassVar[frozenset[str]]  # wins by the winner's own play (credit: skill)
    Settings: ClassVar[type[GameSettings]]
    Strategies: ClassVar[type[Section]] = NoStrategies
    # A game of few targets (Kuhn poker's six deals) plays each many times: a sample of targets repeats them,
    # and evaluation plays the training targets with fresh seeds; otherwise a sample never repeats a target
    # and evaluation targets are never trained on.
    few_targets: ClassVar[bool] = False
    # A game played for chips (Kuhn poker) says what each player won or lost (:meth:`chips`): reward.payoff chips.
    for_chips: ClassVar[bool] = False
    # A game whose strategies choose among a public vocabulary (Adversarial Taboo's final guess: `spag play
    # --guess-words`); another game has none to give.
    uses_vocabulary: ClassVar[bool] = False
    queries: ClassVar[Path | None] = None  # a folder of the game's own named SQL queries (spag analyze)
    skill: ClassVar[SkillMetrics | None] = None

    def __init__(self, settings: GameSettings | None = None):
        self.settings = settings if settings is not None else self.Settings()
        if self.settings.name != self.name:
            raise SettingError("name", f"settings of {self.settings.name!r} given to the game {self.name!r}")

    @property
    def max_turns(self) -> int:
        return self.settings.max_turns

    def other(self, role: str) -> str:
        return self.roles[1] if role == self.roles[0] else self.roles[0]

    def next_role(self, history: History) -> str:
        """Whose turn it is: the roles alternate, ``roles[0]`` first."""
        return self.roles[len(history) % 2]

    def record(self) -> dict:
        """What an episode records of the game: its name and its settings, as JSON text."""
        return {
            "game": self.name,
            "game_settings": json.dumps(self.settings.model_dump(mode="json"), sort_keys=True),
        }

    # ---------------------------------------------------------------------------------------- targets

    @abstractmethod
    def targets(self, words) -> list[str]:
        """Every target of the game, in a fixed order, given the ``words`` section (a word list's settings)."""

    def check_target(self, target: str) -> None:
        """Raise ValueError, saying why, for text that is not a target of the game (Kuhn poker's deals are
        six; any word is Adversarial Taboo's, whose word lists are checked as they are read)."""

    def fresh_targets(self) -> list[str]:
        """Targets no setting was chosen on (``evaluate.word_set: fresh``)."""
        raise ValueError(f"the game {self.name} has no fresh evaluation set")

    def same_target(self, target: str) -> str:
        """A target as the held-out check compares them (two spellings of one target are one)."""
        return target.strip().lower()

    # ------------------------------------------------------------------------------------------ play

    @abstractmethod
    def prompt(self, role: str, target: str, history: History, strategies: Section) -> str:
        """What ``role`` is asked next: the text of one user message (:mod:`spag.models.chat` renders it)."""

    def stops(self) -> Stops:
        """Where a reply ends besides the end-of-turn token (none by default)."""
        return Stops()

    def utterance(self, reply: str) -> str:
        """The utterance a player's raw reply makes (what the history records)."""
        return reply.strip()

    @abstractmethod
    def judge(self, target: str, history: History) -> Verdict:
        """Decide the game from its first ``2 * max_turns`` utterances (later ones are ignored); raise
        ValueError for an utterance by a role the game does not have."""

    def of_episode(self, episode: Mapping) -> Game:
        """This game with the rounds a recorded episode was played in (its ``max_turns``)."""
        rounds = int(episode.get("max_turns") or self.max_turns)
        return (
            self
            if rounds == self.max_turns
            else type(self)(self.settings.model_copy(update={"max_turns": rounds}))
        )

    def judge_episode(self, episode: Mapping) -> Verdict:
        """The verdict on a recorded game, judged within the rounds the episode records."""
        return self.of_episode(episode).judge(episode["target_word"], episode["history"])

    def is_over(self, target: str, history: History) -> bool:
        """Whether the game stops here: its turns are played, or the judge decided it."""
        return len(history) >= 2 * self.max_turns or self.judge(target, history).decided

    def speaker(
        self,
        player: Player,
        roles: Sequence[str],
        strategies: Section,
        *,
        seed: int = 0,
        vocabulary: Sequence[str] | None = None,
    ) -> Speaker:
        """``player`` speaking for ``roles`` with ``strategies`` (:class:`spag.players.base.Speaker`
        wrappers); ``vocabulary``: every target of the game, for a strategy that chooses among them."""
        if strategies != self.Strategies():
            raise ValueError(f"the game {self.name} has no strategies")
        return Speaker(player)

    def chips(self, target: str, history: History) -> dict[str, float]:
        """Each role's chips won (+) or lost (-) in a game played for chips (:attr:`for_chips`), judged from
        its first ``2 * max_turns`` utterances; zero-sum. A game that is not raises ValueError."""
        raise SettingError("payoff", f"the game {self.name} is not played for chips")

    # ------------------------------------------------------------------------------------ training rows

    @abstractmethod
    def row_prompt(
        self, role: str, target: str, history: History, rng: random.Random
    ) -> tuple[str, tuple[int, ...] | None]:
        """The prompt of a training row for ``role``'s utterance after ``history`` (``rng``: a game may draw
        its layout), with the character offsets of its history lines (None: they cannot be dropped when
        the row is too long; see :func:`spag.train.data`)."""

    def role_in_prompt(self, prompt: str) -> str | None:
        """The role a ready-made training row's prompt addresses (one of :attr:`roles`), read from its text,
        or None where the text does not say; a row that names its ``role`` needs none of this."""
        return None

    # ------------------------------------------------------------------------------------------ results

    def result(self, verdict_or_outcome, role: str) -> str:
        """What a game was for the player in ``role``: win, loss, tie, foul (its own) or win by the
        opponent's foul (``opponent_foul``)."""
        winner, offender = self.sides(verdict_or_outcome)
        if offender is not None:
            return "foul" if offender == role else "opponent_foul"
        if winner is None:
            return "tie"
        return "win" if winner == role else "loss"

    def sides(self, verdict_or_outcome) -> tuple[str | None, str | None]:
        """(winner, offender) of a verdict, or of an outcome (which names them in every game)."""
        if isinstance(verdict_or_outcome, Verdict):
            return verdict_or_outcome.winner, verdict_or_outcome.offender
        try:
            return self.outcome_sides[verdict_or_outcome]
        except KeyError:
            raise ValueError(f"unknown outcome {verdict_or_outcome!r} of {self.name}") from None

    outcome_sides: ClassVar[Mapping[str, tuple[str | None, str | None]]]  # outcome -> (winner, offender)

    def score(self, outcome: str, role: str) -> float:
        """The game's points for the player in ``role``: 1 for a win (the opponent's foul too), 1/2 for a
        tie, 0 otherwise."""
        return {"win": 1.0, "opponent_foul": 1.0, "tie": 0.5}.get(self.result(outcome, role), 0.0)

    # ----------------------------------------------------------------------------------- self-play health

    def collapse_metrics(self, episodes: Sequence[Mapping]) -> dict[str, dict]:
        """Whether self-play collapsed into one degenerate way of playing, from played ``episodes``: groups of
        named figures, ``{group: {name: value}}``. The groups the report knows: ``shares`` (shares of
        replies, 0 to 1), ``entropy_bits`` (an entropy in bits), ``lengths`` (mean lengths) and ``counts``
        (what the others were computed from, not plotted); a value is None where nothing was there to
        measure. A game without figures of its own returns no groups."""
        return {}


class SkillMetrics(ABC):
    """A game's evaluation beyond games won: skill metrics that need no opponent, measured the same way on
    every checkpoint and paired per target with the imitation model's, and baselines that need no training.

    ``metrics`` names them (lower is better); the pipeline calls :meth:`material` once (fixed inputs the
    metrics reuse, written by the base model), :meth:`measure` per checkpoint and :meth:`compare` against
    the imitation model.
    """

    metrics: ClassVar[tuple[str, ...]]
    baselines: ClassVar[tuple[str, ...]]

    @abstractmethod
    def material(
        self, game: Game, base: Player, targets: Sequence[str], config, per_target: int, *, said=None
    ) -> list[dict]:
        """Fixed inputs of the metrics (Adversarial Taboo: the base model's clue lines). ``said``
        (:class:`spag.play.engine.OpeningLines`): where opening lines generated for them are kept, for the
        games that open with the same lines (Adversarial Taboo: the base-teacher baseline's)."""

    @abstractmethod
    def measure(
        self,
        game: Game,
        player,
        judge_player,
        targets: Sequence[str],
        config,
        material: Sequence[Mapping],
        *,
        per_target: int,
        seed: int,
        openings: Sequence[str] | None = None,
        model_skill: Mapping | None = None,
    ) -> dict:
        """Each metric of ``player`` with its interval and ``per_word`` sums for pairing. ``openings``: the
        opening utterances ``player`` already said on ``targets`` in evaluation games with the same seeds
        (seed by seed, targets in order), which need not be generated again; ``model_skill``: what this
        method returned for the model ``player`` speaks with, on the same targets and material (a baseline
        that wraps the imitation model: the imitation model's), whose metrics that read the model alone,
        not its strategies, are taken from it."""

    @abstractmethod
    def compare(self, mine: Mapping, reference: Mapping, seed: int = 0) -> dict:
        """Each metric of ``mine`` minus ``reference``'s, paired per target, with its interval."""

    @abstractmethod
    def baseline(self, name: str, players: Mapping[str, Player]):
        """The no-training baseline ``name`` over loaded ``players`` (``{"imitation": ..., "base": ...}``)."""

    @abstractmethod
    def baseline_model(self, name: str) -> str:
        """Which model a baseline plays with: "imitation" or "base"."""

    @abstractmethod
    def filtered(self, player, name: str):
        """``player`` with the game's decode-time help alone (what the strongest baseline adds to a model
        that needs no training), under the name ``name``: what training adds beyond that help is a
        checkpoint's score with it."""
