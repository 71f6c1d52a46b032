"""Teacher strategies: how a small base model still plays games that each role wins.

Imitation learning copies a teacher's winning games, so the teacher must win both roles. GPT-4 does
(the paper's teacher); a 135M model playing itself does not: its attacker says the word or rambles,
and its defender never guesses right. Two strategies, switched on in the teacher's params, make such a
teacher good enough without telling a player anything it could not know (a third, resampling attacker
lines that break the rules, is ``PlayConfig.foul_retries`` in the play engine):

* **coached attacker** (``PlayConfig.coached_attacker``): the attacker's line is the model's answer to a
  plain request to describe its word (prompt distillation: the training rows still pair that line
  with the ordinary game prompt). Any form of the word in the answer is blanked out before it is
  said: the attacker knows its word and may censor itself.
* **dictionary guess** (``PlayConfig.final_guess``): at its last turn the defender always guesses. It
  ranks every word of a public word list (the game's vocabulary, not the target) by how much more
  likely the model finds it after "I know the word! It is" given the conversation than given no
  conversation (pointwise mutual information, which cancels the model's bias towards a few common
  words), and says the best one.
"""

from __future__ import annotations

from collections.abc import Sequence

from spag.game.prompts import build_prompt
from spag.game.rules import DEFENDER, PREDICTION_PHRASE, blank_word

BLANK = "___"

_FIRST_CLUE = 'Describe the word "{word}" in one short sentence without writing the word itself.'
_NEXT_CLUE = ('Describe the word "{word}" in one short sentence without writing the word itself. '
              "Say something different from: {said}")


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
    ``next_token_logprobs`` (the hf backend).
    """

    def __init__(self, player, vocabulary: Sequence[str], max_turns: int, template):
        if not hasattr(player, "next_token_logprobs"):
            raise ValueError("the dictionary guess needs the hf backend (a player with next_token_logprobs)")
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
        self.prior = player.next_token_logprobs([silent], PREDICTION_PHRASE)[0, self.token_ids]

    def guess(self, histories: Sequence[Sequence[dict]]) -> list[str]:
        prompts = [build_prompt(DEFENDER, "", h, self.max_turns, self.template) for h in histories]
        if not prompts:
            return []
        scores = self.player.next_token_logprobs(prompts, PREDICTION_PHRASE)[:, self.token_ids] - self.prior
        return [self.words[int(i)] for i in scores.argmax(dim=1)]

    @staticmethod
    def utterance(word: str) -> str:
        return f"{PREDICTION_PHRASE} {word}."
