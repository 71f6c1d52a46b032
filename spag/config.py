"""Every setting of SPAG, once: its type, default, allowed range and one line of help.

A params file (``params.yaml``, ``configs/paper.yaml``) maps onto :class:`Settings` section by section;
the ``game`` section is the settings of the game ``game.name`` names (each game declares its own:
:mod:`spag.game.registry`), and so are the teacher's ``strategies``. The validated sections are what the
library passes around; the ``spag`` subcommands make their options from the same fields
(:mod:`spag.commands.options`), and :class:`TrainConfig` is the schema of one training run.

Defaults are those of the library and its commands (mostly the paper's setting); ``params.yaml`` sets the
laptop-sized values of the default pipeline. Loading a file checks all of it at once: an unknown or
misspelt key, a value of the wrong type or out of range is a :class:`ParamsError` whose message is one
line naming the file and the key (``params.yaml: spag.kl_coef: unknown key (did you mean kl_coeff?)``).

Nothing here imports torch or transformers: the CLI's help and the stages' checks stay fast.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
import reprlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, Discriminator, Field, Tag, ValidationError, model_validator

from spag.game.cards import CARDS, DEFAULT_GAME, game_card
from spag.players.options import BACKEND_OPTIONS, HFOptions, OpenAIOptions, VLLMOptions
from spag.runtime.errors import ParamsError, SettingError
from spag.schema import DEVICE_PATTERN, SEED_MAX, CommandLine, PathStr, Section, knob, read_yaml, shown_url

# The choices of settings, named once here: the code that acts on them (spag.train.losses,
# spag.evaluate.benchmark) imports them. The backends are those with options (spag.players.options).
METHODS = ("sft", "sft-kl", "offline-po")
ONLINE = "online"  # spag.method only: online self-play on TRL's GRPOTrainer (spag.train.online)
SCALE_REWARDS = ("none", "group", "batch")  # TRL's GRPOConfig.scale_rewards
REDUCTIONS = ("rows", "weights")
BACKENDS = tuple(BACKEND_OPTIONS)
SUITES = ("auto", "paper", "local")
SFT_FORMATS = ("chat", "original")
TRUNCATIONS = ("history", "left")
WORD_SETS = ("dev", "fresh")
CREDITS = ("all", "skill")
WINS, CHIPS = "wins", "chips"
PAYOFFS = (WINS, CHIPS)  # what a game pays its players (reward.payoff)
WINNERS, ALL_MOVES = "winners", "all"
IMITATED_MOVES = (WINNERS, ALL_MOVES)  # which of the teacher's moves the imitation set holds (imitate.moves)
# Experiment trackers transformers' Trainer reports to besides dvclive (TrainingArguments.report_to), each
# with the module it needs (spag.pipeline.preflight checks it is installed before a training stage runs).
TRACKERS = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "comet_ml": "comet_ml",
    "clearml": "clearml",
    "trackio": "trackio",
}
# The learning-rate schedules (spag.train.schedules says what the DeepSpeed ones do).
COSINE, LINEAR, WARMUP_DECAY, WARMUP_DECAY_DS013 = "cosine", "linear", "warmup_decay", "warmup_decay_ds013"
LR_SCHEDULERS = (COSINE, LINEAR, WARMUP_DECAY, WARMUP_DECAY_DS013)
# The paper's values where a training run leaves them unset (None): imitation 5e-6, SPAG 2e-6; KL 0.1 / 0.2.
# Online self-play, which the paper has not, takes SPAG's.
PAPER_LEARNING_RATE = {"sft": 5e-6, "sft-kl": 5e-6, "offline-po": 2e-6, ONLINE: 2e-6}
PAPER_KL_COEFF = {"sft": 0.0, "sft-kl": 0.1, "offline-po": 0.2, ONLINE: 0.2}


# ------------------------------------------------------------------------------------------- sections


class Model(Section):
    base: str = knob(
        "embedded", '"embedded" (SmolLM2-135M-Instruct from its wheel), an HF id or a local path.'
    )
    trust_remote_code: bool = knob(False, "Allow model code from the hub.")


class Words(Section):
    source: PathStr | None = knob(
        None, "A word-list file (one word per line, order kept); null: wordfreq's most frequent words."
    )
    top: int = knob(50_000, "How many of the most frequent words.", ge=1)
    eval_fraction: float = knob(0.1, "Share of the words held out for evaluation.", ge=0, le=1)
    nouns_only: bool = knob(False, "Only words that are always nouns (what a small model can describe).")
    skip_stop_words: bool = knob(True, "Drop function words (the original's list keeps them).")


def _game_name(value: Any) -> str:
    """Which game's settings a ``game:`` section holds: its ``name`` (none: the default game)."""
    if isinstance(value, dict):
        return value.get("name", DEFAULT_GAME)
    return getattr(value, "name", DEFAULT_GAME)


# The ``game:`` section: the settings of the game ``game.name`` names (each game declares its own class).
GameSection = Annotated[
    Union[tuple(Annotated[cls.Settings, Tag(name)] for name, cls in CARDS.items())],  # noqa: UP007
    Discriminator(_game_name),
]


class Generation(Section):
    """How each utterance is sampled, whichever backend runs the model."""

    temperature: float = knob(1.2, "Sampling temperature; 0 is greedy.", ge=0)
    top_k: int = knob(50, "Top-k sampling (0: off).", ge=0)
    max_new_tokens: int = knob(256, "Longest utterance, in tokens.", ge=1)
    min_new_tokens: int = knob(2, "Shortest utterance before it may end.", ge=0)
    empty_retries: int = knob(
        2,
        "Resamples of a reply that comes back empty, each with a longer shortest "
        "utterance (the original: 0, an empty reply is kept).",
        ge=0,
    )
    batch_size: int = knob(32, "Games played together.", ge=1)


