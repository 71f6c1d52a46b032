"""Teacher strategies: how a small base model still plays games that each role wins.

Imitation learning copies a teacher's winning games, so the teacher must win both roles. GPT-4 does
(the paper's teacher); a 135M model playing itself does not: its attacker says the word or rambles,
and its defender never guesses right. Three strategies, switched on in the teacher's params, make such a
teacher good enough without telling a player anything it could not know:

* **coached attacker** (``coached_attacker``): the attacker's line is the model's answer to a
  plain request to describe its word (prompt distillation: the training rows still pair that line
  with the ordinary game prompt). Any form of the word in the answer is blanked out before it is
  said: the attacker knows its word and may censor itself.
* **foul retries** (``foul_retries``): an attacker line that would lose the game by the rules
  is sampled again, up to that many times.
* **dictionary guess** (``final_guess``): at its last turn the defender always guesses. It
  ranks every word of a public word list (the game's vocabulary, not the target) by how much more
  likely the model finds it after "I know the word! It is" given the conversation than given no
  conversation (pointwise mutual information, which cancels the model's bias towards a few common
  words), and says the best one.

A fourth, **word filter**, is a decode-time filter rather than a teacher's help: every form of the target
word left in an attacker line (after the foul retries) is blanked out, so the attacker never says it.
And **examples** puts worked examples in the play prompt.

Which are on is a :class:`TabooStrategies` section (``teacher.strategies`` in a params file). Each strategy
is a wrapper around a :class:`spag.players.base.Speaker` (a player as the play engine uses it), so the
engine plays with whatever it is given; :func:`speaker` builds them from the strategies the game is played
with, or, for a player wrapped in :class:`WithStrategies` (a baseline that needs no training), from the
player's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from spag.game.taboo.card import TabooStrategies
from spag.game.taboo.outcomes import ATTACKER, ATTACKER_BREAKS_RULES, DEFENDER
from spag.game.taboo.prompts import build_prompt, play_template
from spag.game.taboo.rules import PREDICTION_PHRASE, blank_word
from spag.players.base import Player, Speaker, Turn

BLANK = "___"

_FIRST_CLUE = 'Describe the word "{word}" in one short sentence without writing the word itself.'
_NEXT_CLUE = (
    'Describe the word "{word}" in one short sentence without writing the word itself. '
    "Say something different from: {said}"
)


def coaching_prompt(word: str, said: Sequence[str]) -> str:
    """What the coached attacker is asked: a one-sentence description, new at each turn."""
    if not said:
        return _FIRST_CLUE.format(word=word)
    return _NEXT_CLUE.format(word=word, said=" / ".join(said))


def blank_out(text: str, word: str) -> str:
    """``text`` with every form of ``word`` that the judge would see replaced by ``___``."""
    return blank_word(text, word, BLANK)


class DictionaryGuesser:
    """The defender's last-turn guess: the vocabulary word the conversation makes most likely (PMI).

    Words are scored by the log-probability of their first token; words sharing a first token are told
    apart by their place in the vocabulary (more frequent first). Needs a player with
    ``next_token_logprobs`` (the hf and vllm backends).
    """

    def __init__(self, player, vocabulary: Sequence[str], max_turns: int, template):
        if not hasattr(player, "next_token_logprobs"):
            raise ValueError(
                "the dictionary guess needs the hf or vllm backend (a player with next_token_logprobs)"
            )
        import torch

        self.player, self.max_turns, self.template = player, max_turns, template
        tokenizer = player.tokenizer
        first: dict[int, str] = {}
        for word in vocabulary:
            ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
            if ids and word.isalpha():
                first.setdefault(ids[0], word)  # the more frequent word keeps a shared first token
        if not first:
            raise ValueError("the guess vocabulary is empty")
        self.token_ids = torch.tensor(list(first))
        self.words = list(first.values())
        silent = build_prompt(DEFENDER, "", [], max_turns, template)
        self.prior = player.next_token_logprobs([silent], PREDICTION_PHRASE, token_ids=self.token_ids)[0]

    def guess(self, histories: Sequence[Sequence[dict]]) -> list[str]:
        prompts = [build_prompt(DEFENDER, "", h, self.max_turns, self.template) for h in histories]
        if not prompts:
            return []
        scores = (
            self.player.next_token_logprobs(prompts, PREDICTION_PHRASE, token_ids=self.token_ids) - self.prior
        )
        return [self.words[int(i)] for i in scores.argmax(dim=1)]

    @staticmethod
    def utterance(word: str) -> str:
        return f"{PREDICTION_PHRASE} {word}."


# ------------------------------------------------------------------------------------ the wrappers


class Strategy(Speaker):
    """A speaker that changes one step of the speaker it wraps and passes the others on."""

    def __init__(self, inner: Speaker):
        super().__init__(inner.player)
        self.inner = inner

    @property
    def resamples(self) -> int:
        return self.inner.resamples

    def prompt(self, turn: Turn) -> str:
        return self.inner.prompt(turn)

    def utterance(self, turn: Turn, text: str) -> str:
        return self.inner.utterance(turn, text)

    def rejects(self, turn: Turn, text: str) -> bool:
        return self.inner.rejects(turn, text)

    def given(self, turns: Sequence[Turn]) -> list[str | None]:
        return self.inner.given(turns)


class CoachedAttacker(Strategy):
    """Attacker turns: the model describes its word when asked plainly; the first line is said, blanked."""

    def prompt(self, turn: Turn) -> str:
        if turn.role != ATTACKER:
            return self.inner.prompt(turn)
        return coaching_prompt(turn.word, [u["content"] for u in turn.history if u["role"] == ATTACKER])

    def utterance(self, turn: Turn, text: str) -> str:
        text = self.inner.utterance(turn, text)
        return blank_out(text.split("\n")[0].strip(), turn.word) if turn.role == ATTACKER else text


class FoulRetries(Strategy):
    """An attacker line that would lose the game by the rules at once is sampled again (``retries`` times)."""

    def __init__(self, inner: Speaker, retries: int, game):
        super().__init__(inner)
        self.retries, self.game = retries, game

    @property
    def resamples(self) -> int:
        return max(self.retries, self.inner.resamples)

    def rejects(self, turn: Turn, text: str) -> bool:
        if self.inner.rejects(turn, text):
            return True
        if turn.role != ATTACKER:
            return False
        history = [*turn.history, {"role": ATTACKER, "content": text}]
        return self.game.judge(turn.word, history).outcome == ATTACKER_BREAKS_RULES


class WordFilter(Strategy):
    """Attacker lines have every form of the target word blanked out: the line can no longer say it."""

    def utterance(self, turn: Turn, text: str) -> str:
        text = self.inner.utterance(turn, text)
        return blank_out(text, turn.word) if turn.role == ATTACKER else text


class FinalGuess(Strategy):
    """The defender's last turn is its dictionary guess (:class:`DictionaryGuesser`), not a sample."""

    def __init__(self, inner: Speaker, guesser: DictionaryGuesser):
        super().__init__(inner)
        self.guesser = guesser

    def given(self, turns: Sequence[Turn]) -> list[str | None]:
        said = self.inner.given(turns)
        last = [
            i
            for i, turn in enumerate(turns)
            if said[i] is None
            and turn.role == DEFENDER
            and len(turn.history) == 2 * self.guesser.max_turns - 1
        ]
        for i, word in zip(last, self.guesser.guess([turns[i].history for i in last])):
            said[i] = self.guesser.utterance(word)
        return said


