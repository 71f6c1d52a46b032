"""Skill at Adversarial Taboo that does not depend on the opponent's mistakes.

A game's score mixes what a player does well with what its opponent does badly: an attacker "wins" when
the defender guesses wrong, a defender "wins" when the attacker says the word. Two measurements look at
each role's own skill, on the evaluation words, each a rank of the target among the ``C`` evaluation words
(1 = the target is the most likely word, chance = (C + 1) / 2, lower is better):

- **clue rank** (the attacker's skill): the model's opening lines on each word (the lines it says first
  in an evaluation game, with the same sampling seeds and the strategies it plays with), every form of
  the target blanked out, are read by a fixed *judge model* (the base model). The words are ranked by
  how much the line raises the judge's log-probability of each word after "The secret word is" over the
  same request with an empty description (pointwise mutual information, which cancels the judge's
  preference for a few common words). An informative description puts the target near the top; a line
  that changes the topic, or one whose only clue was the word itself, does not. A line that said the
  word is still scored, blanked, and counted apart as an opening foul.
- **guess rank** (the defender's skill): a fixed set of clue lines (descriptions of each word by the
  base model when asked plainly, the word blanked: :func:`clue_set`) is given to the model as the
  attacker's first line of a game, in the model's own defender prompt; the words are ranked by the
  model's log-probability of each after "I know the word! It is" (its guess distribution).

Both are paired per word against another model (the imitation model) with a bootstrap over words
(:func:`spag.runtime.statistics.paired_difference`); a negative difference is an improvement.
Scoring needs a player that gives log-probabilities: the hf or the vllm backend (``continuation_logprobs``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from spag.game.base import SkillMetrics
from spag.game.taboo.baselines import BASELINES, FILTER, baseline_player
from spag.game.taboo.card import TabooStrategies
from spag.game.taboo.outcomes import ATTACKER, ATTACKER_BREAKS_RULES, DEFENDER
from spag.game.taboo.rules import PREDICTION_PHRASE
from spag.game.taboo.strategies import WithStrategies, blank_out
from spag.runtime.statistics import clustered_mean, paired_difference

JUDGE_REQUEST = 'Someone describes a secret word without saying it: "{clue}"\nWhich word is it?'
JUDGE_OPENING = "The secret word is"


def ranks(scores, targets: Sequence[int]) -> list[float]:
    """The rank of ``targets[i]`` in row ``i`` of ``scores`` (higher score, better rank; 1 is the best;
    ties share the mean of their ranks)."""
    out = []
    for row, target in zip(scores.tolist(), targets):
        mine = row[target]
        above = sum(1 for v in row if v > mine)
        tied = sum(1 for v in row if v == mine) - 1
        out.append(1 + above + tied / 2)
    return out


def _index(candidates: Sequence[str]) -> dict[str, int]:
    if len(set(candidates)) != len(candidates):
        raise ValueError("the candidate words repeat a word")
    return {w: i for i, w in enumerate(candidates)}


def clue_ranks(judge_player, clues: Sequence[tuple[str, str]], candidates: Sequence[str]) -> list[float]:
    """The rank of each clue's target among ``candidates`` by the judge's PMI (see the module docstring).

    ``clues``: ``(target word, line)`` pairs; the line's forms of the target are blanked here."""
    index = _index(candidates)
    prior = judge_player.continuation_logprobs([JUDGE_REQUEST.format(clue="")], JUDGE_OPENING, candidates)[0]
    prompts = [JUDGE_REQUEST.format(clue=blank_out(line, word)) for word, line in clues]
    scores = judge_player.continuation_logprobs(prompts, JUDGE_OPENING, candidates) - prior
    return ranks(scores, [index[word] for word, _ in clues])


def guess_ranks(defender, clues: Sequence[tuple[str, str]], candidates: Sequence[str], config) -> list[float]:
    """The rank of each clue's target among ``candidates`` in ``defender``'s guess distribution after the
    clue as the attacker's first line (``config``: the games' :class:`~spag.play.engine.PlayConfig`, for the
    defender prompt)."""
    index = _index(candidates)
    prompts = [config.prompt(DEFENDER, "", [{"role": ATTACKER, "content": line}]) for _, line in clues]
    scores = defender.continuation_logprobs(prompts, PREDICTION_PHRASE, candidates)
    return ranks(scores, [index[word] for word, _ in clues])


def model_of(player):
    """The model a (possibly strategy-wrapped) player speaks with: what log-probabilities are read from."""
    return player.player if isinstance(player, WithStrategies) else player


def clue_set(base, words: Sequence[str], config, per_word: int, said=None) -> list[dict]:
    """Fixed clue lines for the guess rank: ``per_word`` descriptions of each word by ``base`` when asked
    plainly (the teacher's coached attacker, the word blanked), with seeds ``config.seed``, +1, ...
    ``said`` (:class:`spag.play.engine.OpeningLines`) keeps them as opening lines: the base-teacher
    baseline opens its games with the same coached lines on the same seeds.

    Records ``{target_word, seed, line}``, in word order within each seed."""
    coached = WithStrategies(model_of(base), TabooStrategies(coached_attacker=True), name="clue-writer")
    out = []
    for s in range(per_word):
        lines = replace(config, seed=config.seed + s).opening_lines(coached, list(words), said=said)
        out += [{"target_word": w, "seed": config.seed + s, "line": line} for w, line in zip(words, lines)]
    return out


def _per_word(words: Sequence[str], values: Sequence[float]) -> dict[str, tuple[float, int]]:
    out: dict[str, list] = {}
    for word, value in zip(words, values):
        entry = out.setdefault(word, [0.0, 0])
        entry[0] += value
        entry[1] += 1
    return {w: (s, n) for w, (s, n) in out.items()}