class Backend(Section):
    backend: Literal[BACKENDS] = knob("hf", f"Player backend: {', '.join(BACKENDS)}.")


# The bases in this order give the fields in the order a reader wants them: the backend, the sampling, then
# each backend's options.
class Sampling(OpenAIOptions, VLLMOptions, HFOptions, Generation, Backend):
    """How a model plays: the backend, the sampling of each utterance, and each backend's options
    (:mod:`spag.players.options`, where each is defined)."""

    def player_options(self, backend: str | None = None) -> dict:
        """What :func:`spag.players.load_player` takes from this section for ``backend`` (default: the
        section's own): the fields of that backend's options."""
        return {name: getattr(self, name) for name in BACKEND_OPTIONS[backend or self.backend].model_fields}


class Teacher(Sampling):
    """Who plays the imitation episodes, and the strategies that let a small model win both roles."""

    episodes: PathStr | None = knob(
        None, "Import episodes from this file (e.g. the original's GPT-4 games) instead of playing."
    )
    rows: PathStr | None = knob(None, "Or import a ready-made imitation file (query/target[/weight] rows).")
    model: str = knob(
        "base", '"base" (the base model itself), an HF id or path, or a model served at base_url.'
    )
    words: int = knob(48, "Target words the teacher plays.", ge=1)
    strategies: dict[str, Any] = knob(
        {},
        "The game's strategies the teacher plays with (taboo: examples, "
        "foul_retries, coached_attacker, final_guess, word_filter; kuhn-poker: "
        "equilibrium, uniform or always_bet); checked against the game's.",
    )

    @model_validator(mode="after")
    def _one_source(self):
        if self.episodes is not None and self.rows is not None:
            raise SettingError(("episodes", "rows"), "give teacher.episodes or teacher.rows, not both")
        return self


class Play(Sampling):
    """Self-play collection, every SPAG epoch."""

    words: int = knob(64, "Target words per epoch (the paper: all ~50k).", ge=1)
    include_held_out: bool = knob(
        False, "Self-play on the held-out evaluation words too (the original played every word of its list)."
    )
    launcher: str | None = knob(
        None,
        'Play under this launcher, the words shared by rank, e.g. "torchrun '
        '--standalone --nproc_per_node auto" (auto: one process per visible GPU, '
        "each with tensor_parallel_size GPUs); null: in the stage's process.",
    )


SFT_FORMAT = knob(
    "chat",
    "General rows: chat (instruction and input as one user message in the model's chat "
    "template; rows without an output left out) or original (Alpaca in Stanford Alpaca's "
    "template, query/target rows as they are, the model's whole input; every row kept).",
)


class Reward(Section):
    decay: float = knob(0.8, "Reward decay d: the k-th winning move gets (1/d)^k.", gt=0, le=1)
    sft: PathStr | None = knob(
        None,
        'General instruction data to mix in: "builtin" (shipped with spag), a file '
        "(Alpaca, prompt/completion or query/target rows), or null.",
    )
    sft_limit: int | None = knob(None, "Keep a random N of the general rows (null: all).", ge=0)
    sft_format: Literal[SFT_FORMATS] = SFT_FORMAT
    foul_line_penalty: float = knob(
        0.0, "p >= 0: the attacker line that says the word becomes a row with reward -p (0: off).", ge=0
    )
    loser_reward: float = knob(
        0.0, "q <= 0: the loser's lines get rewards summing to q per game (0: off).", le=0
    )
    role_baseline: bool = knob(
        False, "Subtract each role's mean reward from its rows' rewards (SPIRAL-style)."
    )
    credit: Literal[CREDITS] = knob(
        "all",
        "Which wins earn the winner rows: all (the paper's) or skill (only wins "
        "by the winner's own play: a word the attacker led the defender to "
        "say, a correct guess; not the opponent's wrong guess).",
    )
    keep_truncated: bool = knob(
        False,
        "Also learn from empty replies and replies cut at max_new_tokens "
        "(the imitation set too); left out by default and counted.",
    )
    payoff: Literal[PAYOFFS] = knob(
        WINS,
        "What a game pays: wins (the paper's: the winner's lines earn the decayed shares; online, ±win_reward) "
        "or chips (games played for chips, kuhn-poker: each player's lines earn its chips won or lost, ±1 "
        "or ±2, as decayed shares, the loser's negative; online, its chips on every line; a rule break "
        "counts as a fold; online.win_reward and online.foul_game_penalty unused).",
    )

    @model_validator(mode="after")
    def _loser_paid_once(self):
        if self.payoff == CHIPS and self.loser_reward:
            raise SettingError(
                ("loser_reward", "payoff"),
                "the loser's lines already pay its chips lost with payoff chips: set 0",
            )
        return self


METHOD_HELP = "sft (weighted NLL), sft-kl (imitation learning), offline-po (SPAG)."


