"""Online self-play on TRL's GRPOTrainer: SPIRAL's recipe on this project's game, judge and prompts.

SPAG trains offline: a whole epoch of self-play, then one update. Here (``spag.method: online``) the
policy being trained plays whole games, is updated on them, and plays the next games with its new
weights, every step. TRL's :class:`~trl.GRPOTrainer` does the RL (advantages, the clipped objective, the KL
to the reference, checkpoints, DeepSpeed, colocated vLLM); this module only gives it a ``rollout_func``
that plays the game (:class:`GameRollout`) and a reward function that hands it the judge's verdict.

One step, in TRL's terms:

* The dataset holds one prompt per (word, role), both roles of a word side by side, in a fixed seeded
  order. Each is one GRPO group: TRL repeats it ``games_per_word * max_turns`` times.
* The rollout plays ``games_per_word`` games on each of the step's words with the live policy in both roles
  (:func:`spag.play.engine.play_games`, the engine every stage plays with: the hf player on the trainer's own
  model, or the vLLM engine TRL keeps colocated and in sync). So the (word, attacker) and (word, defender)
  groups come from the same games.
* Every utterance is one sample: the exact prompt its speaker was given (token ids as the player encoded
  them) and the utterance said, ending with eos. The opponent's utterances are not samples; they are
  part of the next prompt. Slot ``g * max_turns + k`` of a group is the role's k-th utterance in game g;
  a game shorter than ``max_turns`` rounds leaves slots empty. An empty slot (and an utterance left out:
  empty or cut at ``max_new_tokens`` unless ``reward.keep_truncated``, or longer than ``spag.max_length``)
  is a one-token sample with ``env_mask`` 0 and no reward: it takes no part in the loss, the KL or the
  group's baseline (TRL drops rewards of None from the group mean and gives them advantage 0).
* Each sample's reward is its role's reward in its game (:func:`spag.play.environment.episode_rewards`: zero-sum
  ``±win_reward``, ``-foul_game_penalty`` for an attacker who says the word; with ``reward.payoff: chips``,
  in a game played for chips, the chips the role won or lost). The group mean is therefore the
  role's mean reward on that word: GRPO's form of SPIRAL's role-conditioned baseline (RAE), which SPIRAL
  keeps as a moving average per role instead. ``scale_rewards: none`` (the default) is SPIRAL's
  advantage, reward minus baseline, not divided by a standard deviation.
* One optimiser step per batch of games (``gradient_accumulation_steps`` is the batch's micro-batches):
  on-policy, so the ratio is 1 at the step and clipping (``spag.clip_range``) never binds; ``spag.kl_coeff``
  is GRPO's beta, the KL to the reference, which is the model the epoch starts from. The loss is TRL's
  ``dapo`` (token-level, normalised by the batch's model tokens), so empty slots weigh nothing.

Sampling follows ``play`` (temperature, top_k, lengths, empty-reply retries) and the game ``game``, as
self-play does offline; TRL divides the policy's logits by the same temperature. The completion is the
utterance as the game took it (cleaned of role labels, as offline rows take it) tokenised again, so with
vLLM the sampled tokens and the trained ones can differ where a reply was cleaned: TRL's importance
correction for vLLM, which needs the sampled tokens' log-probs, is off.

Every game is written as an episode (:mod:`spag.game.episodes`), one shard per step, so that
``spag analyze`` and the tournament read them as any other. A killed run resumes from its latest
checkpoint (the Trainer's, ``spag.save_steps``); shards of steps after it are dropped and played again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spag.config import CHIPS, ONLINE, Online, Reward, TrainConfig
from spag.game.episodes import EpisodeStore
from spag.models.chat import model_input_ids
from spag.models.loading import load_tokenizer
from spag.play.engine import PlayConfig, PlayStats, play_games, rank_and_world
from spag.play.environment import episode_rewards
from spag.players.base import derive_seed
from spag.players.hf import HFPlayer
from spag.players.options import HFOptions
from spag.players.vllm import VLLMPlayer, _cpu_node_memory, on_vllm_cpu
from spag.runtime.errors import DataError, SettingError
from spag.runtime.fingerprint import model_fingerprint
from spag.train.callbacks import Tracking, run_callbacks, show_postfix_progress
from spag.train.job import finish_run, load_policy, start_run
from spag.train.trainer import DeepSpeedSchedules

REWARD_FIELD = "outcome_reward"  # the rollout's per-sample reward, read by the reward function `outcome`


def group_prompt(word: str, role: str) -> str:
    """The dataset prompt of the (word, role) group: what TRL repeats and logs."""
    return f"{role}: {word}"


def parse_group_prompt(prompt: str, roles: Sequence[str]) -> tuple[str, str]:
    role, _, word = prompt.partition(": ")
    if role not in roles or not word:
        raise ValueError(f"not an online group prompt: {prompt!r}")
    return role, word


@dataclass
class OnlineGames:
    """How the online run plays and scores its games: everything the rollout needs besides the model. The
    games are ``play``'s (its sampling section is the ``play`` section: the backend and its memory share,
    the prompt length), scored by ``online`` (or in chips: ``reward.payoff``) and filtered by ``reward``
    (``keep_truncated``)."""

    play: PlayConfig
    online: Online
    reward: Reward = field(default_factory=Reward)

    @property
    def backend(self) -> str:
        return self.play.sampling.backend

    @property
    def gpu_memory_utilization(self) -> float:
        return self.play.sampling.gpu_memory_utilization

    @property
    def max_prompt_tokens(self) -> int | None:
        return self.play.sampling.max_prompt_tokens

    def __post_init__(self):
        if self.backend not in ("hf", "vllm"):
            raise SettingError(
                "play.backend",
                f"online self-play plays with the policy it trains, on hf or vllm, not {self.backend!r}",
            )
        if self.reward.payoff == CHIPS and not self.play.game.for_chips:
            raise SettingError(
                "reward.payoff", f"the game {self.play.game.name} is not played for chips (use wins)"
            )
        if not self.play.sampling.temperature > 0:
            raise SettingError(
                "play.temperature",
                "online self-play needs sampled games (temperature > 0); greedy "
                "games on one word are all alike and teach nothing",
            )

    @property
    def slots(self) -> int:
        """Utterances one role can have in one game."""
        return self.play.game.max_turns

    @property
    def group_size(self) -> int:
        """Samples per (word, role) group: TRL's num_generations."""
        return self.online.games_per_word * self.slots

    def as_json(self) -> dict:
        return {
            "play": self.play.to_json(),
            "online": self.online.model_dump(),
            "reward": self.reward.model_dump(),
        }

    @classmethod
    def from_json(cls, data: dict) -> OnlineGames:
        return cls(PlayConfig.from_json(data["play"]), Online(**data["online"]), Reward(**data["reward"]))


