"""The self-play engine: many games of Adversarial Taboo advanced together, turn by turn.

Up to ``batch_size`` games are live at once. Each step asks every live game's next speaker for one
utterance, all in one call per player (when the same model plays both sides, attacker and defender
prompts of a step go in one batch). After each step the judge (:func:`spag.game.rules.judge`) looks at
every game; a game it decides, or one that reached ``2 * max_turns`` utterances, leaves at once and a
game for the next target word takes its place. (With ``end="guess-phrase"``, the original's rule, a game
stops only after a defender line saying "i know the word" or after all its turns, and is judged then.)

Finished episodes are written as Parquet shards (``OUT/shard-00000.parquet``, ...; under several ranks
``shard-r1-00000.parquet``) each time ``batch_size`` of them are ready and when the run stops, however
it stops (an error, Ctrl-C). Every shard is written atomically, so a killed run loses at most the games
in flight and fewer than ``batch_size`` finished ones; ``resume=True`` plays exactly the words that have
no episode yet. Each episode records its word's index in the word list, every setting that changes
its games, and a content hash of each player's model (:mod:`spag.fingerprint`): resuming after the list,
a setting or a model changed (a retrain to the same path) says so and plays every game again, instead of
passing off the old games as the new model's.

Teacher strategies (``foul_retries``, ``coached_attacker``, ``final_guess``) are off by default: they
are for a weak teacher whose winning games become imitation data. They wrap the players
(:mod:`spag.teacher`); the engine only asks each player's speaker for its turns. The episodes' layout
on disk (shards, schema) is :mod:`spag.game.episodes`.

Sampling seeds are derived per game and utterance (run seed, word index, utterance number), so a game
plays the same whatever other games share its batch, and a resumed run matches an uninterrupted one.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spag.config import Game, Sampling, Teacher, check, default
from spag.console import progress
from spag.devices import hf_rank_device, local_rank, pin_rank_to_gpus
from spag.fingerprint import model_fingerprint
from spag.game.episodes import SETTINGS_CHECKED_ON_RESUME, EpisodeStore, episode_settings
from spag.game.original_prompts import play_query
from spag.game.prompts import Template, build_prompt, next_role, play_template
from spag.game.rules import ATTACKER, OUTCOMES, judge
from spag.io import DataError
from spag.outputs import writing
from spag.players import close_player, load_player
from spag.players.base import STOP_STRINGS, Player, Speaker, Turn, clean_reply, derive_seed
from spag.provenance import record
from spag.signals import uninterrupted
from spag.teacher import speaker, speakers

# Everything an episode depends on: a kept episode must match all of them, or the run plays again.
GUESS_PHRASE = "i know the word"  # game.end: guess-phrase stops a game after a defender line with it


@dataclass
class PlayConfig:
    max_turns: int = default(Game, "max_turns")
    temperature: float = default(Sampling, "temperature")  # 0 means greedy
    top_k: int = default(Sampling, "top_k")
    max_new_tokens: int = default(Sampling, "max_new_tokens")
    min_new_tokens: int = default(Sampling, "min_new_tokens")
    seed: int = 0
    batch_size: int = default(Sampling, "batch_size")
    examples: bool = False        # worked examples in the play prompt, for a weak teacher
    empty_retries: int = 2        # resamples of a reply that comes back empty
    # Teacher strategies (off in self-play; see spag.teacher):
    foul_retries: int = 0         # resamples of an attacker utterance that breaks the rules
    coached_attacker: bool = False  # attacker lines describe the word when asked to, the word blanked out
    final_guess: bool = False     # the defender's last utterance is a dictionary guess
    rules: str = default(Game, "rules")  # the judge's rule set: whole-word, or original (the original code's)
    templates: str | None = default(Game, "templates")  # a templates file; None: the shipped one
    play_prompts: str = default(Game, "play_prompts")  # templates, or original (the original's play prompt)
    replies: str = default(Game, "replies")  # clean, or raw (the decoded reply as it is)
    end: str = default(Game, "end")  # decided (stop once judged), or guess-phrase (the original's)

    def __post_init__(self):
        check(Game, max_turns=self.max_turns, rules=self.rules, templates=self.templates,
              play_prompts=self.play_prompts, replies=self.replies, end=self.end)
        check(Teacher, temperature=self.temperature, top_k=self.top_k, max_new_tokens=self.max_new_tokens,
              min_new_tokens=self.min_new_tokens, batch_size=self.batch_size, examples=self.examples,
              foul_retries=self.foul_retries, coached_attacker=self.coached_attacker, final_guess=self.final_guess)
        if self.empty_retries < 0:
            raise ValueError(f"empty_retries: must be >= 0, got {self.empty_retries!r}")

    @classmethod
    def from_sections(cls, game: Game, sampling: Sampling, seed: int, **strategies) -> PlayConfig:
        """The games ``sampling`` (a play, teacher or evaluate section) plays in ``game``: the one place a
        PlayConfig is assembled from settings. A teacher section brings its strategies; ``strategies``
        override them."""
        if isinstance(sampling, Teacher):
            strategies = {**sampling.strategies(), **strategies}
        return cls(max_turns=game.max_turns, rules=game.rules, templates=game.templates,
                   play_prompts=game.play_prompts, replies=game.replies, end=game.end, seed=seed,
                   temperature=sampling.temperature, top_k=sampling.top_k,
                   max_new_tokens=sampling.max_new_tokens, min_new_tokens=sampling.min_new_tokens,
                   empty_retries=sampling.empty_retries, batch_size=sampling.batch_size, **strategies)

    @property
    def template(self) -> Template:
        return play_template(self.templates, examples=self.examples)

    def prompt(self, role: str, word: str, history: Sequence[dict]) -> str:
        """What ``role`` is asked after ``history``: the templates' prompt or the original's."""
        if self.play_prompts == "original":
            return play_query(history, word, self.max_turns)
        return build_prompt(role, word, history, self.max_turns, self.template)

    def is_over(self, word: str, history: Sequence[dict]) -> bool:
        """Whether a game stops here: all its turns played, or (``end``) the judge decided / a defender
        line said the guess phrase."""
        if len(history) >= 2 * self.max_turns:
            return True
        if self.end == "guess-phrase":
            last = history[-1] if history else None
            return last is not None and last["role"] != ATTACKER and GUESS_PHRASE in last["content"].lower()
        return judge(word, history, self.max_turns, self.rules).decided


@dataclass
class PlayStats:
    """What a run did, for the progress bar and the summary line."""

    games: int = 0
    resumed: int = 0
    outcomes: Counter = field(default_factory=Counter)
    utterances: int = 0
    generated_tokens: int = 0
    empty_replies: int = 0
    truncated_replies: int = 0
    resampled_replies: int = 0
    resampled_fouls: int = 0
    final_guesses: int = 0
    seconds: float = 0.0
    provenance: dict = field(default_factory=dict)  # how the players ran, on what (spag.provenance.record)

    def line(self) -> str:
        rate = self.games / self.seconds if self.seconds else 0.0
        tokens = self.generated_tokens / self.seconds if self.seconds else 0.0
        outcomes = ", ".join(f"{o} {self.outcomes.get(o, 0)}" for o in OUTCOMES)
        text = (f"{self.games} games ({outcomes}) in {self.seconds:.1f}s: {rate:.2f} games/s, "
                f"{self.generated_tokens} tokens generated ({tokens:.1f} tokens/s); "
                f"{self.empty_replies} empty replies, {self.truncated_replies} truncated at max_new_tokens")
        if self.resampled_replies:
            text += f", {self.resampled_replies} resampled"
            if self.resampled_fouls:
                text += f" ({self.resampled_fouls} for breaking the rules)"
        if self.final_guesses:
            text += f", {self.final_guesses} final guesses"
        if self.resumed:
            text += f"; {self.resumed} episodes kept from before"
        return text


# ---------------------------------------------------------------------------------------------- ranks


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) under torchrun / accelerate launch; (0, 1) otherwise."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"bad RANK={rank} / WORLD_SIZE={world}")
    return rank, world


# ---------------------------------------------------------------------------------------------- games


@dataclass
class _Game:
    index: int
    word: str
    history: list = field(default_factory=list)
    generated_tokens: int = 0
    empty_replies: int = 0
    truncated_replies: int = 0


class StaleEpisodes(DataError):
    """Episodes kept from an earlier run that this run cannot reuse (other words, settings or models)."""


def _existing_for(words: Sequence[str], existing: list[dict], source, config: PlayConfig,
                  models: dict[str, str]) -> dict[int, dict]:
    """Already played episodes by word index, checked against the word list, the settings and the models'
    content; raises StaleEpisodes on the first that does not match."""
    expected = {**episode_settings(config), **models}
    done: dict[int, dict] = {}
    for i, episode in enumerate(existing):
        index = episode.get("word_index")
        if index is None:
            raise StaleEpisodes(source, i, "has no 'word_index', so it cannot be matched to the word list")
        index = int(index)
        if index >= len(words) or words[index] != episode["target_word"]:
            raise StaleEpisodes(source, i, f"word {episode['target_word']!r} at index {index} does not match "
                                           "the word list (was the list changed?)")
        for key in SETTINGS_CHECKED_ON_RESUME:
            if episode.get(key) != expected[key]:
                raise StaleEpisodes(source, i, f"was played with {key}={episode.get(key)!r}, this run has "
                                               f"{expected[key]!r}")
        done.setdefault(index, episode)
    return done


def drop_stale_episodes(output, words: Sequence[str], config: PlayConfig, attacker_model: str,
                        defender_model: str) -> None:
    """Remove the episodes in the folder ``output`` when they cannot be resumed (other words, settings or
    models), saying so: what a single process does with ``stale="restart"``, done once before several ranks
    start (a rank never removes another's shards)."""
    store = EpisodeStore(output)
    if not store.has_own_shards():
        return
    models = {"attacker_model": attacker_model, "defender_model": defender_model,
              "attacker_fingerprint": model_fingerprint(attacker_model),
              "defender_fingerprint": model_fingerprint(defender_model)}
    try:
        _existing_for(words, store.read(), output, config, models)
    except StaleEpisodes as exc:
        print(f"note: {exc}; playing every game again", file=sys.stderr, flush=True)
        store.claim(overwrite=True, resume=False)


def _fingerprint_of(player: Player) -> str:
    """The content hash of the player's model (set by load_player), else a hash of its name."""
    return getattr(player, "fingerprint", None) or model_fingerprint(player.name)


def _speak(speaker: Speaker, games: list[_Game], config: PlayConfig, stats: PlayStats) -> None:
    """One utterance for each game from ``speaker``.

    Empty replies are resampled up to ``empty_retries`` times, utterances the speaker rejects up to its
    ``resamples`` times, in the same attempts; turns the speaker answers without the model come first.
    """
    turns = [_turn(g, config) for g in games]
    given = speaker.given(turns)
    for game, text in zip(games, given):
        if text is not None:
            _say(game, text, 0, False, stats)
            stats.final_guesses += 1
    waiting = [i for i, text in enumerate(given) if text is None]
    games, turns = [games[i] for i in waiting], [turns[i] for i in waiting]
    if not games:
        return
    prompts = [speaker.prompt(t) for t in turns]
    todo = list(range(len(games)))
    results: dict[int, tuple[str, object]] = {}
    min_new = config.min_new_tokens
    clean = config.replies == "clean"
    stops = STOP_STRINGS if clean else ()  # raw: the reply runs to the end-of-turn token, as the original's
    for attempt in range(max(config.empty_retries, speaker.resamples) + 1):
        seeds = [derive_seed(config.seed, games[i].index, len(games[i].history), attempt) for i in todo]
        replies = speaker.player.generate([prompts[i] for i in todo], temperature=config.temperature,
                                          top_k=config.top_k, max_new_tokens=config.max_new_tokens,
                                          min_new_tokens=min_new, seed=seeds, stop=stops)
        again, empty = [], False
        for i, reply in zip(todo, replies):
            games[i].generated_tokens += reply.n_tokens
            stats.generated_tokens += reply.n_tokens
            text = speaker.utterance(turns[i], clean_reply(reply.text) if clean else reply.text)
            results[i] = (text, reply)
            if not text and attempt < config.empty_retries:
                again.append(i)
                empty = True
            elif text and attempt < speaker.resamples and speaker.rejects(turns[i], text):
                again.append(i)
                stats.resampled_fouls += 1
        if not again:
            break
        stats.resampled_replies += len(again)
        todo = again
        if empty:
            min_new = min(config.max_new_tokens, 2 * min_new + 2)  # ask for a little more before it may stop
    for i, game in enumerate(games):
        text, reply = results[i]
        _say(game, text, reply.n_tokens, reply.truncated, stats)


def _turn(game: _Game, config: PlayConfig) -> Turn:
    role = next_role(game.history)
    return Turn(role, game.word, game.history, config.prompt(role, game.word, game.history))


def _say(game: _Game, text: str, n_tokens: int, truncated: bool, stats: PlayStats) -> None:
    if not text:
        game.empty_replies += 1
        stats.empty_replies += 1
    if truncated:
        game.truncated_replies += 1
        stats.truncated_replies += 1
    game.history.append({"role": next_role(game.history), "content": text, "n_tokens": int(n_tokens),
                         "truncated": bool(truncated)})
    stats.utterances += 1


def _episode(game: _Game, config: PlayConfig, models: dict[str, str]) -> dict:
    verdict = judge(game.word, game.history, config.max_turns, config.rules)
    return {
        "target_word": game.word, "word_index": game.index, "history": game.history, "outcome": verdict.outcome,
        "turns": verdict.turns, **models, **episode_settings(config),
        "generated_tokens": game.generated_tokens, "empty_replies": game.empty_replies,
        "truncated_replies": game.truncated_replies,
    }


def play_games(attacker: Player, defender: Player, words: list[str], config: PlayConfig, *,
               output: str | Path | None = None, resume: bool = False, show_progress: bool = True,
               stats: PlayStats | None = None, guess_words: Sequence[str] | None = None,
               overwrite: bool = False, stale: str = "refuse", shard_by_rank: bool = True) -> list[dict]:
    """Play one game per target word (this rank's share of ``words``, or all of them without
    ``shard_by_rank``: a process that chose its own words); return the judged episodes.

    With ``output``, episodes are written incrementally (see the module docstring) and, with
    ``resume``, episodes already there are kept and returned with the new ones, in word order.
    ``stats`` (optional) is filled in for a summary line. ``guess_words`` is the public vocabulary the
    defender guesses from when ``config.final_guess`` is on. An output directory must be new, empty or a
    previous ``spag play`` output (:mod:`spag.outputs`); ``overwrite`` replaces a previous one's episodes.
    Episodes kept from a run with other words, settings or models are never reused: with ``stale="refuse"``
    (``spag play --resume``) the run stops and says why, so no game is thrown away unasked; with
    ``"restart"`` (a pipeline stage, re-run because something changed) every game is played again.
    One process writes an output (or its rank's part of it) at a time: a second is refused at once
    (:func:`spag.outputs.writing`).
    """
    options = {"resume": resume, "show_progress": show_progress, "stats": stats, "guess_words": guess_words,
               "overwrite": overwrite, "stale": stale}
    rank, world = rank_and_world() if shard_by_rank else (0, 1)
    if output is None:
        return _play_games(attacker, defender, words, config, None, rank, world, **options)
    store = EpisodeStore(output, rank, world)
    with writing(output, store.lock_part()):
        return _play_games(attacker, defender, words, config, store, rank, world, **options)


def _play_games(attacker: Player, defender: Player, words: list[str], config: PlayConfig,
                store: EpisodeStore | None, rank: int, world: int, *, resume: bool, show_progress: bool, stats: PlayStats | None,
                guess_words: Sequence[str] | None, overwrite: bool, stale: str) -> list[dict]:
    """:func:`play_games` with its output store (None: no output) claimed and locked; this process plays the
    words of index ``rank`` modulo ``world``."""
    stats = stats if stats is not None else PlayStats()
    stats.provenance = record(attacker=attacker, defender=defender)
    attacking_speaker, defending_speaker = speakers(attacker, defender, config, guess_words)
    models = {"attacker_model": attacker.name, "defender_model": defender.name,
              "attacker_fingerprint": _fingerprint_of(attacker), "defender_fingerprint": _fingerprint_of(defender)}
    mine = [i for i in range(len(words)) if i % world == rank]
    done = ({} if store is None else
            _claim_and_resume(store, words, config, models, world, resume=resume, overwrite=overwrite, stale=stale))
    kept = [done[i] for i in mine if i in done]
    stats.resumed = len(kept)
    pending_words = [i for i in mine if i not in done]

    new: list[dict] = []
    unwritten: list[dict] = []
    live: list[_Game] = []
    queue = iter(pending_words)
    start = time.perf_counter()
    bar = progress(total=len(pending_words), desc=f"play r{rank}" if world > 1 else "play", unit="game",
                   disable=not show_progress)
    try:
        while True:
            while len(live) < config.batch_size:  # a finished game's place goes to the next word at once
                index = next(queue, None)
                if index is None:
                    break
                live.append(_Game(index=index, word=words[index]))
            if not live:
                break
            _play_one_utterance(attacking_speaker, defending_speaker, live, config, stats)
            still = []
            for game in live:
                if config.is_over(game.word, game.history):
                    episode = _episode(game, config, models)
                    new.append(episode)
                    unwritten.append(episode)
                    stats.games += 1
                    stats.outcomes[episode["outcome"]] += 1
                    bar.update(1)
                else:
                    still.append(game)
            live = still
            elapsed = time.perf_counter() - start
            bar.set_postfix(tok_s=f"{stats.generated_tokens / max(elapsed, 1e-9):.0f}",
                            empty=stats.empty_replies, refresh=False)
            if store is not None and len(unwritten) >= config.batch_size:
                with uninterrupted():  # a signal now must not write these games twice (in the flush below)
                    store.append(unwritten)
                    unwritten = []
    finally:
        # Whatever stopped the run, the finished games are kept.
        if store is not None and unwritten:
            store.append(unwritten)
        bar.close()
        stats.seconds = time.perf_counter() - start
    return sorted(kept + new, key=lambda e: e["word_index"])


def _claim_and_resume(store: EpisodeStore, words: list[str], config: PlayConfig, models: dict[str, str],
                      world: int, *, resume: bool, overwrite: bool, stale: str) -> dict[int, dict]:
    """Claim the output and return the episodes it already holds that this run may keep, by word index
    (none unless ``resume``); episodes from other words, settings or models are refused or, with
    ``stale="restart"`` on one process, dropped so every game is played again."""
    output = store.path
    store.claim(overwrite=overwrite and not resume, resume=resume)
    if not resume and store.has_own_shards():
        raise DataError(output, None, "already holds episodes: pass resume (--resume) to continue, "
                                      "or choose a new output")
    existing = store.read() if resume else []
    try:
        done = _existing_for(words, existing, output, config, models)
    except StaleEpisodes as exc:
        if world > 1 or stale == "refuse":  # other ranks may be reading these shards: the user must choose
            raise DataError(output, None, f"{exc}: resume with the same settings, or --overwrite to play "
                                          "every game again") from None
        print(f"note: {exc}; playing every game again", file=sys.stderr, flush=True)
        store.claim(overwrite=True, resume=False)
        existing, done = [], {}
    if store.single_file:
        store.keep(existing)
    return done


def _play_one_utterance(attacking_speaker: Speaker, defending_speaker: Speaker, live: list[_Game],
                        config: PlayConfig, stats: PlayStats) -> None:
    """Every live game moves on by one utterance, from whichever player's turn it is."""
    if attacking_speaker is defending_speaker:
        _speak(attacking_speaker, live, config, stats)
        return
    # Split before anyone speaks: a game whose attacker just spoke waits for the next step.
    attacking = [g for g in live if next_role(g.history) == ATTACKER]
    defending = [g for g in live if next_role(g.history) != ATTACKER]
    for speaking, turn in ((attacking_speaker, attacking), (defending_speaker, defending)):
        if turn:
            _speak(speaking, turn, config, stats)


def opening_lines(attacker: Player, words: list[str], config: PlayConfig, *, show_progress: bool = False
                  ) -> list[str]:
    """The attacker's first utterance on each word: what :func:`play_games` would have it say first, with
    the same seeds and the strategies it plays with, without playing the rest of the game."""
    attacking = speaker(attacker, (ATTACKER,), config)
    games = [_Game(index=i, word=w) for i, w in enumerate(words)]
    stats = PlayStats()
    with progress(total=len(games), desc="opening lines", unit="line", disable=not show_progress) as bar:
        for start in range(0, len(games), config.batch_size):
            batch = games[start:start + config.batch_size]
            _speak(attacking, batch, config, stats)
            bar.update(len(batch))
    return [g.history[0]["content"] for g in games]


def place_rank(backend: str, player_options: dict) -> None:
    """Under a launcher, put this rank's engine on its own GPU(s) (:mod:`spag.devices`): the hf backend on
    ``cuda:LOCAL_RANK`` (unless a device is given), the vllm backend on the ``tensor_parallel_size`` GPUs
    of its rank, made the only visible ones before vLLM starts (vLLM's "cuda" is GPU 0 of those visible)."""
    rank = local_rank()
    if rank is None:
        return
    if backend == "vllm":
        pin_rank_to_gpus(int(player_options.get("tensor_parallel_size") or 1))
    elif backend == "hf" and player_options.get("device") is None and rank_and_world()[1] > 1:
        import torch

        if torch.cuda.is_available():
            player_options["device"] = hf_rank_device(rank, torch.cuda.device_count())


def run_games(attacker_model: str, defender_model: str, words: list[str], config: PlayConfig, *,
              backend: str = "hf", output=None, resume: bool = False, show_progress: bool = True,
              stats: PlayStats | None = None, guess_words: Sequence[str] | None = None,
              overwrite: bool = False, stale: str = "refuse", **player_options) -> list[dict]:
    """Load the players (once when both sides are the same model) and play."""
    rank, world = rank_and_world()
    if output is not None:  # before minutes of model loading
        EpisodeStore(output, rank, world).check(overwrite=overwrite and not resume, resume=resume)
    place_rank(backend, player_options)
    attacker = load_player(attacker_model, backend, **player_options)
    try:
        defender = attacker if defender_model == attacker_model else load_player(defender_model, backend,
                                                                                  **player_options)
    except BaseException:
        close_player(attacker)
        raise
    try:
        return play_games(attacker, defender, words, config, output=output, resume=resume,
                          show_progress=show_progress, stats=stats, guess_words=guess_words, overwrite=overwrite,
                          stale=stale)
    finally:
        close_player(attacker, defender)