class TrainKnobs(Section):
    """The knobs of a training run that a params section (imitate, spag) sets."""

    learning_rate: float | None = knob(
        None, "Peak learning rate; null: the paper's for the method (5e-6 sft/sft-kl, 2e-6 offline-po).", gt=0
    )
    batch_size: int = knob(2, "Rows per device per micro-batch.", ge=1)
    grad_accum: int = knob(8, "Micro-batches per optimiser step.", ge=1)
    max_length: int = knob(2048, "Tokens per row (see truncation).", ge=2)
    truncation: Literal[TRUNCATIONS] = knob(
        "history",
        "A row longer than max_length: history (it gives up its oldest history lines, or is left out; "
        "never cut mid-text) or left (the original's: the whole sequence cut from the left).",
    )
    ref_on_the_fly: bool = knob(
        False,
        "Run the reference model beside the policy, in its precision (the "
        "original's; under DeepSpeed inside the engine, ratio 1 at step 0); false: "
        "reference log-probs computed once, in float32, before training.",
    )
    warmup_ratio: float = knob(0.03, "Share of the steps spent warming up.", ge=0, lt=1)
    lr_scheduler: Literal[LR_SCHEDULERS] = knob(
        COSINE,
        "cosine, linear, warmup_decay (DeepSpeed's WarmupDecayLR: the first two steps at rate 0) or "
        "warmup_decay_ds013 (as the original's DeepSpeed 0.13.1 ran it: the first step at the full rate, "
        "the second at 0).",
    )
    kl_coeff: float | None = knob(
        None, "β of the KL penalty; null: the paper's for the method (0.1 sft-kl, 0.2 offline-po).", ge=0
    )
    clip_range: float = knob(0.2, "ε of the clipped importance ratio (offline-po).", gt=0, lt=1)
    sft_coeff: float = knob(0.5, "α of the SFT term on general rows (offline-po).", ge=0)
    reduction: Literal[REDUCTIONS] = knob(
        "rows", "offline-po: rows (Σ w·l / n per kind, the original's) or weights (Σ w·l / Σ w per kind)."
    )
    detach_advantage: bool = knob(
        True, "offline-po: treat A = r − β·(log π − log π_ref) as a constant (the original kept it attached)."
    )
    gradient_checkpointing: bool = knob(False, "Recompute activations in the backward pass (less memory).")
    group_by_length: bool = knob(
        False,
        "Batch rows of similar length together (the HF Trainer's group_by_length: "
        "shuffled rows sorted by length within a few large chunks, the longest "
        "batch first): less padding, or in one CPU process fewer and larger "
        "products; another order of rows. false: random batches, the original's.",
    )
    group_by_prompt: bool = knob(
        False,
        "Batch rows whose prompts begin alike together (rows in the order of their "
        "prompts' tokens, cut into batches, the batches shuffled by the seed): in "
        "one CPU process the beginning a batch shares is encoded once per step; "
        "another order of rows. Not with group_by_length.",
    )
    batch_rebalance: bool = knob(
        False,
        "Micro-batches of balanced cost (transformers' BatchRebalanceSampler): each optimiser step takes "
        "batch_size x grad_accum rows per process as ever (or about step_tokens tokens), dealt into "
        "micro-batches of similar tokens, many short rows or a few long ones; each row's loss is divided by "
        "the rows of the whole step (per kind for offline-po), so a row weighs the same whatever its "
        "micro-batch. Not with group_by_length or group_by_prompt.",
    )
    step_tokens: int | None = knob(
        None,
        "With batch_rebalance: each optimiser step takes rows up to about this many tokens (all processes "
        "together), not batch_size x grad_accum rows: many short rows or a few long ones, in an epoch of "
        "ceil(tokens / step_tokens) steps, each dealt into grad_accum micro-batches of similar tokens per "
        "process (batch_size unused). null: steps of fixed rows.",
        ge=1,
    )
    padding_free: bool = knob(
        False,
        "Lay each micro-batch's rows end to end as one sequence, so that no padding is computed: positions "
        "restart at each row and the attention keeps rows apart (flash-attention's variable lengths, or a "
        "block mask with sdpa). For a GPU, where a padded batch computes its padding; the same numbers.",
    )
    lora_r: int = knob(0, "LoRA rank; 0 trains every weight.", ge=0)
    bf16: bool | None = knob(None, "bfloat16 autocast; null: on a GPU that has it (float32 on a CPU).")
    save_steps: int = knob(500, "Checkpoint every N optimiser steps (what --resume continues from).", ge=1)
    deepspeed: PathStr | None = knob(None, "DeepSpeed config JSON (e.g. configs/deepspeed_zero3.json).")
    report_to: list[Literal[tuple(TRACKERS)]] = knob(
        [],
        f"Also report the training curves to these trackers (transformers' report_to: {', '.join(TRACKERS)}; "
        "each must be installed, and logged in where it asks); dvclive always writes them under dvclive/.",
    )

    @model_validator(mode="after")
    def _one_batch_order(self):
        orders = [
            name for name in ("group_by_length", "group_by_prompt", "batch_rebalance") if getattr(self, name)
        ]
        if len(orders) > 1:
            raise SettingError(
                tuple(orders),
                f"each of {', '.join(orders)} orders the batches its own way: set all but one of them false",
            )
        if self.step_tokens is not None and not self.batch_rebalance:
            raise SettingError(
                ("step_tokens", "batch_rebalance"),
                "steps of a number of tokens are dealt by batch_rebalance: set it true, or step_tokens null",
            )
        return self


class TrainStep(TrainKnobs):
    """A pipeline training step: the method, the run's knobs and how it is launched."""

    method: Literal[METHODS] = knob("sft-kl", METHOD_HELP)
    launcher: CommandLine | None = knob(
        None,
        'Run under this launcher, e.g. "torchrun --standalone --nproc_per_node 8" '
        "(auto for the count: one process per visible GPU, one without a GPU; "
        "null: in the stage's process).",
    )


TRAINING_EPOCHS = knob(1.0, "Passes over the training rows.", ge=0)
# A pipeline's training step always trains: 0 epochs would give it no optimiser step.
STEP_EPOCHS = knob(1.0, "Passes over the training rows.", gt=0)