def outcome(completions, **kwargs) -> list:
    """TRL's reward function: the rollout's reward of each sample (None for an empty slot), and the step's
    game statistics logged beside it (``games/...`` in the curves)."""
    stats = kwargs.get("game_stats")
    log_metric = kwargs.get("log_metric")
    if stats and log_metric is not None:
        for name, value in stats[0].items():
            log_metric(f"games/{name}", value)
    return kwargs[REWARD_FIELD]


# ------------------------------------------------------------------------------------------ the rollout


@dataclass
class _Sample:
    prompt_ids: list
    completion_ids: list
    env_mask: list
    reward: float | None


class GameRollout:
    """TRL's ``rollout_func``: the step's games, played by the live policy, as one sample per slot.

    ``player`` stands in for the live policy (a test's scripted player); by default the hf player runs on
    the trainer's model, or, with ``backend: vllm``, the project's vLLM player on TRL's colocated engine.
    """

    def __init__(
        self,
        games: OnlineGames,
        tokenizer,
        max_length: int,
        *,
        name: str,
        fingerprint: str,
        episodes: EpisodeStore | None = None,
        player=None,
    ):
        self.games, self.tokenizer, self.max_length = games, tokenizer, max_length
        self.name, self.fingerprint = name, fingerprint
        self.episodes, self.player = episodes, player
        self.totals = PlayStats()  # the whole run's games, for its summary
        # This process's utterances: trained on, or left out (empty, truncated, too_long), for the summary.
        self.utterances: Counter = Counter()

    def __call__(self, prompts: Sequence[str], trainer) -> dict:
        step = int(trainer.state.global_step)
        groups = _groups(prompts, self.games.play.game.roles)
        # Each word's games serve both of its groups; enough games for the larger one's slots.
        games_of = {}
        for role, word, size in groups:
            games_of[word] = max(games_of.get(word, 0), math.ceil(size / self.games.slots))
        words = [word for word, n in games_of.items() for _ in range(n)]
        config = dataclasses.replace(
            self.games.play,
            seed=derive_seed(self.games.play.seed, ONLINE, step, trainer.accelerator.process_index),
        )
        stats = PlayStats()
        with self._live_player(trainer, step) as player:
            # This process's share of the groups, all of its games (no further share by rank).
            episodes = play_games(
                player, player, words, config, show_progress=False, stats=stats, shard_by_rank=False
            )
        if self.episodes is not None:
            self.episodes.append(episodes, number=step)
        self._count(stats)
        played: dict[str, list[dict]] = {}
        for episode in episodes:  # in word order, so a word's games keep their order
            played.setdefault(episode["target_word"], []).append(episode)
        samples = [
            sample
            for role, word, size in groups
            for sample in self._group_samples(role, word, size, played[word], config)
        ]
        return {
            "prompt_ids": [s.prompt_ids for s in samples],
            "completion_ids": [s.completion_ids for s in samples],
            "logprobs": None,
            "env_mask": [s.env_mask for s in samples],
            REWARD_FIELD: [s.reward for s in samples],
            "game_stats": _game_stats(config.game, episodes, stats),
        }

    def _group_samples(self, role: str, word: str, size: int, episodes: list[dict], config: PlayConfig):
        slots = self.games.slots
        samples = [self._empty()] * size
        for g, episode in enumerate(episodes):
            reward = episode_rewards(config.game, episode, self.games.online, self.games.reward.payoff)[role]
            said = [i for i, u in enumerate(episode["history"]) if u["role"] == role][:slots]
            for k, i in enumerate(said):
                slot = g * slots + k
                if slot < size:
                    samples[slot] = self._sample(role, word, episode["history"], i, reward, config)
        return samples

    def _sample(self, role: str, word: str, history: list[dict], i: int, reward: float, config: PlayConfig):
        """The i-th utterance of a game as a sample: its speaker's prompt and what it said, then eos."""
        utterance = history[i]
        if not self.games.reward.keep_truncated and (not utterance["content"] or utterance.get("truncated")):
            self.utterances["truncated" if utterance["content"] else "empty"] += 1
            return self._empty()
        prompt = config.prompt(role, word, history[:i])
        prompt_ids = model_input_ids(self.tokenizer, prompt, self.games.max_prompt_tokens)
        completion_ids = [
            *self.tokenizer(utterance["content"], add_special_tokens=False)["input_ids"],
            self.tokenizer.eos_token_id,
        ]
        if len(prompt_ids) + len(completion_ids) > self.max_length:
            self.utterances["too_long"] += 1
            return self._empty()
        self.utterances["trained"] += 1
        return _Sample(prompt_ids, completion_ids, [1] * len(completion_ids), reward)

    def _empty(self) -> _Sample:
        eos = self.tokenizer.eos_token_id
        return _Sample([eos], [eos], [0], None)

    @contextlib.contextmanager
    def _live_player(self, trainer, step: int):
        """The policy as it is now, as a player; its games are recorded under the run's name and step."""
        name, fingerprint = f"{self.name}@step-{step}", f"{self.fingerprint}:step-{step}"
        if self.player is not None:
            yield self.player
        elif self.games.backend == "vllm":
            # TRL has pushed this step's weights into its colocated engine before calling the rollout.
            player = VLLMPlayer(
                trainer.vllm_generation.llm,
                self.tokenizer,
                name=name,
                max_prompt_tokens=self.games.max_prompt_tokens,
            )
            player.fingerprint = fingerprint
            yield player
        else:
            from trl.models import unwrap_model_for_generation

            # Under ZeRO-3 the parameters are gathered for the games, as TRL does for its own generation.
            with unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model:
                was_training = model.training
                model.eval()
                try:
                    # A new player each step: nothing it keeps (prompt keys/values) outlives the weights.
                    options = HFOptions(**self.games.play.sampling.player_options("hf"))
                    player = HFPlayer(model, self.tokenizer, name=name, options=options)
                    player.fingerprint = fingerprint
                    yield player
                finally:
                    model.train(was_training)

    def _count(self, stats: PlayStats) -> None:
        totals = self.totals
        totals.games += stats.games
        totals.outcomes.update(stats.outcomes)
        totals.utterances += stats.utterances
        totals.generated_tokens += stats.generated_tokens
        totals.empty_replies += stats.empty_replies
        totals.truncated_replies += stats.truncated_replies
        totals.seconds += stats.seconds
        totals.provenance = stats.provenance


