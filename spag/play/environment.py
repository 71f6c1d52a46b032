"""Any game of :mod:`spag.game` as a plain two-player environment, for engines that drive games themselves.

The play engine (:mod:`spag.play.engine`) advances many games in lock-step; an RL library usually wants one game
behind ``reset``/``step``. :class:`GameEnvironment` is that, made of the same parts, so a game played
through it is the game the engine plays: the prompt each player is given (:meth:`PlayConfig.prompt`),
when a game ends (:meth:`PlayConfig.is_over`), who won (the game's judge), and the episode record it
leaves (:mod:`spag.game.episodes`).

``reset(target)`` starts a game and returns the first :class:`Observation` (the opening role to move and
its prompt); ``step(utterance)`` adds the mover's utterance (said as given: a caller that samples raw model
text makes an utterance of it first, as the engine does with :meth:`spag.game.base.Game.utterance`) and
returns the next observation, or, when the game is over, the outcome and each role's reward
(:func:`role_rewards`).

The rewards are the zero-sum ones of online self-play (:mod:`spag.train.online`), set by the ``online``
section (:class:`spag.config.Online`): the winner ``+win_reward``, the loser ``-win_reward``, nobody
anything in a tie; the player who breaks the rules (Adversarial Taboo: the attacker who says the word) gets
``-foul_game_penalty`` and its opponent nothing, since the judge names no winner there. SPIRAL scores an
invalid move -1.5, below a loss, so that breaking the rules is never the better way out of a game one is
losing. In a game played for chips (Kuhn poker) ``reward.payoff: chips`` pays each role its chips instead
(:func:`episode_rewards`, :meth:`spag.game.base.Game.chips`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spag.config import CHIPS, WINS, Online
from spag.game.base import Game
from spag.play.engine import PlayConfig


def role_rewards(game: Game, outcome: str, win_reward: float, foul_game_penalty: float) -> dict:
    """Each role's reward for a judged ``outcome`` of ``game``: zero-sum ``±win_reward`` for a decided game,
    0 for a tie, ``-foul_game_penalty`` for the role that broke the rules (its opponent 0)."""
    winner, offender = game.sides(outcome)
    rewards = dict.fromkeys(game.roles, 0.0)
    if winner is not None:
        rewards.update({winner: win_reward, game.other(winner): -win_reward})
    if offender is not None:
        rewards[offender] = -foul_game_penalty
    return rewards


def episode_rewards(game: Game, episode: Mapping, online: Online, payoff: str = WINS) -> dict:
    """Each role's reward for a played ``episode`` of ``game``: with ``payoff`` chips the chips it won or lost
    (:meth:`spag.game.base.Game.chips`), otherwise :func:`role_rewards` of its outcome by ``online``'s settings."""
    if payoff == CHIPS:
        return game.of_episode(episode).chips(episode["target_word"], episode["history"])
    return role_rewards(game, episode["outcome"], online.win_reward, online.foul_game_penalty)


@dataclass(frozen=True)
class Observation:
    """Whose move it is, what that player is asked (the text of one user message), and the game so far."""

    role: str
    prompt: str
    history: tuple[Mapping, ...]


@dataclass(frozen=True)
class Step:
    """What one move led to: the next observation, or (``done``) the outcome and each role's reward."""

    observation: Observation | None
    done: bool
    outcome: str | None = None
    rewards: dict = field(default_factory=dict)


class GameEnvironment:
    """One game at a time, the game and its settings those of ``config`` (default: Adversarial Taboo), the
    rewards those of ``online`` (default: the schema's), or the chips won with ``payoff`` chips."""

    def __init__(self, config: PlayConfig | None = None, online: Online | None = None, payoff: str = WINS):
        self.config = config or PlayConfig()
        self.online = online or Online()
        self.payoff = payoff
        self.word: str | None = None
        self.history: list[dict] = []
        self.done = True

    def reset(self, target_word: str) -> Observation:
        """Start a game on ``target_word`` (the game's target): the opening role moves first."""
        self.word, self.history, self.done = target_word, [], False
        return self._observation()

    def step(self, utterance: str) -> Step:
        """The player to move says ``utterance``."""
        if self.done:
            raise RuntimeError("the game is over: call reset() to start another")
        self.history.append({"role": self.config.game.next_role(self.history), "content": utterance})
        if not self.config.is_over(self.word, self.history):
            return Step(self._observation(), done=False)
        self.done = True
        episode = self.episode()
        return Step(
            None,
            done=True,
            outcome=episode["outcome"],
            rewards=episode_rewards(self.config.game, episode, self.online, self.payoff),
        )

    def verdict(self):
        return self.config.game.judge(self.word, self.history)

    def episode(self) -> dict:
        """The game as an episode record (the fields the judge and the analysis read)."""
        verdict = self.verdict()
        return {
            "target_word": self.word,
            "max_turns": self.config.game.max_turns,
            "history": list(self.history),
            "outcome": verdict.outcome,
            "turns": verdict.turns,
            **self.config.game.record(),
        }

    def _observation(self) -> Observation:
        role = self.config.game.next_role(self.history)
        return Observation(role, self.config.prompt(role, self.word, self.history), tuple(self.history))