class Imitate(TrainStep):
    """Imitation learning on the teacher's winning moves (or on all of its moves: ``moves``)."""

    moves: Literal[IMITATED_MOVES] = knob(
        WINNERS,
        "Which of the teacher's moves are imitated: winners (the paper's: the winner's moves of each "
        "decisive game) or all (every move of every game, both players', ties and losses too; a line "
        "that broke the rules left out): a start that plays every action the teacher plays.",
    )

    sft: PathStr | None = knob(
        None, 'General data mixed into the imitation set: "builtin", a file, or null (the original: none).'
    )
    sft_limit: int | None = knob(None, "Rows of it (null: all).", ge=0)
    sft_format: Literal[SFT_FORMATS] = SFT_FORMAT
    epochs: float = STEP_EPOCHS


class Epoch(Section):
    previous: str = knob(
        ...,
        'The checkpoint the epoch starts from: "imitation", "epoch_N" or "base" (the base '
        "model: self-play without imitation).",
    )


EpochKey = Annotated[str, Field(pattern=r"^[1-9][0-9]*$")]


class Spag(TrainStep):
    """SPAG epochs: self-play, rewards and offline policy optimisation."""

    epochs: dict[EpochKey, Epoch] = knob(
        {"1": Epoch(previous="imitation"), "2": Epoch(previous="epoch_1"), "3": Epoch(previous="epoch_2")},
        'One entry per SPAG epoch ("N": {previous: CHECKPOINT}), quoted keys.',
    )
    control: bool = knob(False, "Train on the general SFT rows alone (no game rows): the ablation arm.")
    method: Literal[(*METHODS, ONLINE)] = knob(
        "offline-po",
        "offline-po (SPAG: train@N learns from play@N's games) or online (train@N plays its own "
        "games with the policy it trains and updates as it goes: the online section).",
    )
    epochs_per_iteration: float = STEP_EPOCHS

    @model_validator(mode="after")
    def _epochs_chain(self):
        # Each epoch starts from the imitation model or an earlier epoch: one pass over the epochs in order
        # (checking each against all the others made 8,000 epochs take 20 s).
        earlier: set[str] = {"base", "imitation"}
        for key in sorted(self.epochs, key=int):
            previous = self.epochs[key].previous
            if previous not in earlier:
                shown = ", ".join(sorted(earlier)[:5]) + (" ..." if len(earlier) > 5 else "")
                raise SettingError(f"epochs.{key}.previous", f"{previous!r} is not one of {shown}")
            earlier.add(f"epoch_{key}")
        return self


class Online(Section):
    """Online self-play (``spag.method: online``): train@N plays whole games with the policy it trains and
    updates it by GRPO (TRL's GRPOTrainer) every step, SPIRAL's recipe on this project's judge. Sampling is
    play's (temperature, top_k, lengths, backend), training spag's (learning rate, kl_coeff as GRPO's beta,
    clip_range as its epsilon, batch_size per device, max_length, deepspeed, launcher)."""

    words: int = knob(
        64,
        "Training words per SPAG epoch, each played in both roles (rounded down to a "
        "multiple of words_per_step).",
        ge=1,
    )
    words_per_step: int = knob(
        2,
        "Words per optimiser step; each gives two GRPO groups, (word, attacker) and (word, defender).",
        ge=1,
    )
    games_per_word: int = knob(
        4,
        "Games played on each word at its step; a group holds its role's utterances "
        "in them, so the group's mean reward is a per-role baseline.",
        ge=2,
    )
    win_reward: float = knob(
        1.0,
        "Zero-sum outcome reward: +r on every utterance of the winner, -r on the loser's, 0 in a tie.",
        gt=0,
    )
    foul_game_penalty: float = knob(
        1.5,
        "p: an attacker who says the word gets -p on every utterance of the "
        "game, the defender 0 (SPIRAL scores an invalid move -1.5).",
        ge=0,
    )
    scale_rewards: Literal[SCALE_REWARDS] = knob(
        "none",
        "none: advantage = reward - its group's mean (SPIRAL's role baseline, no scaling); group or "
        "batch: also divided by the group's or the batch's standard deviation (GRPO).",
    )


class Benchmark(Section):
    suite: Literal[SUITES] = knob(
        "auto",
        "paper (lm-eval's stock tasks on real items, offline where a pinned "
        "registry artifact holds them), local (a synthetic smoke test), or auto "
        "(paper where any of its tasks can run, else local).",
    )
    tasks: list[str] | None = knob(None, "lm-eval tasks or groups (null: the suite's list).")
    limit: int | None = knob(
        None, "Items per task: a fixed random sample, the same for every model and run (null: all).", ge=1
    )
    every: int = knob(
        1, "Benchmark every Nth SPAG epoch (epochs N, 2N, ...); the imitation model always.", ge=1
    )
    base: bool = knob(
        True,
        "Also benchmark the base model, so that imitation and every epoch are compared with "
        "it too (off: the base model's benchmark.json says it was not run).",
    )


