"""The self-play engine: many games advanced together, turn by turn, whatever the game (:mod:`spag.game`).

Up to ``batch_size`` games are live at once. Each step one player answers every live game that waits
for it, in one call (when the same model plays both sides, both roles' prompts go in that call); the
player with the most games waiting goes first. After each step the game says which games are over (its
judge decided, or ``2 * max_turns`` utterances were said: :meth:`spag.game.base.Game.is_over`); a
finished game leaves at once and a game for the next target takes its place. :func:`play_matches` plays
several matches on the same words this way together (an evaluation's model against its opponent in both
roles), so a player answers the turns of all of them in one call.

Finished episodes are written as Parquet shards (``OUT/shard-00000.parquet``, ...; under several ranks
``shard-r1-00000.parquet``) each time ``batch_size`` of them are ready and when the run stops, however
it stops (an error, Ctrl-C). Every shard is written atomically, so a killed run loses at most the games
in flight and fewer than ``batch_size`` finished ones; ``resume=True`` plays exactly the words that have
no episode yet. Each episode records its word's index in the word list, every setting that changes
its games, and a content hash of each player's model (:mod:`spag.runtime.fingerprint`): resuming after the list,
a setting or a model changed (a retrain to the same path) says so and plays every game again, instead of
passing off the old games as the new model's.

A game's strategies (Adversarial Taboo's coached attacker, foul retries, dictionary guess) are off by
default: they are for a weak teacher whose winning games become imitation data, and for baselines. They
wrap the players (:meth:`spag.game.base.Game.speaker`); the engine only asks each player's speaker for its
turns. The episodes' layout on disk (shards, schema) is :mod:`spag.game.episodes`.

Sampling seeds are derived per game and utterance (run seed, word index, utterance number), so a game
plays the same whatever other games share its batch, and a resumed run matches an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from spag.config import Sampling, describe
from spag.game.base import Game, Stops
from spag.game.episodes import SETTINGS_CHECKED_ON_RESUME, EpisodeStore, episode_settings
from spag.game.registry import DEFAULT_GAME, game_class
from spag.models.devices import hf_rank_device, local_rank, pin_rank_to_gpus
from spag.players import close_player, load_player
from spag.players.base import Player, Reply, Speaker, Turn, derive_seed
from spag.players.provenance import machine, player_provenance, record
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import progress
from spag.runtime.errors import DataError, StaleEpisodes
from spag.runtime.fingerprint import model_fingerprint, settings_fingerprint
from spag.runtime.signals import uninterrupted
from spag.schema import Section


@dataclass
class PlayConfig:
    """The games a model plays: the ``game`` (its settings), how each utterance is sampled (``sampling``: a
    play, teacher or evaluate section, or any :class:`~spag.config.Sampling`), the run's ``seed`` and the
    game's ``strategies`` the players use (None: none on). It holds the validated sections themselves;
    :meth:`of` builds one from knobs by name, for code and tests that set a few."""

    game: Game = field(default_factory=lambda: game_class(DEFAULT_GAME)())
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    strategies: Section | None = None

    def __post_init__(self):
        if self.strategies is None:
            self.strategies = self.game.Strategies()
        elif not isinstance(self.strategies, self.game.Strategies):
            raise ValueError(
                f"strategies: {type(self.strategies).__name__} are not the strategies of {self.game.name}"
            )

    @classmethod
    def of(cls, game: str | Game = DEFAULT_GAME, seed: int = 0, **knobs) -> PlayConfig:
        """A PlayConfig of ``game`` (a name: its default settings) with ``knobs`` set, each in the section
        that declares it (the game's settings, sampling, strategies); ValueError for one none declares."""
        if isinstance(game, str):
            game = game_class(game)()
        sections = (type(game.settings), Sampling, game.Strategies)
        values: tuple[dict, dict, dict] = ({}, {}, {})
        for key, value in knobs.items():
            owner = next((i for i, section in enumerate(sections) if key in section.model_fields), None)
            if owner is None or key == "name":
                raise ValueError(
                    f"{key}: not a setting of the game {game.name}, of sampling or of its strategies"
                )
            values[owner][key] = value
        made = []
        for section, given in zip(sections, ({**game.settings.model_dump(), **values[0]}, *values[1:])):
            try:
                made.append(section.model_validate(given))
            except ValidationError as exc:
                key, message = describe(exc.errors()[0], section)
                raise ValueError(f"{key}: {message}") from None
        return cls(type(game)(made[0]), made[1], seed, made[2])

    def to_json(self) -> dict:
        """The settings as JSON (a job file for a launched process): :meth:`from_json` reads them back."""
        return {
            "game": self.game.settings.model_dump(mode="json"),
            "seed": self.seed,
            "sampling": {name: getattr(self.sampling, name) for name in Sampling.model_fields},
            "strategies": self.strategies.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: dict) -> PlayConfig:
        game = game_class(data["game"]["name"])
        return cls(
            game(game.Settings.model_validate(data["game"])),
            Sampling.model_validate(data["sampling"]),
            data["seed"],
            game.Strategies.model_validate(data["strategies"]),
        )

    def prompt(self, role: str, word: str, history: Sequence[dict]) -> str:
        """What ``role`` is asked after ``history``: the game's prompt."""
        return self.game.prompt(role, word, history, self.strategies)

    def is_over(self, word: str, history: Sequence[dict]) -> bool:
        return self.game.is_over(word, history)

    def opening_lines(
        self,
        attacker: Player,
        words: list[str],
        *,
        show_progress: bool = False,
        said: OpeningLines | None = None,
    ) -> list[str]:
        """The opening utterance on each word: what :func:`play_games` would have ``attacker`` (the role
        that opens) say first, with the same seeds and the strategies it plays with, without playing the
        rest of the game. ``said``: replies asked before, read instead of asked again, and where the new
        ones are kept (:class:`OpeningLines`)."""
        opening = self.game.speaker(attacker, (self.game.roles[0],), self.strategies, seed=self.seed)
        games = [_Game(index=i, word=w) for i, w in enumerate(words)]
        self._speak_once(opening, games, "opening lines", "line", show_progress, said)
        return [g.history[0]["content"] for g in games]

    def next_utterances(
        self, player: Player, states: Sequence[tuple[str, Sequence[dict]]], *, show_progress: bool = False
    ) -> list[dict]:
        """What ``player`` says next in each game state ``(target, history)``, as :func:`play_games` would
        have it say there (the speaker and strategies it plays with, empty replies resampled), with the
        seeds of a game numbered by its state's position: the utterance records (``content``,
        ``n_tokens``, ``truncated``), in order."""
        speaker = self.game.speaker(player, self.game.roles, self.strategies, seed=self.seed)
        games = [_Game(index=i, word=w, history=list(h)) for i, (w, h) in enumerate(states)]
        self._speak_once(speaker, games, "replies", "reply", show_progress)
        return [g.history[-1] for g in games]

    def _speak_once(
        self,
        speaker,
        games: list[_Game],
        desc: str,
        unit: str,
        show_progress: bool,
        said: OpeningLines | None = None,
    ) -> None:
        """One utterance added to each game by ``speaker``, a batch of ``batch_size`` games at a time."""
        stats, size = PlayStats(), self.sampling.batch_size
        with progress(total=len(games), desc=desc, unit=unit, disable=not show_progress) as bar:
            for start in range(0, len(games), size):
                batch = games[start : start + size]
                _speak(speaker, batch, self, stats, said)
                bar.update(len(batch))


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
    resampled_fouls: int = 0  # of those, replies a strategy rejected (a rule-breaking line)
    given_replies: int = 0  # turns a strategy answered without the model (Taboo's dictionary guess)
    seconds: float = 0.0
    provenance: dict = field(
        default_factory=dict
    )  # how the players ran, on what (spag.players.provenance.record)

    def line(self) -> str:
        rate = self.games / self.seconds if self.seconds else 0.0
        tokens = self.generated_tokens / self.seconds if self.seconds else 0.0
        outcomes = ", ".join(f"{o} {n}" for o, n in self.outcomes.items())
        text = (
            f"{self.games} games ({outcomes}) in {self.seconds:.1f}s: {rate:.2f} games/s, "
            f"{self.generated_tokens} tokens generated ({tokens:.1f} tokens/s); "
            f"{self.empty_replies} empty replies, {self.truncated_replies} truncated at max_new_tokens"
        )
        if self.resampled_replies:
            text += f", {self.resampled_replies} resampled"
            if self.resampled_fouls:
                text += f" ({self.resampled_fouls} for breaking the rules)"
        if self.given_replies:
            text += f", {self.given_replies} said by a strategy without the model"
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


def _existing_for(
    words: Sequence[str], existing: list[dict], source, config: PlayConfig, models: dict[str, str]
) -> dict[int, dict]:
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
            raise StaleEpisodes(
                source,
                i,
                f"word {episode['target_word']!r} at index {index} does not match "
                "the word list (was the list changed?)",
            )
        for key in SETTINGS_CHECKED_ON_RESUME:
            if episode.get(key) != expected[key]:
                raise StaleEpisodes(
                    source, i, f"was played with {key}={episode.get(key)!r}, this run has {expected[key]!r}"
                )
        done.setdefault(index, episode)
    return done


def drop_stale_episodes(
    output, words: Sequence[str], config: PlayConfig, attacker_model: str, defender_model: str
) -> None:
    """Remove the episodes in the folder ``output`` when they cannot be resumed (other words, settings or
    models), saying so: what a single process does with ``stale="restart"``, done once before several ranks
    start (a rank never removes another's shards)."""
    store = EpisodeStore(output)
    if not store.has_own_shards():
        return
    models = {
        "attacker_model": attacker_model,
        "defender_model": defender_model,
        "attacker_fingerprint": model_fingerprint(attacker_model),
        "defender_fingerprint": model_fingerprint(defender_model),
    }
    try:
        _existing_for(words, store.read(), output, config, models)
    except StaleEpisodes as exc:
        print(f"note: {exc}; playing every game again", file=sys.stderr, flush=True)
        store.drop_own()


def _fingerprint_of(player: Player) -> str:
    """The content hash of the player's model (set by load_player), else a hash of its name."""
    return getattr(player, "fingerprint", None) or model_fingerprint(player.name)


def _speak(
    speaker: Speaker,
    games: list[_Game],
    config: PlayConfig,
    stats: PlayStats,
    openings: OpeningLines | None = None,
) -> None:
    """One utterance for each game from ``speaker`` (:func:`_speak_together` with one part)."""
    _speak_together([(speaker, games, stats)], config, openings)


@dataclass
class _Part:
    """The games one speaker answers in a step (:func:`_speak_together`), and how far they are."""

    speaker: Speaker
    games: list
    stats: PlayStats
    turns: list
    prompts: list
    todo: list
    attempts: int  # the most it is asked: 1 + retries (empty replies, rejections)
    min_new: int
    results: dict = field(default_factory=dict)


def _waiting_parts(
    parts: Sequence[tuple[Speaker, list[_Game], PlayStats]], config: PlayConfig
) -> list[_Part]:
    """The turns the speakers answer without the model said at once; the others, part by part, to be asked."""
    sampling = config.sampling
    waiting: list[_Part] = []
    for speaker, games, stats in parts:
        turns = [_turn(g, config) for g in games]
        given = speaker.given(turns)
        for game, turn, text in zip(games, turns, given):
            if text is not None:
                _say(game, turn.role, text, 0, False, stats)
                stats.given_replies += 1
        asked = [i for i, text in enumerate(given) if text is None]
        if asked:
            games, turns = [games[i] for i in asked], [turns[i] for i in asked]
            waiting.append(
                _Part(
                    speaker,
                    games,
                    stats,
                    turns,
                    [speaker.prompt(t) for t in turns],
                    list(range(len(games))),
                    max(sampling.empty_retries, speaker.resamples) + 1,
                    sampling.min_new_tokens,
                )
            )
    return waiting


def _replies(
    calls: dict[tuple, list[_Part]], config: PlayConfig, stops, attempt: int, openings: OpeningLines | None
) -> dict[int, list]:
    """Each part's replies (by ``id(part)``) of this attempt: one call per player and minimum length, every
    game with its own seed; opening prompts asked before are read from ``openings``."""
    replies: dict[int, list] = {}
    for together in calls.values():
        ask = _Ask(together[0].speaker.player, config.sampling, together[0].min_new, stops)
        prompts, seeds, opening = [], [], []
        for part in together:
            for i in part.todo:
                game = part.games[i]
                prompts.append(part.prompts[i])
                seeds.append(derive_seed(config.seed, game.index, len(game.history), attempt))
                opening.append(not game.history)
        answered = ask(prompts, seeds) if openings is None else openings.replies(ask, prompts, seeds, opening)
        for part in together:
            replies[id(part)], answered = answered[: len(part.todo)], answered[len(part.todo) :]
    return replies


def _speak_together(
    parts: Sequence[tuple[Speaker, list[_Game], PlayStats]],
    config: PlayConfig,
    openings: OpeningLines | None = None,
) -> None:
    """One utterance for each game of every part ``(speaker, games, stats)``, in one call per player.

    Empty replies are resampled up to ``empty_retries`` times, utterances the speaker rejects up to its
    ``resamples`` times, in the same attempts; turns the speaker answers without the model come first.
    The prompts of parts whose speakers ask the same player (two matches of one model, or its two roles)
    go to it together, attempt by attempt: a reply depends on its prompt and seed only (the module
    docstring), so each game says what it would have said alone. ``openings``: replies to games' opening
    prompts asked before, read instead of asked again.
    """
    sampling = config.sampling
    waiting = _waiting_parts(parts, config)
    stops = config.game.stops()
    for attempt in range(max((part.attempts for part in waiting), default=0)):
        asking = [part for part in waiting if part.todo and attempt < part.attempts]
        if not asking:
            break
        # One call per player and minimum reply length (a part that had empty replies asks for more).
        calls: dict[tuple, list[_Part]] = {}
        for part in asking:
            calls.setdefault((id(part.speaker.player), part.min_new), []).append(part)
        replies = _replies(calls, config, stops, attempt, openings)
        for part in asking:
            again, empty, stats = [], False, part.stats
            for i, reply in zip(part.todo, replies[id(part)]):
                part.games[i].generated_tokens += reply.n_tokens
                stats.generated_tokens += reply.n_tokens
                text = part.speaker.utterance(part.turns[i], config.game.utterance(reply.text))
                part.results[i] = (text, reply)
                if not text and attempt < sampling.empty_retries:
                    again.append(i)
                    empty = True
                elif text and attempt < part.speaker.resamples and part.speaker.rejects(part.turns[i], text):
                    again.append(i)
                    stats.resampled_fouls += 1
            stats.resampled_replies += len(again)
            part.todo = again
            if empty:
                part.min_new = min(
                    sampling.max_new_tokens, 2 * part.min_new + 2
                )  # a little more before it may stop
    for part in waiting:
        for i, game in enumerate(part.games):
            text, reply = part.results[i]
            _say(game, part.turns[i].role, text, reply.n_tokens, reply.truncated, part.stats)


@dataclass(frozen=True)
class _Ask:
    """One call of a player's ``generate`` with a turn's sampling settings, for some prompts and seeds."""

    player: Player
    sampling: Sampling
    min_new_tokens: int
    stops: Stops

    def __call__(self, prompts: list[str], seeds: list[int]) -> list:
        s = self.sampling
        return self.player.generate(
            prompts,
            temperature=s.temperature,
            top_k=s.top_k,
            max_new_tokens=s.max_new_tokens,
            min_new_tokens=self.min_new_tokens,
            seed=seeds,
            stop=self.stops.strings,
            stop_pattern=self.stops.pattern,
        )


class OpeningLines:
    """The replies players gave to games' opening prompts, by player, prompt, seed and sampling settings.

    An evaluation plays one player against several opponents on the same words and seeds; the line that
    opens a game is said before the opponent speaks, so it is the same in each match. Passed to
    :func:`play_games` for the matches of one evaluation, it lets each be generated once (a reply is a
    function of its prompt and seed: see the module docstring). Only opening prompts are kept: an
    evaluation's words times its seeds, whatever the games' length.

    A player is known by its model's content and how it runs (backend, engine, device, dtype:
    :func:`spag.players.provenance.player_provenance`), so two players of one model share their lines.
    :meth:`write` keeps the lines for a later process and :meth:`read` takes them back there, on the same
    machine and library versions only (:func:`spag.players.provenance.machine`): the pipeline generates
    the imitation model's opening lines once, for its skill metrics, and every later stage that plays it
    on the evaluation words reads them; the base model's clue lines are the base-teacher baseline's openings.
    """

    def __init__(self, said: dict | None = None):
        self._said: dict[tuple, Reply] = dict(said or {})
        self._identities: dict[int, tuple[Player, str]] = {}  # the player held, so no other takes its id

    def __len__(self) -> int:
        return len(self._said)

    def _identity(self, player: Player) -> str:
        held = self._identities.get(id(player))
        if held is None or held[0] is not player:
            identity = json.dumps(
                {"model": _fingerprint_of(player), **player_provenance(player)}, sort_keys=True
            )
            held = self._identities[id(player)] = (player, identity)
        return held[1]

    def _keys(self, ask: _Ask, prompts: list[str], seeds: list[int], opening: list[bool]) -> list:
        s = ask.sampling
        settings = (
            s.temperature,
            s.top_k,
            s.max_new_tokens,
            ask.min_new_tokens,
            tuple(ask.stops.strings),
            ask.stops.pattern,
        )
        who = self._identity(ask.player)
        return [
            (who, settings_fingerprint(prompt), seed, settings) if first else None
            for prompt, seed, first in zip(prompts, seeds, opening)
        ]

    def holds(self, ask: _Ask, prompts: list[str], seeds: list[int]) -> bool:
        """Whether ``ask``'s replies to these opening prompts are all kept (nothing to ask the model)."""
        return all(key in self._said for key in self._keys(ask, prompts, seeds, [True] * len(prompts)))

    def replies(self, ask: _Ask, prompts: list[str], seeds: list[int], opening: list[bool]) -> list:
        """``ask``'s replies to ``prompts``; those of the prompts that open a game (``opening``) that were
        asked before with the same player, seed and settings are read, not asked again."""
        keys = self._keys(ask, prompts, seeds, opening)
        new = [i for i, key in enumerate(keys) if key not in self._said]  # None is never a key
        asked = dict(zip(new, ask([prompts[i] for i in new], [seeds[i] for i in new]))) if new else {}
        for i, reply in asked.items():
            if keys[i] is not None:
                self._said[keys[i]] = reply
        return [asked[i] if i in asked else self._said[keys[i]] for i in range(len(prompts))]

    def write(self, path: str | os.PathLike) -> None:
        """Every kept reply, with the machine it was generated on, to the JSON file ``path`` (atomically; a
        file already there only as ``replace`` allows: :func:`spag.runtime.atomic.atomic_path`)."""
        records = [
            {
                "player": who,
                "prompt_hash": prompt,
                "seed": seed,
                "settings": list(settings),
                "text": reply.text,
                "n_tokens": int(reply.n_tokens),
                "finish_reason": reply.finish_reason,
            }
            for (who, prompt, seed, settings), reply in self._said.items()
        ]
        write_json_atomic(path, {"machine": machine(), "replies": records})

    @classmethod
    def read(cls, *paths: str | os.PathLike) -> OpeningLines:
        """The replies :meth:`write` kept in ``paths`` (several players' lines in one object); none of a file
        written on another machine or library versions (they are generated again). DataError naming the
        record for a malformed file."""
        said: dict = {}
        for path in paths:
            said.update(cls._read_one(path))
        return cls(said)

    @staticmethod
    def _read_one(path: str | os.PathLike) -> dict:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DataError(path, None, f"cannot read the opening lines ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("replies"), list):
            raise DataError(path, None, "not an opening-lines file: no 'replies' list")
        if data.get("machine") != json.loads(json.dumps(machine())):
            print(
                f"note: {path} was written on another machine or library versions; its opening lines are "
                "generated again",
                file=sys.stderr,
                flush=True,
            )
            return {}
        said = {}
        for i, r in enumerate(data["replies"]):
            try:
                stops, pattern = r["settings"][4], r["settings"][5]
                settings = (*r["settings"][:4], tuple(stops), pattern)
                key = (str(r["player"]), str(r["prompt_hash"]), int(r["seed"]), settings)
                said[key] = Reply(str(r["text"]), int(r["n_tokens"]), str(r["finish_reason"]))
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise DataError(path, i, f"not an opening-line record ({exc!r})") from None
        return said


def _turn(game: _Game, config: PlayConfig) -> Turn:
    role = config.game.next_role(game.history)
    return Turn(
        role,
        game.word,
        game.history,
        config.prompt(role, game.word, game.history),
        derive_seed(config.seed, game.index, len(game.history), 0),
    )


def _say(game: _Game, role: str, text: str, n_tokens: int, truncated: bool, stats: PlayStats) -> None:
    if not text:
        game.empty_replies += 1
        stats.empty_replies += 1
    if truncated:
        game.truncated_replies += 1
        stats.truncated_replies += 1
    game.history.append(
        {"role": role, "content": text, "n_tokens": int(n_tokens), "truncated": bool(truncated)}
    )
    stats.utterances += 1


def _episode(game: _Game, config: PlayConfig, models: dict[str, str]) -> dict:
    verdict = config.game.judge(game.word, game.history)
    return {
        "target_word": game.word,
        "word_index": game.index,
        "history": game.history,
        "outcome": verdict.outcome,
        "turns": verdict.turns,
        **models,
        **episode_settings(config),
        "generated_tokens": game.generated_tokens,
        "empty_replies": game.empty_replies,
        "truncated_replies": game.truncated_replies,
    }


def play_games(
    attacker: Player,
    defender: Player,
    words: list[str],
    config: PlayConfig,
    *,
    output: str | Path | None = None,
    resume: bool = False,
    show_progress: bool = True,
    stats: PlayStats | None = None,
    guess_words: Sequence[str] | None = None,
    overwrite: bool = False,
    stale: str = "refuse",
    shard_by_rank: bool = True,
    openings: OpeningLines | None = None,
) -> list[dict]:
    """Play one game per target word (this rank's share of ``words``, or all of them without
    ``shard_by_rank``: a process that chose its own words); return the judged episodes.

    With ``output``, episodes are written incrementally (see the module docstring) and, with
    ``resume``, episodes already there are kept and returned with the new ones, in word order.
    ``stats`` (optional) is filled in for a summary line. ``guess_words`` is the game's public vocabulary,
    for a strategy that chooses among the targets (Adversarial Taboo's dictionary guess). The output is the
    caller's to claim (:func:`spag.harness.plays.claimed_episodes`); ``overwrite`` replaces the episodes a
    previous run of this process wrote there.
    Episodes kept from a run with other words, settings or models are never reused: with ``stale="refuse"``
    (``spag play --resume``) the run stops and says why, so no game is thrown away unasked; with
    ``"restart"`` (a pipeline stage, re-run because something changed) every game is played again.
    ``openings``: the opening lines of an evaluation's other matches
    (:class:`OpeningLines`), shared with them.
    """
    [episodes] = play_matches(
        [Match(attacker, defender, output, stats)],
        words,
        config,
        resume=resume,
        show_progress=show_progress,
        guess_words=guess_words,
        overwrite=overwrite,
        stale=stale,
        shard_by_rank=shard_by_rank,
        openings=openings,
    )
    return episodes


@dataclass
class Match:
    """One match of :func:`play_matches`: the player who opens every game, the one who answers, where its
    episodes go (None: nowhere) and the statistics it fills in (None: its own)."""

    attacker: Player
    defender: Player
    output: str | Path | None = None
    stats: PlayStats | None = None


def play_matches(
    matches: Sequence[Match],
    words: list[str],
    config: PlayConfig,
    *,
    resume: bool = False,
    show_progress: bool = True,
    guess_words: Sequence[str] | None = None,
    overwrite: bool = False,
    stale: str = "refuse",
    shard_by_rank: bool = True,
    openings: OpeningLines | None = None,
) -> list[list[dict]]:
    """Several matches on the same ``words`` played together: each match's episodes, as :func:`play_games`
    would return them (the options mean what they mean there; each match has its own output).

    The matches move on in steps together, and a player answers the turns of every match in one call (an
    evaluation's model against its opponent in both roles: two calls a step instead of four). Each game
    says what it would have said in its match alone (a reply depends on its prompt and seed only), so
    only the time changes: a decoding step costs a CPU about as much for a few rows as for a few dozen.
    Up to ``batch_size`` games of each match are live at once.
    """
    rank, world = rank_and_world() if shard_by_rank else (0, 1)
    tables = []
    for match in matches:
        store = None if match.output is None else EpisodeStore(match.output, rank, world)
        tables.append(
            _Table.start(
                match,
                store,
                words,
                config,
                rank,
                world,
                resume=resume,
                overwrite=overwrite,
                stale=stale,
                guess_words=guess_words,
            )
        )
    return _play_tables(
        tables, words, config, f"play r{rank}" if world > 1 else "play", show_progress, openings
    )


@dataclass
class _Table:
    """A match of :func:`play_matches` under way: its speakers, the games in play and its episodes."""

    attacking: Speaker
    defending: Speaker
    models: dict
    store: EpisodeStore | None
    stats: PlayStats
    kept: list  # episodes resumed from the output
    pending: deque  # word indices still to play, in order
    live: list = field(default_factory=list)
    new: list = field(default_factory=list)
    unwritten: list = field(default_factory=list)

    @classmethod
    def start(
        cls,
        match: Match,
        store: EpisodeStore | None,
        words: list[str],
        config: PlayConfig,
        rank: int,
        world: int,
        *,
        resume: bool,
        overwrite: bool,
        stale: str,
        guess_words: Sequence[str] | None,
    ) -> _Table:
        """The match with its output (None: no output) claimed and locked; this process plays the words of
        index ``rank`` modulo ``world``."""
        attacker, defender = match.attacker, match.defender
        stats = match.stats if match.stats is not None else PlayStats()
        stats.outcomes.update(dict.fromkeys(config.game.outcomes, 0))  # the summary line names every outcome
        stats.provenance = record(attacker=attacker, defender=defender)
        attacking, defending = speakers(attacker, defender, config, guess_words)
        models = {
            "attacker_model": attacker.name,
            "defender_model": defender.name,
            "attacker_fingerprint": _fingerprint_of(attacker),
            "defender_fingerprint": _fingerprint_of(defender),
        }
        mine = [i for i in range(len(words)) if i % world == rank]
        done = (
            {}
            if store is None
            else _claim_and_resume(
                store, words, config, models, world, resume=resume, overwrite=overwrite, stale=stale
            )
        )
        kept = [done[i] for i in mine if i in done]
        stats.resumed = len(kept)
        return cls(attacking, defending, models, store, stats, kept, deque(i for i in mine if i not in done))

    def deal(self, words: list[str], batch_size: int) -> None:
        """Fill the table up to ``batch_size`` live games: a finished game's place goes to the next word."""
        while len(self.live) < batch_size and self.pending:
            index = self.pending.popleft()
            self.live.append(_Game(index=index, word=words[index]))

    def turns(self, config: PlayConfig) -> list[tuple[Speaker, list[_Game], PlayStats]]:
        """Who speaks in each live game now: (speaker, its games, the match's statistics)."""
        if self.attacking is self.defending:
            return [(self.attacking, self.live, self.stats)]
        # Split before anyone speaks: a game whose attacker just spoke waits for the next step.
        opener = config.game.roles[0]
        attacking = [g for g in self.live if config.game.next_role(g.history) == opener]
        defending = [g for g in self.live if config.game.next_role(g.history) != opener]
        return [
            (speaker, games, self.stats)
            for speaker, games in ((self.attacking, attacking), (self.defending, defending))
            if games
        ]

    def collect(self, config: PlayConfig) -> int:
        """Judge the games that are over, keep their episodes (written every ``batch_size``); how many."""
        still, finished = [], 0
        for game in self.live:
            if config.is_over(game.word, game.history):
                episode = _episode(game, config, self.models)
                self.new.append(episode)
                self.unwritten.append(episode)
                self.stats.games += 1
                self.stats.outcomes[episode["outcome"]] += 1
                finished += 1
            else:
                still.append(game)
        self.live = still
        if len(self.unwritten) >= config.sampling.batch_size:
            with uninterrupted():  # a signal now must not write these games twice (in a later flush)
                self.flush()
        return finished

    def flush(self) -> None:
        """Write the finished games not written yet (nothing without an output)."""
        if self.store is not None and self.unwritten:
            self.store.append(self.unwritten)
            self.unwritten = []


def _next_turns(
    turns: list[tuple[Speaker, list[_Game], PlayStats]], config: PlayConfig, openings: OpeningLines | None
) -> list[tuple[Speaker, list[_Game], PlayStats]]:
    """Which of the waiting ``turns`` (speaker, games, statistics) are answered in this step.

    Opening lines kept in ``openings`` go first, alone: they cost nothing, and the games they open then
    wait for their next speaker beside the others. Otherwise the player with the most games waiting for
    it answers all of them, in every match; the others wait a step and gather more games meanwhile (two
    matches of the same players in opposite roles fall into step, one utterance apart).
    """
    if openings is not None:
        sampling, stops = config.sampling, config.game.stops()
        kept = [
            turn
            for turn in turns
            if all(not g.history for g in turn[1])
            and openings.holds(
                _Ask(turn[0].player, sampling, sampling.min_new_tokens, stops),
                [turn[0].prompt(_turn(g, config)) for g in turn[1]],
                [derive_seed(config.seed, g.index, 0, 0) for g in turn[1]],
            )
        ]
        if kept:
            return kept
    waiting: dict[int, list] = {}
    for turn in turns:
        waiting.setdefault(id(turn[0].player), []).append(turn)
    return max(waiting.values(), key=lambda those: sum(len(games) for _, games, _ in those))


def _play_tables(
    tables: list[_Table],
    words: list[str],
    config: PlayConfig,
    desc: str,
    show_progress: bool,
    openings: OpeningLines | None,
) -> list[list[dict]]:
    """Play every table's games to the end, all tables a step at a time; each table's episodes, in word order."""
    start = time.perf_counter()
    bar = progress(
        total=sum(len(t.pending) for t in tables), desc=desc, unit="game", disable=not show_progress
    )
    try:
        while True:
            for table in tables:
                table.deal(words, config.sampling.batch_size)
            playing = [t for t in tables if t.live]
            if not playing:
                break
            _speak_together(
                _next_turns([turn for t in playing for turn in t.turns(config)], config, openings),
                config,
                openings,
            )
            for table in playing:
                bar.update(table.collect(config))
            elapsed = time.perf_counter() - start
            bar.set_postfix(
                tok_s=f"{sum(t.stats.generated_tokens for t in tables) / max(elapsed, 1e-9):.0f}",
                empty=sum(t.stats.empty_replies for t in tables),
                refresh=False,
            )
    finally:
        # Whatever stopped the run, the finished games are kept.
        for table in tables:
            table.flush()
            table.stats.seconds = time.perf_counter() - start
        bar.close()
    return [sorted(t.kept + t.new, key=lambda e: e["word_index"]) for t in tables]


def _claim_and_resume(
    store: EpisodeStore,
    words: list[str],
    config: PlayConfig,
    models: dict[str, str],
    world: int,
    *,
    resume: bool,
    overwrite: bool,
    stale: str,
) -> dict[int, dict]:
    """The episodes the output already holds that this run may keep, by word index (none unless
    ``resume``; with ``overwrite`` and no ``resume`` this process's earlier ones are removed); episodes from
    other words, settings or models are refused or, with ``stale="restart"`` on one process, dropped so
    every game is played again."""
    output = store.path
    if overwrite and not resume:
        store.drop_own()
    if not resume and store.has_own_shards():
        raise DataError(
            output, None, "already holds episodes: pass resume (--resume) to continue, or choose a new output"
        )
    existing = store.read() if resume else []
    try:
        done = _existing_for(words, existing, output, config, models)
    except StaleEpisodes as exc:
        if world > 1 or stale == "refuse":  # other ranks may be reading these shards: the user must choose
            raise DataError(
                output, None, f"{exc}: resume with the same settings, or --overwrite to play every game again"
            ) from None
        print(f"note: {exc}; playing every game again", file=sys.stderr, flush=True)
        store.drop_own()
        existing, done = [], {}
    if store.single_file:
        store.keep(existing)
    return done


def speakers(
    attacker: Player, defender: Player, config: PlayConfig, vocabulary: Sequence[str] | None = None
) -> tuple[Speaker, Speaker]:
    """(the opening role's speaker, the other's), with the strategies of ``config`` (a player that brings
    its own keeps them); one speaker for both roles when both are the same player, so that their turns go
    in one batch."""
    game, options = config.game, {"seed": config.seed, "vocabulary": vocabulary}
    if attacker is defender:
        both = game.speaker(attacker, game.roles, config.strategies, **options)
        return both, both
    return (
        game.speaker(attacker, game.roles[:1], config.strategies, **options),
        game.speaker(defender, game.roles[1:], config.strategies, **options),
    )


def place_rank(backend: str, player_options: dict) -> None:
    """Under a launcher, put this rank's engine on its own GPU(s) (:mod:`spag.models.devices`): the hf backend on
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


def run_games(
    attacker_model: str,
    defender_model: str,
    words: list[str],
    config: PlayConfig,
    *,
    backend: str = "hf",
    output=None,
    resume: bool = False,
    show_progress: bool = True,
    stats: PlayStats | None = None,
    guess_words: Sequence[str] | None = None,
    overwrite: bool = False,
    stale: str = "refuse",
    **player_options,
) -> list[dict]:
    """Load the players (once when both sides are the same model) and play (``output`` claimed by the
    caller before: :func:`spag.harness.plays.claimed_episodes`)."""
    place_rank(backend, player_options)
    attacker = load_player(attacker_model, backend, **player_options)
    try:
        defender = (
            attacker
            if defender_model == attacker_model
            else load_player(defender_model, backend, **player_options)
        )
    except BaseException:
        close_player(attacker)
        raise
    try:
        return play_games(
            attacker,
            defender,
            words,
            config,
            output=output,
            resume=resume,
            show_progress=show_progress,
            stats=stats,
            guess_words=guess_words,
            overwrite=overwrite,
            stale=stale,
        )
    finally:
        close_player(attacker, defender)