def label(strategies: TabooStrategies) -> str:
    """``coached_attacker+foul_retries=2+final_guess``: what a player's name says of its strategies."""
    order = ("coached_attacker", "foul_retries", "word_filter", "final_guess", "examples")
    values = [(name, getattr(strategies, name)) for name in order]
    return "+".join(name if value is True else f"{name}={value}" for name, value in values if value) or "none"


class WithStrategies:
    """A player that always plays with its own strategies, whatever the game's config says: a baseline.

    It speaks through the player it wraps (every attribute is that player's) under a name of its own
    (``model+strategies``), which the episodes record, so a resumed run never mixes its games with the
    plain model's.
    """

    def __init__(self, player: Player, strategies: TabooStrategies, name: str | None = None):
        self.player, self.strategies = player, strategies
        self.name = name or f"{player.name}+{label(strategies)}"

    def __getattr__(self, attribute):
        return getattr(self.player, attribute)


def speaker(
    game,
    player: Player,
    roles: Sequence[str],
    strategies: TabooStrategies,
    vocabulary: Sequence[str] | None = None,
) -> Speaker:
    """``player`` as a speaker of ``roles`` in ``game`` (a :class:`~spag.game.taboo.Taboo`), with the
    ``strategies`` for those roles, or a :class:`WithStrategies` player's own. ``vocabulary``: the words the
    dictionary guess chooses from."""
    chosen = player.strategies if isinstance(player, WithStrategies) else strategies
    model = player.player if isinstance(player, WithStrategies) else player
    wrapped = Speaker(model)
    if ATTACKER in roles and chosen.coached_attacker:
        wrapped = CoachedAttacker(wrapped)
    if ATTACKER in roles and chosen.foul_retries:
        wrapped = FoulRetries(wrapped, chosen.foul_retries, game)
    if ATTACKER in roles and chosen.word_filter:
        wrapped = WordFilter(wrapped)
    if DEFENDER in roles and chosen.final_guess:
        if not vocabulary:
            raise ValueError("final_guess needs the game's vocabulary: the words the defender guesses from")
        template = play_template(game.settings.templates, examples=strategies.examples)
        wrapped = FinalGuess(wrapped, DictionaryGuesser(model, vocabulary, game.max_turns, template))
    return wrapped