def _groups(prompts: Sequence[str], roles: Sequence[str]) -> list[tuple[str, str, int]]:
    """(role, word, samples) of each run of equal prompts, in order: this process's share of the groups."""
    groups: list[tuple[str, str, int]] = []
    for prompt in prompts:
        role, word = parse_group_prompt(prompt, roles)
        if groups and groups[-1][:2] == (role, word):
            groups[-1] = (role, word, groups[-1][2] + 1)
        else:
            groups.append((role, word, 1))
    return groups


def _game_stats(game, episodes: list[dict], stats: PlayStats) -> dict:
    n = max(len(episodes), 1)
    sides = Counter(game.sides(e["outcome"]) for e in episodes)
    wins = Counter({winner: count for (winner, _), count in sides.items() if winner})
    return {
        **{f"{role}_win_rate": wins[role] / n for role in game.roles},
        "tie_rate": sides[(None, None)] / n,
        "foul_rate": sum(count for (_, offender), count in sides.items() if offender) / n,
        "mean_turns": sum(e["turns"] for e in episodes) / n,
        "play_seconds": stats.seconds,
    }


# ------------------------------------------------------------------------------------------ the run


def _keep_episodes_before(store: EpisodeStore, step: int) -> None:
    """Drop this process's shards of steps from ``step`` on (one shard per step, numbered by it): a resumed
    run plays those steps again."""
    for number, path in store.shards().items():
        if number >= step:
            path.unlink()