class Evaluate(Sampling):
    """Each SPAG epoch against the imitation model, on held-out words, both roles."""

    temperature: float | None = knob(
        0.0, "Sampling temperature; 0 = greedy (the paper's evaluation); null: play.temperature.", ge=0
    )
    seed: int = knob(
        0, "Picks the evaluation words and sampling seeds: fixed for every run and epoch.", ge=0, le=SEED_MAX
    )
    word_set: Literal[WORD_SETS] = knob(
        "dev",
        "dev: a sample of the held-out targets (data/words/eval.txt), the development set that settings "
        "were chosen on; fresh: the game's fresh set, which no decision looked at (taboo: the 128 nouns "
        "of spag/game/taboo/fresh_eval_words.txt, a frequency band the training words never come from).",
    )
    words: int = knob(64, "Evaluation words (a sample of the word set; all of it when it has fewer).", ge=1)
    seeds: int = knob(
        1, "Games per word and role (sampling seeds seed, seed+1, ...; greedy plays one).", ge=1
    )
    vs_previous: bool = knob(False, "Also play each epoch against the previous one.")
    skill: bool | None = knob(
        None,
        "The game's skill metrics (hf; taboo: the clue rank of the attacker's opening "
        "lines and the guess rank of the defender), paired per word with the "
        "imitation model's; null: on when the game has them.",
    )
    skill_every: int = knob(
        1,
        "Skill metrics every Nth SPAG epoch (epochs N, 2N, ...); the imitation model and "
        "the baselines always.",
        ge=1,
    )
    clue_lines: int = knob(
        2,
        "Fixed inputs of the skill metrics per word (taboo: the base model's clue lines for the guess rank).",
        ge=1,
    )
    baselines: list[str] | None = knob(
        None,
        "The game's no-training baselines (taboo: imitation-resample, imitation-filter, "
        "imitation-filter-guess, base-teacher; spag/game/taboo/baselines.py) played against the imitation "
        "model on the evaluation words and seeds; each epoch is compared with the strongest, paired per "
        "word; null: all of the game's.",
    )
    vs_baseline: bool = knob(False, "Also play each epoch head to head against the strongest baseline.")
    strategy_samples: int = knob(
        100,
        "Kuhn poker: replies sampled at each of the 12 information sets to read a "
        "checkpoint's strategy as played (strategy.jsonl, exploitability.json of "
        "the base and imitation models and every epoch; `spag strategy --samples`).",
        ge=1,
    )

    benchmark: Benchmark = Field(default_factory=Benchmark, description="Reasoning benchmarks (lm-eval).")


class Twin(Section):
    """The tabular twin of the loop (Kuhn poker, :mod:`spag.train.twin`): SPAG's loop on a policy of 12 logits,
    with the run's own hands, rewards and training settings, drawn in the report beside the model's curve."""

    learning_rate: float = knob(
        0.1,
        "AdamW's learning rate on the twin's 12 logits: about how far a logit moves in "
        "one optimiser step (the model's spag.learning_rate moves its weights, and "
        "no rate maps one onto the other).",
        gt=0,
    )
    seeds: int = knob(
        5, "Twin runs, seeds seed, seed+1, ...: the report draws their mean with a 95% t interval.", ge=1
    )