def _mean_entry(per_word: Mapping[str, tuple[float, int]], chance: float, seed: int) -> dict:
    words = sorted(per_word)
    entry = clustered_mean([per_word[w][0] for w in words], [per_word[w][1] for w in words], seed=seed)
    if len(words) < 2:  # a rank's interval has no natural [0, 1] default
        entry["low"], entry["high"] = 1.0, 2 * chance - 1
    return {**entry, "lines": entry.pop("games"), "chance": chance}


def measure_skill(
    player,
    judge_player,
    words: Sequence[str],
    config,
    clues: Sequence[Mapping],
    *,
    lines_per_word: int = 1,
    seed: int = 0,
    openings: Sequence[str] | None = None,
    model_skill: Mapping | None = None,
) -> dict:
    """The clue rank of ``player``'s attacker and the guess rank of its defender on ``words``.

    ``config``: the evaluation's ``PlayConfig`` (sampling, seeds, prompts); ``clues``: the records of
    :func:`clue_set` for these words; ``openings``: the opening lines ``player`` said in the evaluation
    games (seed by seed, words in order), the lines this would generate, so they are not generated again;
    ``model_skill``: this function's result for ``model_of(player)`` on the same words and clues, whose guess
    rank (the model's own guess distribution: no strategy changes it) is then taken as it is.
    Returns ``{clue_rank, guess_rank, opening_foul_rate, candidates, per_word}``, ``per_word`` holding each
    word's ``[sum, count]`` per metric, for paired comparisons.
    """
    candidates = list(words)
    chance = (len(candidates) + 1) / 2
    spoken = candidates * lines_per_word
    if openings is not None:
        if len(openings) != len(spoken):
            raise ValueError(f"{len(openings)} opening lines for {len(spoken)} words and seeds")
        said = list(openings)
    else:
        said = []
        for s in range(lines_per_word):
            said += replace(config, seed=config.seed + s).opening_lines(player, candidates)
    fouls = [
        float(config.game.judge(w, [{"role": ATTACKER, "content": line}]).outcome == ATTACKER_BREAKS_RULES)
        for w, line in zip(spoken, said)
    ]
    clue = _per_word(spoken, clue_ranks(judge_player, list(zip(spoken, said)), candidates))
    known = [c for c in clues if c["target_word"] in set(candidates)]
    guess = _same_guesses(model_skill, candidates, known)
    if guess is None:
        guess = _per_word(
            [c["target_word"] for c in known],
            guess_ranks(model_of(player), [(c["target_word"], c["line"]) for c in known], candidates, config),
        )
    foul = _per_word(spoken, fouls)
    foul_entry = clustered_mean(
        [foul[w][0] for w in sorted(foul)], [foul[w][1] for w in sorted(foul)], seed=seed
    )
    return {
        "clue_rank": _mean_entry(clue, chance, seed),
        "guess_rank": _mean_entry(guess, chance, seed),
        "opening_foul_rate": foul_entry,
        "candidates": len(candidates),
        "opening_lines": [{"target_word": w, "line": line} for w, line in zip(spoken, said)],
        "per_word": {"clue_rank": clue, "guess_rank": guess, "opening_foul_rate": foul},
    }


def _same_guesses(
    model_skill: Mapping | None, candidates: Sequence[str], clues: Sequence[Mapping]
) -> dict[str, tuple[float, int]] | None:
    """The guess rank's per-word sums of ``model_skill`` (a :func:`measure_skill` result, or its JSON) when
    it was measured on these candidates with these clues; else None."""
    if not model_skill:
        return None
    per_word = model_skill.get("per_word", {}).get("guess_rank")
    counts = Counter(c["target_word"] for c in clues)
    if (
        model_skill.get("candidates") != len(candidates)
        or not per_word
        or {w: int(n) for w, (_, n) in per_word.items()} != counts
    ):
        return None
    return {w: (float(total), int(n)) for w, (total, n) in per_word.items()}


SKILL_METRICS = ("clue_rank", "guess_rank", "opening_foul_rate")


def compare_skill(mine: Mapping, reference: Mapping, seed: int = 0) -> dict:
    """Per metric, ``mine - reference`` paired per word with a bootstrap interval (negative ranks: better)."""
    out = {}
    for metric in SKILL_METRICS:
        a = {w: tuple(v) for w, v in mine["per_word"][metric].items()}
        b = {w: tuple(v) for w, v in reference["per_word"][metric].items()}
        out[metric] = paired_difference(a, b, seed=seed)
    return out


class TabooSkill(SkillMetrics):
    """Adversarial Taboo's skill metrics (clue rank, guess rank, opening foul rate; see the module
    docstring) and its no-training baselines (:mod:`spag.game.taboo.baselines`)."""

    metrics = SKILL_METRICS
    baselines = tuple(BASELINES)

    def material(self, game, base, targets, config, per_target, *, said=None):
        return clue_set(base, targets, config, per_target, said=said)

    def measure(
        self,
        game,
        player,
        judge_player,
        targets,
        config,
        material,
        *,
        per_target,
        seed,
        openings=None,
        model_skill=None,
    ):
        return measure_skill(
            player,
            judge_player,
            targets,
            config,
            material,
            lines_per_word=per_target,
            seed=seed,
            openings=openings,
            model_skill=model_skill,
        )

    def compare(self, mine, reference, seed=0):
        return compare_skill(mine, reference, seed)

    def baseline(self, name, players):
        return baseline_player(name, players)

    def baseline_model(self, name):
        return BASELINES[name][0]

    def filtered(self, player, name):
        return WithStrategies(player, FILTER, name=name)