def _checkpoint_step(checkpoint: str | None) -> int:
    return int(Path(checkpoint).name.removeprefix("checkpoint-")) if checkpoint else 0


def _vllm_on_cpu_memory(games: OnlineGames) -> None:
    """vLLM's CPU build sizes its KV cache from the memory this process does not hold yet, which a process
    that already trains a model does not have; TRL's colocated engine gets an explicit size instead (the
    share ``play.gpu_memory_utilization`` of the node's memory), as the vllm player gives its own."""
    if on_vllm_cpu():
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        gib = max(1, int(games.gpu_memory_utilization * _cpu_node_memory() / 2**30))
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(gib))


def online_arguments(games: OnlineGames, config: TrainConfig, world: int) -> dict:
    """TRL's GRPOConfig arguments of the run, beside the Trainer's that every training run has."""
    from trl import GRPOConfig

    batch = 2 * games.online.words_per_step * games.group_size  # samples per step, every process together
    per_step = config.batch_size * world
    if batch % per_step:
        raise DataError(
            "spag.batch_size",
            None,
            f"{config.batch_size} x {world} process(es) must divide the {batch} samples of a step "
            f"(2 roles x {games.online.words_per_step} words x {games.online.games_per_word} games x "
            f"{games.slots} turns)",
        )
    return {
        "class": GRPOConfig,
        # one optimiser step per batch of games: its micro-batches are the accumulation steps
        "gradient_accumulation_steps": batch // per_step,
        "num_generations": games.group_size,
        "shuffle_dataset": False,  # the dataset's own seeded order keeps a word's two groups together
        "beta": config.kl_coeff,
        "epsilon": config.clip_range,
        "loss_type": "dapo",
        "scale_rewards": games.online.scale_rewards,
        "temperature": games.play.sampling.temperature,
        "top_k": games.play.sampling.top_k,
        "max_completion_length": games.play.sampling.max_new_tokens + 1,
        "use_vllm": games.backend == "vllm",
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": games.gpu_memory_utilization,
        "vllm_importance_sampling_correction": False,
        "include_num_input_tokens_seen": "no",  # GRPOTrainer counts the tokens itself
        "log_completions": False,
    }


@dataclass
class OnlineRun:
    """An online run ready to train: TRL's trainer, its rollout, the run's directories and its tracking."""

    trainer: object
    rollout: GameRollout
    run: object  # spag.train.job._Run
    tracking: Tracking | None
    words: list


