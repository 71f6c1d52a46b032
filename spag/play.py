"""The self-play engine: many games of Adversarial Taboo advanced together, turn by turn.

Up to ``batch_size`` games are live at once. Each step asks every live game's next speaker for one
utterance, all in one call per player (when the same model plays both sides, attacker and defender
prompts of a step go in one batch). After each step the judge (:func:`spag.game.rules.judge`) looks at
every game; a game it decides, or one that reached ``2 * max_turns`` utterances, leaves at once and a
game for the next target word takes its place.

Finished episodes are written as Parquet shards (``OUT/shard-00000.parquet``, ...; under several ranks
``shard-r1-00000.parquet``) each time ``batch_size`` of them are ready and when the run stops, however
it stops (an error, Ctrl-C). Every shard is written atomically, so a killed run loses at most the games
in flight and fewer than ``batch_size`` finished ones; ``resume=True`` plays exactly the words that have
no episode yet. Each episode records its word's index in the word list, every setting that changes
its games, and a content hash of each player's model (:mod:`spag.fingerprint`): resuming after the list,
a setting or a model changed (a retrain to the same path) says so and plays every game again, instead of
passing off the old games as the new model's.

Teacher strategies (``foul_retries``, ``coached_attacker``, ``final_guess``; see :mod:`spag.teacher`) are
off by default: they are for a weak teacher whose winning games become imitation data.

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

from spag.game.prompts import Template, build_prompt, next_role, play_template
from spag.game.rules import ATTACKER, ATTACKER_BREAKS_RULES, OUTCOMES, WHOLE_WORD, check_rules, judge
from spag.io import DataError
from spag.players.base import STOP_STRINGS, Player, clean_reply, derive_seed
from spag.teacher import DictionaryGuesser, blank_out, coaching_prompt

PLAY_KIND = "play"
# Everything an episode depends on: a kept episode must match all of them, or the run plays again.
SETTINGS_CHECKED_ON_RESUME = ("max_turns", "temperature", "top_k", "max_new_tokens", "min_new_tokens", "seed", "rules",
                              "examples", "foul_retries", "coached_attacker", "final_guess",
                              "attacker_model", "defender_model", "attacker_fingerprint", "defender_fingerprint")


@dataclass
class PlayConfig:
    max_turns: int = 5
    temperature: float = 1.2      # 0 means greedy
    top_k: int = 50
    max_new_tokens: int = 256
    min_new_tokens: int = 2
    seed: int = 0
    batch_size: int = 32
    examples: bool = False        # worked examples in the play prompt, for a weak teacher
    empty_retries: int = 2        # resamples of a reply that comes back empty
    # Teacher strategies (off in self-play; see spag.teacher):
    foul_retries: int = 0         # resamples of an attacker utterance that breaks the rules
    coached_attacker: bool = False  # attacker lines describe the word when asked to, the word blanked out
    final_guess: bool = False     # the defender's last utterance is a dictionary guess
    rules: str = WHOLE_WORD       # the judge's rule set: whole-word, or original (the original code's)
    templates: str | None = None  # a templates file (spag/game/templates.yaml format); None: the shipped one

    def __post_init__(self):
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if self.empty_retries < 0 or self.foul_retries < 0:
            raise ValueError("empty_retries and foul_retries cannot be negative")
        check_rules(self.rules)

    @property
    def template(self) -> Template:
        return play_template(self.templates, examples=self.examples)


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


# ------------------------------------------------------------------------------------------- storage


def _episode_schema():
    import pyarrow as pa

    utterance = pa.struct([("role", pa.string()), ("content", pa.string()), ("n_tokens", pa.int64()),
                           ("truncated", pa.bool_())])
    return pa.schema([
        ("target_word", pa.string()), ("word_index", pa.int64()), ("max_turns", pa.int64()),
        ("history", pa.list_(utterance)), ("outcome", pa.string()), ("turns", pa.int64()),
        ("attacker_model", pa.string()), ("defender_model", pa.string()),
        ("attacker_fingerprint", pa.string()), ("defender_fingerprint", pa.string()), ("temperature", pa.float64()),
        ("top_k", pa.int64()), ("max_new_tokens", pa.int64()), ("min_new_tokens", pa.int64()),
        ("seed", pa.int64()), ("examples", pa.bool_()), ("foul_retries", pa.int64()),
        ("coached_attacker", pa.bool_()), ("final_guess", pa.bool_()), ("generated_tokens", pa.int64()),
        ("empty_replies", pa.int64()), ("truncated_replies", pa.int64()), ("rules", pa.string()),
    ])


class EpisodeStore:
    """Episodes on disk: a directory of Parquet shards, or one Parquet file rewritten atomically."""

    def __init__(self, output: str | os.PathLike, rank: int = 0, world: int = 1):
        self.path = Path(output)
        self.single_file = self.path.suffix == ".parquet"
        self.rank, self.world = rank, world
        if self.single_file and world > 1:
            raise ValueError("several ranks need a directory output, not one .parquet file")
        self._kept: list[dict] = []

    def _shard_prefix(self) -> str:
        return "shard-" if self.world == 1 else f"shard-r{self.rank}-"

    def check(self, overwrite: bool, resume: bool) -> None:
        """Refuse a directory that is not ours to write (:mod:`spag.outputs`); changes nothing."""
        from spag.outputs import claim_output_dir

        if not self.single_file:
            # Under several ranks the others' shards are expected here: only a foreign folder is refused.
            claim_output_dir(self.path, PLAY_KIND, overwrite=overwrite, resume=resume or self.world > 1)

    def claim(self, overwrite: bool, resume: bool) -> None:
        """:meth:`check`, then with ``overwrite`` drop our own episodes (this rank's shards, or the file)."""
        self.check(overwrite, resume)
        if overwrite and self.single_file:
            self.path.unlink(missing_ok=True)
        elif overwrite:
            for shard in self.path.glob(self._shard_prefix() + "*.parquet"):
                shard.unlink()

    def read(self) -> list[dict]:
        """Every episode already written (all ranks' shards, so a run may change its world size)."""
        from spag.game.episodes import read_episodes

        if not self.path.exists():
            return []
        if self.path.is_dir() and not any(self.path.glob("*.parquet")):
            return []
        return read_episodes(self.path)

    def has_own_shards(self) -> bool:
        """Whether this rank (or a single-process run) already wrote here; other ranks may be writing."""
        if self.single_file:
            return self.path.exists()
        prefix = "shard-" if self.world == 1 else self._shard_prefix()
        return self.path.is_dir() and any(self.path.glob(prefix + "*.parquet"))

    def append(self, episodes: list[dict]) -> None:
        from spag.io import write_table_atomic

        if not episodes:
            return
        schema = _episode_schema()
        if self.single_file:
            self._kept.extend(episodes)
            write_table_atomic(self.path, self._kept, schema=schema)
            return
        from spag.outputs import MARKER, mark_output_dir

        if not (self.path / MARKER).exists():  # marked with its first shard: a failed start leaves nothing
            mark_output_dir(self.path, PLAY_KIND)
        prefix = self._shard_prefix()
        numbers = [int(p.stem[len(prefix):]) for p in self.path.glob(prefix + "*.parquet")
                   if p.stem[len(prefix):].isdigit()]
        shard = self.path / f"{prefix}{max(numbers, default=-1) + 1:05d}.parquet"
        write_table_atomic(shard, episodes, schema=schema)

    def keep(self, episodes: list[dict]) -> None:
        """Episodes already in a single-file output, kept when it is rewritten."""
        self._kept = list(episodes)


def to_original_format(episode: dict) -> dict:
    """The original project's episode shape: target word, max turns, and the bare history."""
    return {
        "target_word": episode["target_word"],
        "max_turns": int(episode["max_turns"]),
        "history": [{"role": u["role"], "content": u["content"]} for u in episode["history"]],
    }


def export_json(episodes: Sequence[dict], path: str | os.PathLike) -> None:
    from spag.io import write_json_atomic

    write_json_atomic(path, [to_original_format(e) for e in episodes])


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
    expected = {**{k: getattr(config, k) for k in SETTINGS_CHECKED_ON_RESUME if hasattr(config, k)}, **models}
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


def _fingerprint_of(player: Player) -> str:
    """The content hash of the player's model (set by load_player), else a hash of its name."""
    from spag.fingerprint import model_fingerprint

    return getattr(player, "fingerprint", None) or model_fingerprint(player.name)


def _speak(player: Player, games: list[_Game], config: PlayConfig, stats: PlayStats,
           guesser: DictionaryGuesser | None = None) -> None:
    """One utterance for each game from ``player``.

    Empty replies are resampled up to ``empty_retries`` times, attacker utterances that break the rules
    up to ``foul_retries`` times; with a ``guesser`` the defender's last utterance is its guess.
    """
    if guesser is not None:
        at_last_turn = [len(g.history) == 2 * config.max_turns - 1 for g in games]
        last = [g for g, is_last in zip(games, at_last_turn) if is_last]
        for game, word in zip(last, guesser.guess([g.history for g in last])):
            _say(game, guesser.utterance(word), 0, False, stats)
            stats.final_guesses += 1
        games = [g for g, is_last in zip(games, at_last_turn) if not is_last]
    if not games:
        return
    prompts = [_prompt(g, config) for g in games]
    todo = list(range(len(games)))
    results: dict[int, tuple[str, object]] = {}
    min_new = config.min_new_tokens
    for attempt in range(max(config.empty_retries, config.foul_retries) + 1):
        seeds = [derive_seed(config.seed, games[i].index, len(games[i].history), attempt) for i in todo]
        replies = player.generate([prompts[i] for i in todo], temperature=config.temperature,
                                  top_k=config.top_k, max_new_tokens=config.max_new_tokens,
                                  min_new_tokens=min_new, seed=seeds, stop=STOP_STRINGS)
        again, empty = [], False
        for i, reply in zip(todo, replies):
            games[i].generated_tokens += reply.n_tokens
            stats.generated_tokens += reply.n_tokens
            text = clean_reply(reply.text)
            if config.coached_attacker and next_role(games[i].history) == ATTACKER:
                text = blank_out(text.split("\n")[0].strip(), games[i].word)
            results[i] = (text, reply)
            if not text and attempt < config.empty_retries:
                again.append(i)
                empty = True
            elif text and attempt < config.foul_retries and _breaks_rules(games[i], text, config):
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


def _prompt(game: _Game, config: PlayConfig) -> str:
    role = next_role(game.history)
    if config.coached_attacker and role == ATTACKER:
        return coaching_prompt(game.word, [u["content"] for u in game.history if u["role"] == ATTACKER])
    return build_prompt(role, game.word, game.history, config.max_turns, config.template)


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


def _breaks_rules(game: _Game, text: str, config: PlayConfig) -> bool:
    """Whether the attacker's utterance ``text`` would lose the game by the rules at once."""
    if next_role(game.history) != ATTACKER:
        return False
    history = [*game.history, {"role": ATTACKER, "content": text}]
    return judge(game.word, history, config.max_turns, config.rules).outcome == ATTACKER_BREAKS_RULES


def _episode(game: _Game, config: PlayConfig, models: dict[str, str]) -> dict:
    verdict = judge(game.word, game.history, config.max_turns, config.rules)
    return {
        "target_word": game.word, "word_index": game.index, "max_turns": config.max_turns,
        "history": game.history, "outcome": verdict.outcome, "turns": verdict.turns, **models,
        "temperature": float(config.temperature), "top_k": int(config.top_k),
        "max_new_tokens": int(config.max_new_tokens), "min_new_tokens": int(config.min_new_tokens),
        "seed": int(config.seed), "examples": bool(config.examples),
        "foul_retries": int(config.foul_retries), "coached_attacker": bool(config.coached_attacker),
        "final_guess": bool(config.final_guess), "rules": config.rules,
        "generated_tokens": game.generated_tokens, "empty_replies": game.empty_replies,
        "truncated_replies": game.truncated_replies,
    }


def play_games(attacker: Player, defender: Player, words: list[str], config: PlayConfig, *,
               output: str | Path | None = None, resume: bool = False, show_progress: bool = True,
               stats: PlayStats | None = None, guess_words: Sequence[str] | None = None,
               overwrite: bool = False) -> list[dict]:
    """Play one game per target word (this rank's share of ``words``); return the judged episodes.

    With ``output``, episodes are written incrementally (see the module docstring) and, with
    ``resume``, episodes already there are kept and returned with the new ones, in word order.
    ``stats`` (optional) is filled in for a summary line. ``guess_words`` is the public vocabulary the
    defender guesses from when ``config.final_guess`` is on. An output directory must be new, empty or a
    previous ``spag play`` output (:mod:`spag.outputs`); ``overwrite`` replaces a previous one's episodes.
    """
    from spag.console import progress

    stats = stats if stats is not None else PlayStats()
    guesser = None
    if config.final_guess:
        if not guess_words:
            raise ValueError("final_guess needs guess_words: the vocabulary the defender guesses from")
        guesser = DictionaryGuesser(defender, guess_words, config.max_turns, config.template)
    rank, world = rank_and_world()
    models = {"attacker_model": attacker.name, "defender_model": defender.name,
              "attacker_fingerprint": _fingerprint_of(attacker), "defender_fingerprint": _fingerprint_of(defender)}
    mine = [i for i in range(len(words)) if i % world == rank]

    store = EpisodeStore(output, rank, world) if output is not None else None
    done: dict[int, dict] = {}
    if store is not None:
        store.claim(overwrite=overwrite and not resume, resume=resume)
        if not resume and store.has_own_shards():
            raise DataError(output, None, "already holds episodes: pass resume (--resume) to continue, "
                                          "or choose a new output")
        existing = store.read() if resume else []
        try:
            done = _existing_for(words, existing, output, config, models)
        except StaleEpisodes as exc:
            if world > 1:  # other ranks may be reading these shards: the user must choose
                raise DataError(output, None, f"{exc}: resume with the same settings or a new output")
            print(f"note: {exc}; playing every game again", file=sys.stderr, flush=True)
            store.claim(overwrite=True, resume=False)
            existing, done = [], {}
        if store.single_file:
            store.keep(existing)
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
            while len(live) < config.batch_size:
                index = next(queue, None)
                if index is None:
                    break
                live.append(_Game(index=index, word=words[index]))
            if not live:
                break
            if attacker is defender:
                _speak(attacker, live, config, stats, guesser)
            else:
                # Split before anyone speaks: a game whose attacker just spoke waits for the next step.
                attacking = [g for g in live if next_role(g.history) == ATTACKER]
                defending = [g for g in live if next_role(g.history) != ATTACKER]
                for player, turn, guess in ((attacker, attacking, None), (defender, defending, guesser)):
                    if turn:
                        _speak(player, turn, config, stats, guess)
            still = []
            for game in live:
                verdict = judge(game.word, game.history, config.max_turns, config.rules)
                if verdict.decided or len(game.history) >= 2 * config.max_turns:
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
                store.append(unwritten)
                unwritten = []
    finally:
        # Whatever stopped the run, the finished games are kept.
        if store is not None and unwritten:
            store.append(unwritten)
        bar.close()
        stats.seconds = time.perf_counter() - start
    return sorted(kept + new, key=lambda e: e["word_index"])


def run_games(attacker_model: str, defender_model: str, words: list[str], config: PlayConfig, *,
              backend: str = "hf", output=None, resume: bool = False, show_progress: bool = True,
              stats: PlayStats | None = None, guess_words: Sequence[str] | None = None,
              overwrite: bool = False, **player_options) -> list[dict]:
    """Load the players (once when both sides are the same model) and play."""
    from spag.players import load_player

    rank, world = rank_and_world()
    if output is not None:  # before minutes of model loading
        EpisodeStore(output, rank, world).check(overwrite=overwrite and not resume, resume=resume)
    if backend == "hf" and world > 1 and player_options.get("device") is None:
        import torch

        if torch.cuda.is_available():
            player_options["device"] = f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}"
    attacker = load_player(attacker_model, backend, **player_options)
    defender = attacker if defender_model == attacker_model else load_player(defender_model, backend,
                                                                              **player_options)
    return play_games(attacker, defender, words, config, output=output, resume=resume,
                      show_progress=show_progress, stats=stats, guess_words=guess_words, overwrite=overwrite)
