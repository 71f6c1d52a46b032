"""Every setting of SPAG, once: its type, default, allowed range and one line of help.

A params file (``params.yaml``, ``configs/paper.yaml``) maps onto :class:`Settings` section by section;
the ``spag`` subcommands take their option defaults and help from the same fields
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
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from spag.game.rules import RULE_SETS, WHOLE_WORD
from spag.train.schedules import COSINE, LR_SCHEDULERS

# Kept here as names so that reading a config never imports torch; tests check them against
# spag.train.losses (METHODS, REDUCTIONS) and spag.evaluate.benchmark (SUITES).
METHODS = ("sft", "sft-kl", "offline-po")
ONLINE = "online"  # spag.method only: online self-play on TRL's GRPOTrainer (spag.train.online)
SCALE_REWARDS = ("none", "group", "batch")  # TRL's GRPOConfig.scale_rewards
REDUCTIONS = ("rows", "weights")
BACKENDS = ("hf", "vllm", "openai")
DTYPES = ("auto", "float32", "bfloat16", "float16")
SUITES = ("auto", "paper", "local")
PROMPT_STYLES = ("templates", "original")
REPLY_HANDLING = ("clean", "raw")
GAME_ENDS = ("decided", "guess-phrase")
SFT_FORMATS = ("chat", "original")
TRUNCATIONS = ("history", "left")
WORD_SETS = ("dev", "fresh")
CREDITS = ("all", "skill")
# Kept here as names so that reading a config never imports the players; a test checks them against
# spag.evaluate.baselines.BASELINES.
BASELINE_NAMES = ("imitation-resample", "imitation-filter", "imitation-filter-guess", "base-teacher")
DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]+)?)$"
# The paper's values where a training run leaves them unset (None): imitation 5e-6, SPAG 2e-6; KL 0.1 / 0.2.
# Online self-play, which the paper has not, takes SPAG's.
PAPER_LEARNING_RATE = {"sft": 5e-6, "sft-kl": 5e-6, "offline-po": 2e-6, ONLINE: 2e-6}
PAPER_KL_COEFF = {"sft": 0.0, "sft-kl": 0.1, "offline-po": 0.2, ONLINE: 0.2}


class ParamsError(ValueError):
    """A one-line message naming the params file (or option) and the key."""

    def __init__(self, source: str | os.PathLike, key: str, message: str):
        super().__init__(f"{source}: {key}: {message}" if key else f"{source}: {message}")


def _fspath(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# A file or directory path: a string (a pathlib.Path from Python code is accepted), never empty.
PathStr = Annotated[str, BeforeValidator(_fspath), Field(min_length=1)]


def shown_url(url: str) -> str:
    """``url`` as messages show it: a password in it (``https://user:secret@host``) is masked, also in a
    URL too broken to parse (everything between the user name and the last ``@`` is taken as the password)."""
    head, sep, rest = url.partition("//")
    head, rest = (head + sep, rest) if sep else ("", url)
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{head}{userinfo.split(':', 1)[0]}:***@{host}"


def _http_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host (and a numeric port, if any)")
    return url


# An endpoint URL: http or https, with a host; messages show it with any password masked.
HttpUrl = Annotated[str, AfterValidator(_http_url)]


def _command_line(text: str) -> str:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"not a command line ({exc})") from None
    if not words:
        raise ValueError("an empty command line (null runs it in this process)")
    return text


# A command line (a launcher): words as a shell splits them, at least one.
CommandLine = Annotated[str, AfterValidator(_command_line)]


def knob(default: Any, help: str, **constraints) -> Any:
    """A field with its default, its one line of help and its range (ge, gt, le, lt)."""
    return Field(default, description=help, **constraints)


class Section(BaseModel):
    """A group of settings. Strict: YAML's true/false, numbers and strings are taken as they are; no
    number is infinite or NaN (``.inf`` in YAML, ``inf`` on the command line)."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, allow_inf_nan=False)


# ------------------------------------------------------------------------------------------- sections


class Model(Section):
    base: str = knob("embedded", '"embedded" (SmolLM2-135M-Instruct from its wheel), an HF id or a local path.')
    trust_remote_code: bool = knob(False, "Allow model code from the hub.")


class Words(Section):
    source: PathStr | None = knob(None, "A word-list file (one word per line, order kept); null: wordfreq's "
                                           "most frequent words.")
    top: int = knob(50_000, "How many of the most frequent words.", ge=1)
    eval_fraction: float = knob(0.1, "Share of the words held out for evaluation.", ge=0, le=1)
    nouns_only: bool = knob(False, "Only words that are always nouns (what a small model can describe).")
    skip_stop_words: bool = knob(True, "Drop function words (the original's list keeps them).")


def default(section: type[BaseModel], name: str) -> Any:
    """The schema's default of ``section.name``: for library objects that mirror a section's knobs."""
    return section.model_fields[name].default


def check(section: type[BaseModel], **values: Any) -> None:
    """Check ``values`` against the fields of ``section``: ValueError naming the first one it refuses.

    Library objects that mirror a section's knobs (:class:`spag.play.PlayConfig`,
    :class:`spag.rewards.RewardOptions`) check their values here, against the same ranges as a params file.
    """
    try:
        section(**values)
    except ValidationError as exc:
        key, message = describe(exc.errors()[0], section)
        raise ValueError(f"{key}: {message}") from None


class Game(Section):
    max_turns: int = knob(5, "Rounds per game, an attacker and a defender utterance each (the paper: 5).", ge=1)
    rules: Literal[RULE_SETS] = knob(WHOLE_WORD, "The judge: whole-word (whole words, every inflection) or "
                                                 "original (the original code's substring rule).")
    templates: PathStr | None = knob(None, "Prompt templates file (format: spag/game/templates.yaml); null: "
                                              "the shipped templates.")
    play_prompts: Literal[PROMPT_STYLES] = knob(
        "templates", "What a player is asked: templates (the templates file, in the model's chat template) or "
                     "original (the original's play prompt, BOS + its text, no chat template).")
    row_prompts: Literal[PROMPT_STYLES] = knob(
        "templates", "Training rows' prompts: templates (a rules text and history layout of the templates "
                     "file, drawn at random) or original (the original's randomly drawn query formats, the "
                     "model's whole input).")
    replies: Literal[REPLY_HANDLING] = knob(
        "clean", "clean (a reply ends where the model writes another speaker's line; role labels and chat "
                 "markers are removed) or raw (the decoded reply as it is, as the original kept it).")
    end: Literal[GAME_ENDS] = knob(
        "decided", "When a game stops: decided (as soon as the judge decides) or guess-phrase (the "
                   "original's: only after a defender line with \"i know the word\", else all turns are played "
                   "and judged afterwards).")


class Sampling(Section):
    """How a model plays: the backend and the sampling of each utterance."""

    backend: Literal[BACKENDS] = knob("hf", "Player backend: hf, vllm or openai.")
    dtype: Literal[DTYPES] = knob("auto", "hf/vllm weights: auto (bfloat16 on a GPU that has it, else "
                                          "float32), float32, bfloat16, float16.")
    device: str | None = knob(None, "hf backend: cpu, cuda, cuda:1 ... (null: the best there is).",
                                 pattern=DEVICE_PATTERN)
    base_url: HttpUrl | None = knob(None, "openai backend: an OpenAI-compatible endpoint URL.")
    gpu_memory_utilization: float = knob(0.3, "vllm backend: share of the memory one engine takes (weights, "
                                              "activations, KV cache): of the GPU, or on vLLM's CPU build of the "
                                              "CPU's NUMA node; two models in one game are two engines.",
                                         gt=0, le=1)
    temperature: float = knob(1.2, "Sampling temperature; 0 is greedy.", ge=0)
    top_k: int = knob(50, "Top-k sampling (0: off).", ge=0)
    max_new_tokens: int = knob(256, "Longest utterance, in tokens.", ge=1)
    min_new_tokens: int = knob(2, "Shortest utterance before it may end.", ge=0)
    empty_retries: int = knob(2, "Resamples of a reply that comes back empty, each with a longer shortest "
                                 "utterance (the original: 0, an empty reply is kept).", ge=0)
    tensor_parallel_size: int = knob(1, "vllm backend: GPUs one engine spans (under a launcher, each rank takes "
                                        "this many of the visible GPUs).", ge=1)
    batch_size: int = knob(32, "Games played together.", ge=1)
    max_prompt_tokens: int | None = knob(None, "hf/vllm: keep the last N tokens of a longer prompt (the "
                                                  "original cut at 2048); null: the whole prompt.", ge=1)

    def player_options(self) -> dict:
        """What :func:`spag.players.load_player` takes from this section."""
        return {"dtype": self.dtype, "device": self.device, "base_url": self.base_url,
                "gpu_memory_utilization": self.gpu_memory_utilization, "max_prompt_tokens": self.max_prompt_tokens,
                "tensor_parallel_size": self.tensor_parallel_size}


class Teacher(Sampling):
    """Who plays the imitation episodes, and the strategies that let a small model win both roles."""

    episodes: PathStr | None = knob(None, "Import episodes from this file (e.g. the original's GPT-4 games) "
                                             "instead of playing.")
    rows: PathStr | None = knob(None, "Or import a ready-made imitation file (query/target[/weight] rows).")
    model: str = knob("base", '"base" (the base model itself), an HF id or path, or a model served at base_url.')
    words: int = knob(48, "Target words the teacher plays.", ge=1)
    examples: bool = knob(False, "Worked examples in the play prompt (weak teachers).")
    foul_retries: int = knob(0, "Teacher strategy: resample an attacker line that says the word, up to N times.",
                             ge=0)
    coached_attacker: bool = knob(False, "Teacher strategy: attacker lines describe the word, the word blanked "
                                         "out.")
    final_guess: bool = knob(False, "Teacher strategy (hf): the defender's last line is the vocabulary word the "
                                    "talk makes most likely.")

    @model_validator(mode="after")
    def _one_source(self):
        if self.episodes is not None and self.rows is not None:
            raise ValueError("episodes: give teacher.episodes or teacher.rows, not both")
        return self

    def strategies(self) -> dict:
        return {"examples": self.examples, "foul_retries": self.foul_retries,
                "coached_attacker": self.coached_attacker, "final_guess": self.final_guess}


class Play(Sampling):
    """Self-play collection, every SPAG epoch."""

    words: int = knob(64, "Target words per epoch (the paper: all ~50k).", ge=1)
    include_held_out: bool = knob(False, "Self-play on the held-out evaluation words too (the original played "
                                         "every word of its list).")
    launcher: str | None = knob(None, 'Play under this launcher, the words shared by rank, e.g. "torchrun '
                                         '--standalone --nproc_per_node auto" (auto: one process per visible GPU, '
                                         "each with tensor_parallel_size GPUs); null: in the stage's process.")


SFT_FORMAT = knob("chat", "General rows: chat (instruction and input as one user message in the model's chat "
                          "template; rows without an output left out) or original (Alpaca in Stanford Alpaca's "
                          "template, query/target rows as they are, the model's whole input; every row kept).")


class Reward(Section):
    decay: float = knob(0.8, "Reward decay d: the k-th winning move gets (1/d)^k.", gt=0, le=1)
    sft: PathStr | None = knob(None, 'General instruction data to mix in: "builtin" (shipped with spag), a file '
                                        "(Alpaca, prompt/completion or query/target rows), or null.")
    sft_limit: int | None = knob(None, "Keep a random N of the general rows (null: all).", ge=0)
    sft_format: Literal[SFT_FORMATS] = SFT_FORMAT
    foul_penalty: float = knob(0.0, "p >= 0: the attacker line that says the word becomes a row with reward -p "
                                    "(0: off).", ge=0)
    loser_reward: float = knob(0.0, "q <= 0: the loser's lines get rewards summing to q per game (0: off).", le=0)
    role_baseline: bool = knob(False, "Subtract each role's mean reward from its rows' rewards (SPIRAL-style).")
    credit: Literal[CREDITS] = knob("all", "Which wins earn the winner rows: all (the paper's) or skill (only wins "
                                           "by the winner's own play: a word the attacker led the defender to "
                                           "say, a correct guess; not the opponent's wrong guess).")
    keep_truncated: bool = knob(False, "Also learn from empty replies and replies cut at max_new_tokens "
                                       "(the imitation set too); left out by default and counted.")


METHOD_HELP = "sft (weighted NLL), sft-kl (imitation learning), offline-po (SPAG)."


class TrainKnobs(Section):
    """The knobs of a training run that a params section (imitate, spag) sets."""

    learning_rate: float | None = knob(None, "Peak learning rate; null: the paper's for the method (5e-6 "
                                                "sft/sft-kl, 2e-6 offline-po).", gt=0)
    batch_size: int = knob(2, "Rows per device per micro-batch.", ge=1)
    grad_accum: int = knob(8, "Micro-batches per optimiser step.", ge=1)
    max_length: int = knob(2048, "Tokens per row (see truncation).", ge=2)
    truncation: Literal[TRUNCATIONS] = knob(
        "history", "A row longer than max_length: history (it gives up its oldest history lines, or is left out; "
                   "never cut mid-text) or left (the original's: the whole sequence cut from the left).")
    ref_on_the_fly: bool = knob(False, "Run the reference model beside the policy, in its precision (the "
                                       "original's; under DeepSpeed inside the engine, ratio 1 at step 0); false: "
                                       "reference log-probs computed once, in float32, before training.")
    warmup_ratio: float = knob(0.03, "Share of the steps spent warming up.", ge=0, lt=1)
    lr_scheduler: Literal[LR_SCHEDULERS] = knob(
        COSINE, "cosine, linear, warmup_decay (DeepSpeed's WarmupDecayLR: the first two steps at rate 0) or "
                "warmup_decay_ds013 (as the original's DeepSpeed 0.13.1 ran it: the first step at the full rate, "
                "the second at 0).")
    kl_coeff: float | None = knob(None, "β of the KL penalty; null: the paper's for the method (0.1 sft-kl, "
                                           "0.2 offline-po).", ge=0)
    clip_range: float = knob(0.2, "ε of the clipped importance ratio (offline-po).", gt=0, lt=1)
    sft_coeff: float = knob(0.5, "α of the SFT term on general rows (offline-po).", ge=0)
    reduction: Literal[REDUCTIONS] = knob("rows", "offline-po: rows (Σ w·l / n per kind, the original's) or "
                                                  "weights (Σ w·l / Σ w per kind).")
    detach_advantage: bool = knob(True, "offline-po: treat A = r − β·(log π − log π_ref) as a constant (the "
                                        "original kept it attached).")
    gradient_checkpointing: bool = knob(False, "Recompute activations in the backward pass (less memory).")
    lora_r: int = knob(0, "LoRA rank; 0 trains every weight.", ge=0)
    bf16: bool | None = knob(None, "bfloat16 autocast; null: on a GPU that has it (float32 on a "
                                      "CPU).")
    save_steps: int = knob(500, "Checkpoint every N optimiser steps (what --resume continues from).", ge=1)
    deepspeed: PathStr | None = knob(None, "DeepSpeed config JSON (e.g. configs/deepspeed_zero3.json).")


class TrainStep(TrainKnobs):
    """A pipeline training step: the method, the run's knobs and how it is launched."""

    method: Literal[METHODS] = knob("sft-kl", METHOD_HELP)
    launcher: CommandLine | None = knob(None, 'Run under this launcher, e.g. "torchrun --standalone --nproc_per_node 8" '
                                                 "(auto for the count: one process per visible GPU, one without a GPU; "
                                                 "null: in the stage's process).")


TRAINING_EPOCHS = knob(1.0, "Passes over the training rows.", ge=0)


class Imitate(TrainStep):
    """Imitation learning on the teacher's winning moves."""

    sft: PathStr | None = knob(None, 'General data mixed into the imitation set: "builtin", a file, or null '
                                        "(the original: none).")
    sft_limit: int | None = knob(None, "Rows of it (null: all).", ge=0)
    sft_format: Literal[SFT_FORMATS] = SFT_FORMAT
    epochs: float = TRAINING_EPOCHS


class Epoch(Section):
    previous: str = knob(..., 'The checkpoint the epoch starts from: "imitation" or "epoch_N".')


EpochKey = Annotated[str, Field(pattern=r"^[1-9][0-9]*$")]


class Spag(TrainStep):
    """SPAG epochs: self-play, rewards and offline policy optimisation."""

    epochs: dict[EpochKey, Epoch] = knob(
        {"1": Epoch(previous="imitation"), "2": Epoch(previous="epoch_1"), "3": Epoch(previous="epoch_2")},
        'One entry per SPAG epoch ("N": {previous: CHECKPOINT}), quoted keys.')
    control: bool = knob(False, "Train on the general SFT rows alone (no game rows): the ablation arm.")
    method: Literal[(*METHODS, ONLINE)] = knob(
        "offline-po", "offline-po (SPAG: train@N learns from play@N's games) or online (train@N plays its own "
                      "games with the policy it trains and updates as it goes: the online section).")
    epochs_per_iteration: float = TRAINING_EPOCHS

    @model_validator(mode="after")
    def _epochs_chain(self):
        # Each epoch starts from the imitation model or an earlier epoch: one pass over the epochs in order
        # (checking each against all the others made 8,000 epochs take 20 s).
        earlier: set[str] = {"imitation"}
        for key in sorted(self.epochs, key=int):
            previous = self.epochs[key].previous
            if previous not in earlier:
                shown = ", ".join(sorted(earlier)[:5]) + (" ..." if len(earlier) > 5 else "")
                raise ValueError(f"epochs.{key}.previous: {previous!r} is not one of {shown}")
            earlier.add(f"epoch_{key}")
        return self


class Online(Section):
    """Online self-play (``spag.method: online``): train@N plays whole games with the policy it trains and
    updates it by GRPO (TRL's GRPOTrainer) every step, SPIRAL's recipe on this project's judge. Sampling is
    play's (temperature, top_k, lengths, backend), training spag's (learning rate, kl_coeff as GRPO's beta,
    clip_range as its epsilon, batch_size per device, max_length, deepspeed, launcher)."""

    words: int = knob(64, "Training words per SPAG epoch, each played in both roles (rounded down to a "
                          "multiple of words_per_step).", ge=1)
    words_per_step: int = knob(2, "Words per optimiser step; each gives two GRPO groups, (word, attacker) and "
                                  "(word, defender).", ge=1)
    games_per_word: int = knob(4, "Games played on each word at its step; a group holds its role's utterances "
                                  "in them, so the group's mean reward is a per-role baseline.", ge=2)
    win_reward: float = knob(1.0, "Zero-sum outcome reward: +r on every utterance of the winner, -r on the "
                                  "loser's, 0 in a tie.", gt=0)
    foul_penalty: float = knob(1.5, "p: an attacker who says the word gets -p on every utterance of the game, "
                                    "the defender 0 (SPIRAL scores an invalid move -1.5).", ge=0)
    scale_rewards: Literal[SCALE_REWARDS] = knob(
        "none", "none: advantage = reward - its group's mean (SPIRAL's role baseline, no scaling); group or "
                "batch: also divided by the group's or the batch's standard deviation (GRPO).")


class Benchmark(Section):
    suite: Literal[SUITES] = knob("auto", "paper (lm-eval's stock tasks on real items, offline where a pinned "
                                          "registry artifact holds them), local (a synthetic smoke test), or auto "
                                          "(paper where any of its tasks can run, else local).")
    tasks: list[str] | None = knob(None, "lm-eval tasks or groups (null: the suite's list).")
    limit: int | None = knob(None, "Items per task: a fixed random sample, the same for every model and run "
                                   "(null: all).", ge=1)


class Evaluate(Sampling):
    """Each SPAG epoch against the imitation model, on held-out words, both roles."""

    temperature: float | None = knob(0.0, "Sampling temperature; 0 = greedy (the paper's evaluation); null: "
                                             "play.temperature.", ge=0)
    seed: int = knob(0, "Picks the evaluation words and sampling seeds: fixed for every run and epoch.")
    word_set: Literal[WORD_SETS] = knob(
        "dev", "dev: a sample of the held-out words (data/words/eval.txt), the development set that settings "
               "were chosen on; fresh: the 128 nouns of spag/data/fresh_eval_words.txt, which no decision "
               "looked at (a frequency band the training words never come from).")
    words: int = knob(64, "Evaluation words (a sample of the word set; all of it when it has fewer).", ge=1)
    seeds: int = knob(1, "Games per word and role (sampling seeds seed, seed+1, ...; greedy plays one).", ge=1)
    vs_previous: bool = knob(False, "Also play each epoch against the previous one.")
    skill: bool = knob(True, "Skill metrics (hf): the clue rank of the attacker's opening lines and the guess rank "
                             "of the defender, paired per word with the imitation model's.")
    clue_lines: int = knob(2, "Fixed clue lines per word (the base model's descriptions) for the guess rank.", ge=1)
    baselines: list[Literal[BASELINE_NAMES]] = knob(
        list(BASELINE_NAMES), "No-training baselines (spag.evaluate.baselines) played against the imitation "
                              "model on the evaluation words and seeds; each epoch is compared with the "
                              "strongest, paired per word.")
    vs_baseline: bool = knob(False, "Also play each epoch head to head against the strongest baseline.")

    @model_validator(mode="after")
    def _baseline_to_play(self):
        if self.vs_baseline and not self.baselines:
            raise ValueError("vs_baseline: needs at least one name in evaluate.baselines")
        return self
    benchmark: Benchmark = Field(default_factory=Benchmark, description="Reasoning benchmarks (lm-eval).")


class Settings(Section):
    """A whole params file."""

    seed: int = knob(0, "Seed of the pipeline's random choices (each step derives its own from it).")
    model: Model = Field(default_factory=Model)
    words: Words = Field(default_factory=Words)
    game: Game = Field(default_factory=Game)
    teacher: Teacher = Field(default_factory=Teacher)
    play: Play = Field(default_factory=Play)
    reward: Reward = Field(default_factory=Reward)
    imitate: Imitate = Field(default_factory=Imitate)
    spag: Spag = Field(default_factory=Spag)
    online: Online = Field(default_factory=Online)
    evaluate: Evaluate = Field(default_factory=Evaluate)

    @model_validator(mode="after")
    def _online_learns_past_warmup(self):
        """An online epoch has few steps: a warm-up over all of them keeps the learning rate at 0 (the
        linear warm-up starts from 0), and the epoch's model is its start's, unchanged."""
        ratio = self.spag.warmup_ratio
        if self.spag.method != ONLINE or ratio == 0:
            return self
        steps = math.ceil(self.online.words // self.online.words_per_step * self.spag.epochs_per_iteration)
        if math.ceil(steps * ratio) >= steps:
            raise ValueError(f"spag.warmup_ratio: {ratio:g} warms up over all {steps} step(s) of an online epoch "
                             "(online.words / online.words_per_step), so its learning rate stays 0; set it to 0 "
                             "or train on more words")
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
    seed: int = knob(42, "Training seed (data order, LoRA initialisation).")
    resume: bool = knob(False, "Continue from the latest complete checkpoint.")
    overwrite: bool = knob(False, "Replace a previous `spag train` output at the same path (nothing else).")
    ref_cache_dir: PathStr | None = knob(None, "Where reference log-probs are cached (null: beside the data).")
    ref_batch_size: int = knob(8, "Rows per reference forward pass.", ge=1)
    live_dir: PathStr | None = knob(None, "dvclive directory (null: OUTPUT/../dvclive/<name of OUTPUT>): new, "
                                             "empty, or one spag train made (it holds .spag-output.json), as "
                                             "dvclive replaces dvc.yaml, params.yaml, metrics.json and plots/ in "
                                             "it; anything else is refused.")
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
        return self.model_copy(update={
            "learning_rate": PAPER_LEARNING_RATE[method] if self.learning_rate is None else self.learning_rate,
            "kl_coeff": PAPER_KL_COEFF[method] if self.kl_coeff is None else self.kl_coeff})


# ------------------------------------------------------------------------------------------ loading


def _key(loc: tuple) -> str:
    return ".".join(str(part) for part in loc)


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names of the section at ``loc`` (for "did you mean")."""
    for part in loc:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            return []
    return list(model.model_fields)


_EXPECTED = {"bool_type": "expected true or false", "int_type": "expected an integer",
             "float_type": "expected a number", "string_type": "expected a string",
             "dict_type": "expected a mapping", "model_type": "expected a mapping",
             "list_type": "expected a list", "int_from_float": "expected an integer"}
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
           "less_than_equal": ("<=", "le")}


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
    if kind == "extra_forbidden":
        near = difflib.get_close_matches(str(loc[-1]), _fields_at(model, loc[:-1]), n=1)
        return _key(loc), "unknown key" + (f" (did you mean {near[0]}?)" if near else "")
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", error["msg"])
        return _key(loc), f"{value} is not one of {', '.join(allowed)}"
    if kind in _EXPECTED:
        return _key(loc), f"{_EXPECTED[kind]}, got {value}"
    if kind == "missing":
        return _key(loc), "missing"
    if kind == "string_pattern_mismatch" and loc and loc[-1] == "device":
        return _key(loc), f"{value} is not a device (cpu, cuda, cuda:N or auto)"
    if kind in _BOUNDS:
        op, bound = _BOUNDS[kind]
        return _key(loc), f"must be {op} {error['ctx'][bound]:g}, got {value}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "value_error" and ": " in message:  # a model validator naming its own key
        inner, _, message = message.partition(": ")
        return _key((*loc, inner)), message
    return _key(loc), f"{message[0].lower()}{message[1:]}, got {value}"


def first_error(exc: ValidationError, source: str | os.PathLike, model: type[BaseModel] = Settings) -> ParamsError:
    """A ParamsError for the first problem of a validation, saying how many more there are."""
    errors = exc.errors()
    key, message = describe(errors[0], model)
    more = len(errors) - 1
    return ParamsError(source, key, message + (f" (and {more} more problem{'s' * (more > 1)})" if more else ""))


def validate(params: Any, source: str | os.PathLike = "params.yaml") -> Settings:
    """:class:`Settings` from a loaded params mapping, or ParamsError naming the first bad key."""
    if not isinstance(params, dict):
        raise ParamsError(source, "", f"expected a mapping of sections, got {type(params).__name__}")
    try:
        return Settings.model_validate(params)
    except ValidationError as exc:
        raise first_error(exc, source) from None


# A params file is a few hundred lines; these bounds stop a hostile or broken one early, in one line.
MAX_PARAMS_BYTES = 1 << 20  # 1 MiB
MAX_PARAMS_DEPTH = 32       # sections, keys, lists: a real file nests 4 levels


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last silently,
    so a second ``play:`` section would drop the first without a word) and a key that is a list or a
    mapping (``? [a, b]``). Merge keys (``<<: *anchor``) work as YAML defines them: the mapping's own keys
    win over merged ones."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a plain name, not a {key_node.id}", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"{key!r} is given twice",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's content, or ParamsError (one line) naming the file: no such file, not a regular file
    (a FIFO would block, /dev/zero never end), larger than :data:`MAX_PARAMS_BYTES`, nested deeper than
    :data:`MAX_PARAMS_DEPTH`, not UTF-8 or not valid YAML."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO, device or socket"
            raise ParamsError(path, "", f"is {kind}, not a params file")
        with path.open("rb") as f:
            data = f.read(MAX_PARAMS_BYTES + 1)
    except FileNotFoundError:
        raise ParamsError(path, "", "no such file") from None
    except OSError as exc:
        raise ParamsError(path, "", f"cannot be read ({exc.strerror or exc.__class__.__name__})") from None
    if len(data) > MAX_PARAMS_BYTES:
        raise ParamsError(path, "", f"is larger than {MAX_PARAMS_BYTES >> 20} MiB: not a params file")
    try:
        text = data.decode("utf-8")
    except UnicodeError as exc:
        raise ParamsError(path, "", f"is not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        _check_depth(text)
        return yaml.load(text, Loader=_UniqueKeys)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ParamsError(path, "", f"{where}not valid YAML ({getattr(exc, 'problem', None) or exc})") from None


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than :data:`MAX_PARAMS_DEPTH`, read from YAML's event stream (the parser holds
    no recursion; building the objects would, and overflows on a file of a few kilobytes)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_PARAMS_DEPTH:
                raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_PARAMS_DEPTH} levels",
                                           problem_mark=event.start_mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def apply_overrides(params: dict, overrides: Any, source: str | os.PathLike) -> dict:
    """``params`` with each ``dotted.key: value`` of ``overrides`` replacing that setting whole (a mapping
    value such as ``spag.epochs`` replaces the whole mapping). A key naming no setting is refused."""
    if not isinstance(overrides, dict):
        raise ParamsError(source, "", "expected a mapping of dotted keys (section.key: value)")
    params = copy.deepcopy(params)
    for dotted, value in overrides.items():
        *sections, name = str(dotted).split(".")
        model, where = Settings, params
        for part in [*sections, name]:
            fields = getattr(model, "model_fields", {})
            if part not in fields:
                raise ParamsError(source, dotted, "names no setting")
            annotation = fields[part].annotation
            model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        for part in sections:
            where = where.setdefault(part, {})
            if not isinstance(where, dict):
                raise ParamsError(source, dotted, f"{part} is not a section")
        where[name] = value
    return params


def load_settings(path: str | os.PathLike | None, overrides: Sequence[str | os.PathLike] = ()) -> Settings:
    """Read and validate a params file (None: the schema's defaults): the whole of it, or ParamsError (one
    line). Each file of ``overrides`` (``section.key: value`` lines) replaces the settings it names, in order
    (:func:`apply_overrides`); a value an override set that the schema refuses is told as that file's."""
    source = Path(path) if path is not None else "the defaults"
    params = read_yaml(Path(path)) if path is not None else {}
    params = {} if params is None else params
    origins: dict[str, str | os.PathLike] = {}
    for override in overrides:
        if not isinstance(params, dict):
            break  # validate names the problem
        changes = read_yaml(Path(override)) or {}
        params = apply_overrides(params, changes, override)
        origins.update({str(key): override for key in changes})
    if not isinstance(params, dict) or not origins:
        return validate(params, source)
    try:
        return Settings.model_validate(params)
    except ValidationError as exc:
        key, _ = describe(exc.errors()[0])
        origin = next((o for k, o in reversed(origins.items()) if key == k or key.startswith(k + ".")), None)
        raise first_error(exc, origin or source) from None


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