class Settings(Section):
    """A whole params file."""

    seed: int = knob(
        0, "Seed of the pipeline's random choices (each step derives its own from it).", ge=0, le=SEED_MAX
    )
    model: Model = Field(default_factory=Model)
    words: Words = Field(default_factory=Words)
    game: GameSection = Field(
        default_factory=lambda: game_card(DEFAULT_GAME).Settings(),
        description="The game (game.name) and its settings.",
    )
    teacher: Teacher = Field(default_factory=Teacher)
    play: Play = Field(default_factory=Play)
    reward: Reward = Field(default_factory=Reward)
    imitate: Imitate = Field(default_factory=Imitate)
    spag: Spag = Field(default_factory=Spag)
    online: Online = Field(default_factory=Online)
    evaluate: Evaluate = Field(default_factory=Evaluate)
    twin: Twin = Field(default_factory=Twin)

    @model_validator(mode="after")
    def _the_game_has_them(self):
        """The teacher's strategies, skill metrics and baselines are the game's own."""
        game = game_card(self.game.name)
        try:
            game.Strategies.model_validate(self.teacher.strategies)
        except ValidationError as exc:
            key, message = describe(exc.errors()[0], game.Strategies)
            raise SettingError((f"teacher.strategies.{key}", "game.name"), message) from None
        if self.reward.payoff == CHIPS and not game.for_chips:
            raise SettingError(
                ("reward.payoff", "game.name"), f"the game {game.name} is not played for chips (use wins)"
            )
        e = self.evaluate
        if e.skill and not game.skill:
            raise SettingError(
                ("evaluate.skill", "game.name"),
                f"the game {game.name} has no skill metrics (set false or null)",
            )
        offered = game.baselines
        unknown = [name for name in e.baselines or () if name not in offered]
        if unknown:
            raise SettingError(
                ("evaluate.baselines", "game.name"),
                f"{unknown[0]!r} is not a baseline of {game.name} ({', '.join(offered) or 'it has none'})",
            )
        if e.vs_baseline and not (offered if e.baselines is None else e.baselines):
            raise SettingError(
                ("evaluate.vs_baseline", "evaluate.baselines"),
                "needs at least one baseline in evaluate.baselines",
            )
        fewest = self.game.fewest_reply_tokens()
        for name in ("teacher", "play", "evaluate"):
            if getattr(self, name).max_new_tokens < fewest:
                raise SettingError(
                    (f"{name}.max_new_tokens", "game"),
                    f"{getattr(self, name).max_new_tokens} cuts every reply short: the game's settings "
                    f"need at least {fewest} new tokens a reply",
                )
        return self

    def strategies(self) -> Section:
        """The teacher's strategies, as the game's strategies section."""
        return game_card(self.game.name).Strategies.model_validate(self.teacher.strategies)

    @model_validator(mode="after")
    def _online_epochs_learn(self):
        """An online epoch trains: at least one optimiser step (online.words rounds down to a multiple of
        online.words_per_step), and not all of them warm-up (the linear warm-up starts from a learning
        rate of 0, so an epoch that only warms up leaves its start's model unchanged)."""
        o, s = self.online, self.spag
        if s.method != ONLINE:
            return self
        steps = math.ceil(o.words // o.words_per_step * s.epochs_per_iteration)
        if steps == 0:
            raise SettingError(
                ("online.words", "online.words_per_step"),
                f"{o.words} word(s) at online.words_per_step {o.words_per_step} give an online epoch no "
                f"optimiser step: set online.words to at least {o.words_per_step}",
            )
        ratio = s.warmup_ratio
        if ratio and math.ceil(steps * ratio) >= steps:
            raise SettingError(
                ("spag.warmup_ratio", "online.words", "online.words_per_step", "spag.epochs_per_iteration"),
                f"{ratio:g} warms up over all {steps} step(s) of an online epoch (online.words {o.words} "
                f"/ online.words_per_step {o.words_per_step} x spag.epochs_per_iteration "
                f"{s.epochs_per_iteration:g}), so its learning rate stays 0; set it to 0 or train on "
                "more words",
            )
        return self


# --------------------------------------------------------------------------------------- one training run


class TrainConfig(TrainKnobs):
    """Every knob of one training run (``spag train``); ``None`` learning rate or KL: the method's default."""

    epochs: float = TRAINING_EPOCHS
    max_steps: int = knob(-1, "Stop after N optimiser steps (-1: run the epochs).", ge=-1)
    weight_decay: float = knob(0.0, "AdamW weight decay.", ge=0)
    max_grad_norm: float = knob(1.0, "Gradient clipping norm.", ge=0)
    tf32: bool | None = knob(None, "TF32 matrix products; null: on with an Ampere or newer GPU.")
    device: str | None = knob(None, "cpu or cuda (null: cuda if present).", pattern=DEVICE_PATTERN)
    lora_alpha: int = knob(16, "LoRA alpha.", ge=1)
    lora_dropout: float = knob(0.05, "LoRA dropout.", ge=0, le=1)
    lora_target_modules: str = knob("all-linear", "all-linear or comma-separated module names.")
    merge_lora: bool = knob(True, "Merge the LoRA adapters into the saved model.")
    seed: int = knob(42, "Training seed (data order, LoRA initialisation).", ge=0, le=SEED_MAX)
    resume: bool = knob(False, "Continue from the latest complete checkpoint.")
    overwrite: bool = knob(False, "Replace a previous `spag train` output at the same path (nothing else).")
    ref_cache_dir: PathStr | None = knob(
        None, "Where reference log-probs are cached (null: beside the data)."
    )
    ref_batch_size: int = knob(8, "Rows per reference forward pass.", ge=1)
    live_dir: PathStr | None = knob(
        None,
        "dvclive directory (null: OUTPUT/../dvclive/<name of OUTPUT>): new, "
        "empty, or one spag train made (it holds .spag-output.json), as "
        "dvclive replaces dvc.yaml, params.yaml, metrics.json and plots/ in "
        "it; anything else is refused.",
    )
    live: bool = knob(True, "Log training curves to dvclive.")
    logging_steps: int = knob(10, "Log every N optimiser steps.", ge=1)
    save_total_limit: int = knob(2, "Intermediate checkpoints kept.", ge=1)
    checkpoint_dir: PathStr | None = knob(None, "Intermediate checkpoints (null: OUTPUT/checkpoints).")
    keep_checkpoints: bool = knob(False, "Keep intermediate checkpoints after a finished run.")
    dataloader_num_workers: int = knob(0, "Data loader worker processes.", ge=0)
    trust_remote_code: bool = knob(False, "Allow model code from the hub.")
    show_progress: bool = knob(True, "Show progress bars.")

    def resolved(self, method: str) -> TrainConfig:
        """A copy with the method's defaults filled in (learning rate, KL coefficient)."""
        return self.model_copy(
            update={
                "learning_rate": PAPER_LEARNING_RATE[method]
                if self.learning_rate is None
                else self.learning_rate,
                "kl_coeff": PAPER_KL_COEFF[method] if self.kl_coeff is None else self.kl_coeff,
            }
        )


# ------------------------------------------------------------------------------------------ loading


def _without_tag(loc: tuple) -> tuple:
    """A location as a params file names it: the game's name that pydantic puts after ``game`` left out."""
    if len(loc) > 1 and loc[0] == "game" and loc[1] in CARDS:
        return (loc[0], *loc[2:])
    return loc


def _key(loc: tuple) -> str:
    return ".".join(str(part) for part in _without_tag(loc))


def section_at(model: type[BaseModel] | None, part: str, game: str = DEFAULT_GAME) -> type[BaseModel] | None:
    """The section class of field ``part`` of ``model`` (the ``game`` field: the settings of ``game``; the
    teacher's ``strategies``: that game's strategies), or None where the field is a plain value."""
    if model is Settings and part == "game":
        return game_card(game).Settings if game in CARDS else None
    if model is Teacher and part == "strategies":
        return game_card(game).Strategies if game in CARDS else None
    annotation = getattr(getattr(model, "model_fields", {}).get(part), "annotation", None)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _fields_at(model: type[BaseModel], loc: tuple, game: str = DEFAULT_GAME) -> list[str]:
    """The field names of the section at ``loc`` (for "did you mean")."""
    for part in _without_tag(loc):
        model = section_at(model, str(part), game)
        if model is None:
            return []
    return list(model.model_fields)


# Settings that were renamed, by their old key: a params file or override that still uses one is refused in
# one line naming the new key.
RENAMED = {
    "reward.foul_penalty": "reward.foul_line_penalty",
    "online.foul_penalty": "online.foul_game_penalty",
}

_EXPECTED = {
    "bool_type": "expected true or false",
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "string_type": "expected a string",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "list_type": "expected a list",
    "int_from_float": "expected an integer",
}
_BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}