def online_trainer(
    model,
    words: Sequence[str],
    output_dir,
    *,
    games: OnlineGames,
    config: TrainConfig,
    episodes_dir,
    data=None,
    other_checkpoints: str = "refuse",
    player=None,
    tracking: Tracking | None = None,
) -> OnlineRun:
    """Set up the online run of :func:`run_online` (same arguments) without training yet."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental: TRL is pinned
    from datasets import Dataset
    from trl import GRPOTrainer

    config = TrainConfig(**config.model_dump()).resolved(ONLINE)

    class OnlineTrainer(DeepSpeedSchedules, GRPOTrainer):
        """TRL's GRPOTrainer with the learning-rate schedules of every spag training run."""

        schedule = config.lr_scheduler

    per_step = games.online.words_per_step
    words = list(words)[: len(words) // per_step * per_step]
    if not words:
        raise DataError(data or "words", None, f"fewer words than online.words_per_step ({per_step})")
    rank, world = rank_and_world()
    if games.backend == "vllm":
        _vllm_on_cpu_memory(games)
    identity = {"online": {**games.as_json(), "words": words}}
    run = start_run(
        ONLINE,
        model,
        data,
        output_dir,
        None,
        config,
        other_checkpoints,
        arguments=online_arguments(games, config, world),
        identity=identity,
    )
    tokenizer = load_tokenizer(model, trust_remote_code=config.trust_remote_code)
    store = EpisodeStore(episodes_dir, rank, world)
    _keep_episodes_before(store, _checkpoint_step(run.resume_from))
    rollout = GameRollout(
        games,
        tokenizer,
        config.max_length,
        name=f"{model}+online",
        fingerprint=model_fingerprint(model),
        episodes=store,
        player=player,
    )
    # Both groups of a word side by side, so that one step's games serve both (shuffle_dataset is off).
    dataset = Dataset.from_list(
        [{"prompt": group_prompt(word, role)} for word in words for role in games.play.game.roles]
    )
    callbacks = run_callbacks(run, tracking)
    _quiet_empty_slots()
    trainer = OnlineTrainer(
        model=load_policy(model, config, tokenizer, bf16=bool(run.args.bf16)),
        reward_funcs=outcome,
        args=run.args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
        callbacks=callbacks,
    )
    show_postfix_progress(trainer)
    return OnlineRun(trainer, rollout, run, tracking, words)


def run_online(
    model,
    words: Sequence[str],
    output_dir,
    *,
    games: OnlineGames,
    config: TrainConfig,
    episodes_dir,
    data=None,
    other_checkpoints: str = "refuse",
    player=None,
    published=None,
    tracking: Tracking | None = None,
) -> Path:
    """Train ``model`` by online self-play on ``words`` and save it to ``output_dir``; the games go to
    ``episodes_dir`` (episode shards), and the summary names ``published`` (default: ``episodes_dir``), where
    a caller that plays into a work folder moves them after. ``data`` names the file the words came from
    (checked on resume with the words themselves); ``config`` holds the training knobs (:class:`TrainConfig`),
    ``player`` replaces the live policy as the player of every game (tests); ``tracking`` adds experiment
    tracking (:class:`spag.train.callbacks.Tracking`). Returns ``output_dir``."""
    published = episodes_dir if published is None else published
    online = online_trainer(
        model,
        words,
        output_dir,
        games=games,
        config=config,
        episodes_dir=episodes_dir,
        data=data,
        other_checkpoints=other_checkpoints,
        player=player,
        tracking=tracking,
    )
    trainer, run = online.trainer, online.run
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=run.resume_from)
    run.wait_for_everyone()
    episodes = EpisodeStore(episodes_dir).read()  # every process's games, those before a resume too
    outcomes = Counter(e["outcome"] for e in episodes)
    utterances = _every_process(trainer, online.rollout.utterances)
    if run.main and utterances and not utterances["trained"]:
        print(f"warning: {_nothing_trained(utterances)}", file=sys.stderr, flush=True)
    details = {
        "words": len(online.words),
        "games": len(episodes),
        "outcomes": {o: outcomes.get(o, 0) for o in games.play.game.outcomes},
        "play_seconds": round(online.rollout.totals.seconds, 3),
        "online_seconds": round(time.perf_counter() - started, 3),
        "generated_tokens": online.rollout.totals.generated_tokens,
        "episodes": str(published),
        "online": games.as_json(),
        "utterances": {key: utterances[key] for key in ("trained", "empty", "truncated", "too_long")},
    }
    finish_run(
        run,
        trainer,
        online.rollout.tokenizer,
        result,
        online.tracking,
        details,
        f"{len(episodes)} games on {len(online.words)} words",
    )
    run.wait_for_everyone()
    return run.output_dir


def _every_process(trainer, counts: Counter) -> Counter:
    """``counts`` summed over the run's processes (this run's steps: a resumed run counts those after it)."""
    from accelerate.utils import gather_object

    return sum((Counter(c) for c in gather_object([dict(counts)])), Counter())


def _nothing_trained(utterances: Counter) -> str:
    """Why a run whose every utterance was left out of training learned nothing from its games (one line)."""
    why = ", ".join(
        f"{utterances[key]} {said}"
        for key, said in (
            ("empty", "empty"),
            ("truncated", "cut at play.max_new_tokens"),
            ("too_long", "longer than spag.max_length"),
        )
        if utterances[key]
    )
    return (
        f"online training: all {sum(utterances.values())} utterances of this run's games were left out of "
        f"training ({why}): its steps trained on no token, so the model learned nothing from its games"
        + (" (reward.keep_truncated keeps the cut ones)" if utterances["truncated"] else "")
    )


def _quiet_empty_slots() -> None:
    """TRL warns for every batch holding a sample without a reward; here that is each empty slot, by design."""
    logging.getLogger("trl.trainer.grpo_trainer").setLevel(logging.ERROR)