def _number_as_text(value: Any, kind: str) -> str:
    """The hint for a number YAML read as text: YAML 1.1 takes 2e-5 (no dot before the e) for a string."""
    if kind not in ("float_type", "int_type") or not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    mantissa, e, exponent = repr(number).partition("e")
    written = f"{mantissa if '.' in mantissa else mantissa + '.0'}{e}{exponent}"
    return f" (YAML reads {value} as text: write {written})" if "e" in value.lower() else ""


def _shown(value: Any) -> str:
    """A value as an error message shows it: short, however large or deeply nested (a YAML alias bomb
    is a few lines of text that a full repr expands to billions of characters)."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 2, 4, 4, 60, 60
    return short.repr(value)


def describe(error: dict, model: type[BaseModel] = Settings) -> tuple[str, str]:
    """(key, message) of one pydantic error, in this project's words."""
    loc, kind, value = tuple(error["loc"]), error["type"], _shown(error.get("input"))
    if loc and loc[-1] == "base_url" and isinstance(error.get("input"), str):
        value = _shown(shown_url(error["input"]))
    if kind == "extra_forbidden" and _key(loc) in RENAMED:
        return _key(loc), f"renamed: use {RENAMED[_key(loc)]}"
    if kind == "extra_forbidden":
        game = str(loc[1]) if len(loc) > 1 and loc[0] == "game" else DEFAULT_GAME
        near = difflib.get_close_matches(str(loc[-1]), _fields_at(model, loc[:-1], game), n=1)
        return _key(loc), "unknown key" + (f" (did you mean {near[0]}?)" if near else "")
    if kind == "union_tag_invalid":
        return _key((*loc, "name")), f"{_shown(error['ctx']['tag'])} is not one of {', '.join(CARDS)}"
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", error["msg"])
        return _key(loc), f"{value} is not one of {', '.join(allowed)}"
    if kind in _EXPECTED:
        return _key(loc), f"{_EXPECTED[kind]}, got {value}" + _number_as_text(error.get("input"), kind)
    if kind == "missing":
        return _key(loc), "missing"
    if kind == "string_pattern_mismatch" and loc and loc[-1] == "device":
        return _key(loc), f"{value} is not a device (cpu, cuda, cuda:N or auto)"
    if kind in _BOUNDS:
        op, bound = _BOUNDS[kind]
        limit = error["ctx"][bound]
        return _key(
            loc
        ), f"must be {op} {limit if isinstance(limit, int) else format(limit, 'g')}, got {value}"
    conflict = _conflict(error)
    if conflict is not None:
        return _key((*loc, *conflict.keys[0].split("."))), conflict.message
    message = str(error["msg"]).removeprefix("Value error, ")
    return _key(loc), f"{message[0].lower()}{message[1:]}, got {value}"


def _conflict(error: dict) -> SettingError | None:
    found = (error.get("ctx") or {}).get("error")
    return found if isinstance(found, SettingError) else None


def involved_keys(error: dict) -> tuple[str, ...]:
    """The keys one pydantic error is about, dotted from the top: the key it names first, then the others
    that its conflict reads (a key of the game's settings goes with ``game.name``, which chose them)."""
    loc = tuple(error["loc"])
    conflict = _conflict(error)
    if conflict is not None:
        return tuple(_key((*loc, *key.split("."))) for key in conflict.keys)
    key = describe(error)[0]
    tagged = len(loc) > 1 and loc[0] == "game" and loc[1] in CARDS and key != "game.name"
    return (key, "game.name") if tagged else (key,)


# Problems listed in one error at most; the rest are counted.
MAX_PROBLEMS = 20

# Where a key's value came from: the file that set it, or None (the schema's default).
Origin = Callable[[str], "str | os.PathLike | None"]


def settings_error(
    exc: ValidationError,
    source: str | os.PathLike,
    origin: Origin | None = None,
    model: type[BaseModel] = Settings,
) -> ParamsError:
    """One ParamsError listing every problem of a validation (``file: key: message``, separated by ``;``, the
    file left out where it is the previous problem's).

    ``origin`` says which file set a key (None: the default; without it ``source`` set every one). A problem
    is told as the file's that set its key; a conflict of several keys under the key its validator names
    first, with the files of the others after the message."""

    def told(error: dict) -> tuple[str | os.PathLike, str, str]:
        key, message = describe(error, model)
        keys = involved_keys(error) if model is Settings else (key,)
        if origin is None:
            return source, key, message
        files = {k: origin(k) for k in keys}
        lead = key
        if files[key] is None and any(files.values()):  # a default that a file's value conflicts with
            lead = next(k for k in keys if files[k] is not None)
            message = f"{key} at its default: {message}"
        where: dict[str, list[str]] = {}
        for k in keys:
            if k != lead and str(files[k]) != str(files[lead]):
                place = "at its default" if files[k] is None else f"from {files[k]}"
                where.setdefault(place, []).append(k)
        shown = "; ".join(f"{', '.join(ks)} {place}" for place, ks in where.items())
        return files[lead] or source, lead, message + (f" ({shown})" if shown else "")

    errors = exc.errors()
    (file, key, message), *rest = [told(error) for error in errors[:MAX_PROBLEMS]]
    tail, last = "", str(file)
    for f, k, m in rest:  # a file is named again only where the problems pass to another file
        tail += f"; {k}: {m}" if str(f) == last else f"; {f}: {k}: {m}"
        last = str(f)
    more = len(errors) - MAX_PROBLEMS
    tail += f"; and {more} more problem{'s' * (more > 1)}" if more > 0 else ""
    return ParamsError(file, key, message + tail)


def validate(params: Any, source: str | os.PathLike = "params.yaml") -> Settings:
    """:class:`Settings` from a loaded params mapping, or ParamsError listing every bad key."""
    if not isinstance(params, dict):
        raise ParamsError(source, "", f"expected a mapping of sections, got {type(params).__name__}")
    try:
        return Settings.model_validate(params)
    except ValidationError as exc:
        raise settings_error(exc, source) from None


def apply_overrides(params: dict, overrides: Any, source: str | os.PathLike) -> dict:
    """``params`` with each ``dotted.key: value`` of ``overrides`` replacing that setting whole (a mapping
    value such as ``spag.epochs`` replaces the whole mapping). A key naming no setting is refused."""
    if not isinstance(overrides, dict):
        raise ParamsError(source, "", "expected a mapping of dotted keys (section.key: value)")
    params = copy.deepcopy(params)
    for dotted, value in overrides.items():
        *sections, name = str(dotted).split(".")
        game = overrides.get("game.name") or _game_name(
            (params.get("game") if isinstance(params, dict) else None) or {}
        )
        model, where = Settings, params
        if dotted in RENAMED:
            raise ParamsError(source, dotted, f"renamed: use {RENAMED[dotted]}")
        for part in [*sections, name]:
            if part not in getattr(model, "model_fields", {}):
                raise ParamsError(source, dotted, "names no setting")
            model = section_at(model, part, str(game))
        for part in sections:
            where = where.setdefault(part, {})
            if not isinstance(where, dict):
                raise ParamsError(source, dotted, f"{part} is not a section")
        where[name] = value
    return params


def load_settings(path: str | os.PathLike | None, overrides: Sequence[str | os.PathLike] = ()) -> Settings:
    """Read and validate a params file (None: the schema's defaults): the whole of it, or ParamsError (one
    line, every problem listed). Each file of ``overrides`` (``section.key: value`` lines) replaces the
    settings it names, in order (:func:`apply_overrides`); a problem is told as the file's that set its key,
    and a conflict of keys set in different files names each file. An empty file is refused: a shell's
    ``> params.yaml`` empties the file before the command that was to write it has read it."""
    source = Path(path) if path is not None else "the defaults"
    params = _read_settings(Path(path), "a params file sets at least one section") if path is not None else {}
    original = params
    set_by: list[tuple[str | os.PathLike, list[str]]] = []  # each override and the keys it set, in order
    for override in overrides:
        if not isinstance(params, dict):
            break  # validate names the problem
        changes = _read_settings(Path(override), "an override file sets at least one section.key")
        params = apply_overrides(params, changes, override)
        set_by.append((override, [str(key) for key in changes]))
    if not isinstance(params, dict) or not set_by:
        return validate(params, source)

    def origin(key: str) -> str | os.PathLike | None:
        for override, keys in reversed(set_by):
            if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys):
                return override
        return source if path is not None and dotted_value(original, key) is not UNSET else None

    try:
        return Settings.model_validate(params)
    except ValidationError as exc:
        raise settings_error(exc, source, origin) from None


def _read_settings(path: Path, needs: str) -> Any:
    """A params or override file's content; ParamsError when it holds nothing (empty, or comments only)."""
    content = read_yaml(path)
    if content is None:
        raise ParamsError(
            path,
            "",
            f"is empty: {needs} (a shell's `> {path.name}` empties a file before the "
            "command reads it; write with `spag config show ... -o FILE`)",
        )
    return content


# What :func:`dotted_value` gives for a key the params mapping does not set.
UNSET = object()


def dotted_value(params: Any, key: str) -> Any:
    """The value a loaded params mapping sets for dotted ``key``, or :data:`UNSET`."""
    for part in key.split("."):
        if not isinstance(params, dict) or part not in params:
            return UNSET
        params = params[part]
    return params


def existing_file(value: str, key: str, source: str | os.PathLike = "params.yaml") -> str:
    """The file a params key names, or ParamsError when it does not exist."""
    if not os.path.isfile(value):
        raise ParamsError(source, key, f"no such file: {value}")
    return value


def to_yaml(settings: BaseModel, comments: bool = True) -> str:
    """The settings as YAML, each key with its help as a comment."""
    lines: list[str] = []
    _emit(settings, 0, comments, lines)
    return "\n".join(lines) + "\n"


def _emit(section: BaseModel, depth: int, comments: bool, lines: list[str]) -> None:
    pad = "  " * depth
    for name, field in type(section).model_fields.items():
        value = getattr(section, name)
        help_text = f"  # {field.description}" if comments and field.description else ""
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:{help_text}")
            _emit(value, depth + 1, comments, lines)
        elif isinstance(value, dict) and not value:
            lines.append(f"{pad}{name}: {{}}{help_text}")
        elif isinstance(value, dict):
            lines.append(f"{pad}{name}:{help_text}")
            for key, item in value.items():
                inner = item.model_dump() if isinstance(item, BaseModel) else item
                lines.append(f"{pad}  {_scalar(str(key))}: {_scalar(inner)}")
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}{help_text}")


def _scalar(value: Any) -> str:
    """One value as inline YAML (strings quoted only where YAML needs it)."""
    return yaml.safe_dump([value], default_flow_style=True, allow_unicode=True, width=10**6).strip()[1:-1]
