"""Online self-play on TRL's GRPOTrainer (spag.method: online): the rollout's groups, slots and masks, the
direction of an update, the live policy playing every step, and a run resumed after a kill.

Games with known outcomes come from a scripted player (the real engine, judge and trainer around it); the
games of the live policy from a tiny real Llama built in-process.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from spag.config import Online, Reward, TrainConfig, load_settings
from spag.game.taboo.outcomes import ATTACKER, DEFENDER
from spag.play.engine import PlayConfig
from spag.players import Reply
from spag.players.base import FINISH_LENGTH
from spag.runtime.errors import DataError, ParamsError
from spag.testing import launcher_failure, make_tiny_checkpoint
from spag.train.online import OnlineGames, group_prompt, online_arguments, parse_group_prompt

ROOT = Path(__file__).resolve().parent.parent
A, D = ATTACKER, DEFENDER

# Three games on "coffee", each decided differently by the judge: the attacker wins, fouls, loses.
WIN, FOUL, LOSE = (
    "What dark drink do people have first thing in the morning?",
    "I could drink coffee all day.",
    "Think of a hot drink that wakes you up.",
)
LOSING_LINE, RIGHT_GUESS = "Usually coffee, with some milk.", "I know the word! It is coffee"
SCRIPT = {("coffee",): [WIN, FOUL, LOSE], (WIN,): [LOSING_LINE], (LOSE,): [RIGHT_GUESS]}


class ScriptedPlayer:
    """Says the line that follows the conversation so far (the first line: by the attacker's word); the n-th
    game of one call to reach the same point says the n-th line given for it."""

    name = "script"

    def __init__(self, script):
        self.script = script

    @staticmethod
    def conversation(prompt: str) -> tuple:
        if "The conversation so far:\n" not in prompt:
            return (re.search(r'The target word is "([^"]+)"', prompt).group(1),)
        lines = prompt.split("The conversation so far:\n", 1)[1].split("\n\nIt is your turn", 1)[0]
        return tuple(line.split(": ", 1)[1] for line in lines.split("\n"))

    def generate(self, prompts, **_):
        seen = Counter()
        replies = []
        for prompt in prompts:
            key = self.conversation(prompt)
            lines = self.script[key]
            replies.append(Reply(lines[seen[key] % len(lines)], 4))
            seen[key] += 1
        return replies


GAMES = OnlineGames(
    play=PlayConfig.of(max_turns=2, temperature=1.0, seed=0),
    online=Online(words_per_step=1, games_per_word=3),
)
QUIET = {"live": False, "show_progress": False, "logging_steps": 1, "warmup_ratio": 0.0, "seed": 0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


# ------------------------------------------------------------------------------------------ settings


def test_group_prompts_name_word_and_role():
    assert parse_group_prompt(group_prompt("ice cream", D), (A, D)) == (D, "ice cream")
    with pytest.raises(ValueError, match="not an online group prompt"):
        parse_group_prompt("referee: coffee", (A, D))


def test_online_games_refuse_what_cannot_learn_online():
    with pytest.raises(ValueError, match="play.backend: online self-play plays with the policy it trains"):
        OnlineGames(play=PlayConfig.of(backend="openai"), online=Online())
    with pytest.raises(ValueError, match=r"play.temperature: .*temperature > 0"):
        OnlineGames(play=PlayConfig.of(temperature=0.0), online=Online())


def test_with_chips_each_utterance_earns_its_players_chips_in_the_hand():
    """reward.payoff: chips (Kuhn poker): every sample's reward is its role's chips won or lost in its game, the
    loser's negative; a rule break loses the breaker its ante; the default still pays a win as a win."""
    from spag.game.kuhn import FIRST, SECOND
    from spag.testing import build_tiny_tokenizer
    from spag.train.online import GameRollout

    def hand(deal, *actions):
        history = [{"role": (FIRST, SECOND)[i % 2], "content": f"[{a}]"} for i, a in enumerate(actions)]
        return {
            "target_word": deal,
            "max_turns": 2,
            "history": history,
            "outcome": PlayConfig.of("kuhn-poker").game.judge(deal, history).outcome,
        }

    hands = [hand("Q-K", "bet", "call"), hand("K-J", "check", "bet", "fold"), hand("K-Q", "check", "oops")]
    config = PlayConfig.of("kuhn-poker", max_turns=2, temperature=1.0, seed=0)
    tokenizer = build_tiny_tokenizer()

    def rewards(payoff, role):
        games = OnlineGames(play=config, online=Online(games_per_word=3), reward=Reward(payoff=payoff))
        rollout = GameRollout(games, tokenizer, 2048, name="t", fingerprint="f")
        return [s.reward for s in rollout._group_samples(role, "K-Q", 6, hands, config)]

    # slots: game g's k-th utterance of the role at g * 2 + k
    assert rewards("chips", FIRST) == [-2.0, None, -1.0, -1.0, 1.0, None]
    assert rewards("chips", SECOND) == [2.0, None, 1.0, None, -1.0, None]
    assert rewards("wins", SECOND) == [1.0, None, 1.0, None, -1.5, None]
    with pytest.raises(ValueError, match="reward.payoff: the game taboo is not played for chips"):
        OnlineGames(play=PlayConfig.of(temperature=1.0), online=Online(), reward=Reward(payoff="chips"))


def test_one_optimiser_step_per_batch_of_games():
    # 2 roles x 1 word x 3 games x 2 turns = 12 samples a step
    args = online_arguments(GAMES, TrainConfig(batch_size=4, kl_coeff=0.05, clip_range=0.3), world=1)
    assert (args["gradient_accumulation_steps"], args["num_generations"]) == (3, 6)
    assert (args["beta"], args["epsilon"], args["scale_rewards"], args["shuffle_dataset"]) == (
        0.05,
        0.3,
        "none",
        False,
    )
    assert online_arguments(GAMES, TrainConfig(batch_size=3), world=2)["gradient_accumulation_steps"] == 2
    with pytest.raises(DataError, match=r"spag.batch_size: 5 x 1 process\(es\) must divide the 12 samples"):
        online_arguments(GAMES, TrainConfig(batch_size=5), world=1)


def test_the_method_and_its_section_are_settings(tmp_path):
    params = tmp_path / "params.yaml"
    text = (ROOT / "params.yaml").read_text()
    params.write_text(text.replace("  method: offline-po", "  method: online"))
    settings = load_settings(params)
    assert settings.spag.method == "online" and settings.online.scale_rewards == "none"
    params.write_text(text.replace("  scale_rewards: none", "  scale_rewards: std"))
    with pytest.raises(ParamsError, match="online.scale_rewards: 'std' is not one of none, group, batch"):
        load_settings(params)
    params.write_text(text.replace("  games_per_word: 4", "  games_per_word: 1"))
    with pytest.raises(ParamsError, match="online.games_per_word: must be >= 2"):
        load_settings(params)


def test_an_online_epoch_that_would_only_warm_up_is_refused(tmp_path):
    """A linear warm-up starts at a learning rate of 0: over all of an epoch's steps it leaves the model
    unchanged (one step of 2 words did, at spag.warmup_ratio 0.03)."""

    def settings(*lines):
        override = tmp_path / "override.yaml"
        override.write_text("".join(f"{line}\n" for line in lines))
        return load_settings(ROOT / "params.yaml", [override])

    with pytest.raises(
        ParamsError,
        match=r"spag.warmup_ratio: 0.03 warms up over all 1 step\(s\) of an online "
        r"epoch .*learning rate stays 0",
    ):
        settings("spag.method: online", "online.words: 2", "spag.warmup_ratio: 0.03")
    assert settings("spag.method: online", "online.words: 2", "spag.warmup_ratio: 0").online.words == 2
    assert settings("spag.method: online", "online.words: 16", "spag.warmup_ratio: 0.03").online.words == 16
    assert settings("spag.method: offline-po", "online.words: 2", "spag.warmup_ratio: 0.03").online.words == 2


# ------------------------------------------------------------------------------------------ the rollout


@pytest.mark.slow
def test_the_rollout_gives_each_role_its_own_utterances_with_its_game_reward(tiny, tmp_path):
    """One (word, role) group per dataset prompt: slot g * max_turns + k is the role's k-th utterance in game
    g, with the exact prompt it was given; the opponent's lines are never a completion; empty slots carry
    no loss and no reward."""
    from spag.models.loading import load_tokenizer
    from spag.train.online import online_trainer

    online = online_trainer(
        tiny,
        ["coffee"],
        tmp_path / "model",
        games=GAMES,
        config=TrainConfig(batch_size=12, **QUIET),
        episodes_dir=tmp_path / "episodes",
        player=ScriptedPlayer(SCRIPT),
    )
    prompts = [group_prompt("coffee", A)] * 6 + [group_prompt("coffee", D)] * 6
    out = online.trainer.rollout_func(prompts, online.trainer)
    tok = load_tokenizer(tiny)
    said = [
        tok.decode(ids[:-1]) if mask[0] else None for ids, mask in zip(out["completion_ids"], out["env_mask"])
    ]
    # attacker: game 0 (won), 1 (fouled), 2 (lost), one utterance each; defender: games 0 (lost) and 2 (won)
    assert said == [WIN, None, FOUL, None, LOSE, None, LOSING_LINE, None, None, None, RIGHT_GUESS, None]
    assert out["outcome_reward"] == [1.0, None, -1.5, None, -1.0, None, -1.0, None, None, None, 1.0, None]
    assert all(ids[-1] == tok.eos_token_id for ids in out["completion_ids"])
    for ids, mask, text in zip(out["completion_ids"], out["env_mask"], said):
        assert mask == ([1] * len(ids) if text else [0])
    # the defender's prompt holds the attacker's line it answers, and not the word
    defender_prompt = tok.decode(out["prompt_ids"][6])
    assert (
        WIN in defender_prompt
        and '"coffee"' not in defender_prompt
        and "You are the defender" in defender_prompt
    )
    assert '"coffee"' in tok.decode(out["prompt_ids"][0])
    episodes = sorted((tmp_path / "episodes").glob("shard-*.parquet"))
    assert [p.name for p in episodes] == ["shard-00000.parquet"]  # one shard per step, numbered by it


def sequence_logprobs(model_dir, rows):
    """log π(completion | prompt) of each (prompt, completion), as the player's input and the trainer see it."""
    from spag.models.loading import load_model
    from spag.rewards.rows import validate_row
    from spag.train.data import encode_rows
    from spag.train.reference import compute_reference_logprobs

    model, tok = load_model(model_dir, device="cpu")
    rows = [
        validate_row(
            {
                "prompt": p,
                "completion": c,
                "reward": 0.0,
                "weight": 1.0,
                "role": None,
                "kind": "sft",
                "target_word": None,
                "turn": None,
                "episode": None,
            },
            i,
        )
        for i, (p, c) in enumerate(rows)
    ]
    encoded = encode_rows(rows, tok, 1024, show_progress=False)
    logp = compute_reference_logprobs(model, encoded, tok.pad_token_id, batch_size=8, show_progress=False)
    return [logp[i] for i in range(len(rows))]


@pytest.mark.slow
def test_the_winners_utterances_rise_and_the_fouling_and_losing_ones_fall(tiny, tmp_path):
    from spag.train.online import run_online

    prompt = GAMES.play.prompt
    lines = {  # (what it is, role): (prompt, utterance)
        ("attacker wins", A): (prompt(A, "coffee", []), WIN),
        ("attacker fouls", A): (prompt(A, "coffee", []), FOUL),
        ("attacker loses", A): (prompt(A, "coffee", []), LOSE),
        ("defender loses", D): (prompt(D, "coffee", [{"role": A, "content": WIN}]), LOSING_LINE),
        ("defender wins", D): (prompt(D, "coffee", [{"role": A, "content": LOSE}]), RIGHT_GUESS),
    }
    before = sequence_logprobs(tiny, list(lines.values()))
    trained = run_online(
        tiny,
        ["coffee"],
        tmp_path / "model",
        games=GAMES,
        episodes_dir=tmp_path / "episodes",
        config=TrainConfig(batch_size=12, learning_rate=2e-3, max_steps=6, kl_coeff=0.01, **QUIET),
        player=ScriptedPlayer(SCRIPT),
    )
    moved = dict(
        zip(lines, (a - b for a, b in zip(sequence_logprobs(trained, list(lines.values())), before)))
    )
    # advantages (reward minus the group's mean): attacker +1.5, -1.0, -0.5; defender -1, +1
    assert moved["attacker wins", A] > 0.05 and moved["defender wins", D] > 0.05, moved
    assert moved["attacker fouls", A] < -0.05 and moved["defender loses", D] < -0.05, moved
    assert moved["attacker loses", A] < 0, moved
    summary = json.loads((trained / "training_summary.json").read_text())
    assert summary["method"] == "online" and summary["steps"] == 6 and summary["games"] == 18
    assert summary["outcomes"] == {
        "attacker_wins": 6,
        "defender_wins": 6,
        "tie": 0,
        "attacker_breaks_rules": 6,
    }


class CutPlayer(ScriptedPlayer):
    """The script's lines, each one cut at max_new_tokens (as a model that never ends its reply)."""

    def generate(self, prompts, **kw):
        return [Reply(r.text, r.n_tokens, FINISH_LENGTH) for r in super().generate(prompts, **kw)]


@pytest.mark.slow
def test_a_run_whose_every_utterance_is_left_out_says_so(tiny, tmp_path, capsys):
    """Every utterance cut at max_new_tokens (so masked): the run trained on placeholder
    tokens without a word. It still runs, but says in one line that nothing was learned, and why."""
    from spag.train.online import run_online

    trained = run_online(
        tiny,
        ["coffee"],
        tmp_path / "model",
        games=GAMES,
        episodes_dir=tmp_path / "episodes",
        config=TrainConfig(batch_size=12, max_steps=1, **QUIET),
        player=CutPlayer(SCRIPT),
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: online training: all 5 utterances of this run's games were left out of training "
        "(5 cut at play.max_new_tokens): its steps trained on no token, so the model learned nothing "
        "from its games (reward.keep_truncated keeps the cut ones)"
    ]
    summary = json.loads((trained / "training_summary.json").read_text())
    assert summary["utterances"] == {"trained": 0, "empty": 0, "truncated": 5, "too_long": 0}
    assert summary["episodes"] == str(tmp_path / "episodes")  # where the games are


# ------------------------------------------------------------------------------ the live policy, resumed


def _run_script(tiny, out: Path, **knobs) -> list[str]:
    """The command that runs the live-policy run of these tests (in another process, to be killed)."""
    config = TrainConfig(
        batch_size=3,
        learning_rate=5e-2,
        save_steps=1,
        save_total_limit=4,
        keep_checkpoints=True,
        **{**QUIET, **knobs},
    )
    code = """
import json, sys
from spag.config import TrainConfig
from spag.train.online import OnlineGames, run_online
games = OnlineGames.from_json(json.loads(sys.argv[1]))
run_online(sys.argv[2], json.loads(sys.argv[6]), sys.argv[3], games=games, episodes_dir=sys.argv[4],
           config=TrainConfig.model_validate_json(sys.argv[5]))
"""
    return [
        sys.executable,
        "-c",
        code,
        json.dumps(LIVE.as_json()),
        str(tiny),
        str(out / "model"),
        str(out / "episodes"),
        config.model_dump_json(),
        json.dumps(LIVE_WORDS),
    ]


# A random model's replies rarely end by themselves (keep_truncated lets every utterance be a sample) and
# rarely say a word: one-letter words under the original's substring judge decide about half its games.
LIVE = OnlineGames(
    play=PlayConfig.of(max_turns=1, max_new_tokens=6, temperature=1.0, seed=7, rules="original"),
    online=Online(words_per_step=1, games_per_word=3),
    reward=Reward(keep_truncated=True),
)
LIVE_WORDS = ["y", "w", "k", "y"]


@pytest.fixture(scope="module")
def whole_run(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    subprocess.run(_run_script(tiny, out), check=True, capture_output=True)
    return out


@pytest.mark.slow
def test_each_step_is_played_by_the_policy_as_the_previous_steps_left_it(tiny, whole_run):
    """The games of step 1 are exactly the games the model saved after one update plays (same seeds)."""
    import dataclasses

    from spag.game.episodes import read_episodes
    from spag.play.engine import run_games
    from spag.players.base import derive_seed

    shards = sorted((whole_run / "episodes").glob("shard-*.parquet"))
    assert [p.name for p in shards] == [f"shard-0000{i}.parquet" for i in range(4)]
    step0, step1 = read_episodes(shards[0]), read_episodes(shards[1])
    assert (
        len({e["outcome"] for e in step0}) > 1
    )  # games that differ: the first update has something to learn
    assert [e["target_word"] for e in step1] == ["w"] * 3
    assert all(e["attacker_model"].endswith("+online@step-1") for e in step1)
    config = dataclasses.replace(LIVE.play, seed=derive_seed(LIVE.play.seed, "online", 1, 0))
    after_one_update = str(whole_run / "model" / "checkpoints" / "checkpoint-1")
    replayed = run_games(after_one_update, after_one_update, ["w"] * 3, config, show_progress=False)
    assert [e["history"] for e in replayed] == [e["history"] for e in step1]
    from_the_start = run_games(str(tiny), str(tiny), ["w"] * 3, config, show_progress=False)
    assert [e["history"] for e in from_the_start] != [e["history"] for e in step1]


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_one(tiny, whole_run, tmp_path):
    import torch
    from safetensors.torch import load_file

    from spag.game.episodes import read_episodes
    from spag.train.online import run_online

    run = subprocess.Popen(_run_script(tiny, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = tmp_path / "model" / "checkpoints"
    deadline = time.monotonic() + 300
    while (
        not (checkpoints / "checkpoint-2" / "trainer_state.json").exists()
        and run.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert not (tmp_path / "model" / "training_summary.json").exists(), "the run should have been killed"

    config = TrainConfig(
        batch_size=3,
        learning_rate=5e-2,
        save_steps=1,
        save_total_limit=4,
        keep_checkpoints=True,
        resume=True,
        **QUIET,
    )
    resumed = run_online(
        tiny, LIVE_WORDS, tmp_path / "model", games=LIVE, episodes_dir=tmp_path / "episodes", config=config
    )
    summary = json.loads((resumed / "training_summary.json").read_text())
    assert summary["resumed_from"] and summary["steps"] == 4 and summary["games"] == 12
    whole = load_file(whole_run / "model" / "model.safetensors")
    for name, tensor in load_file(resumed / "model.safetensors").items():
        assert torch.allclose(tensor, whole[name], rtol=1e-5, atol=1e-6), name
    histories = [
        [e["history"] for e in read_episodes(p)] for p in sorted((tmp_path / "episodes").glob("*.parquet"))
    ]
    assert histories == [
        [e["history"] for e in read_episodes(p)] for p in sorted((whole_run / "episodes").glob("*.parquet"))
    ]


# ------------------------------------------------------------------------------------------ the GPU path


@pytest.mark.slow
def test_the_games_of_a_step_play_on_trls_colocated_vllm_engine(tmp_path):
    """With play.backend vllm, TRL starts its colocated engine (vLLM's CPU build here) and the rollout plays
    the step's games on it through the project's vllm player. A CPU stops there: vLLM's CPU build drops each
    layer's weights once it has packed them, so TRL's weight push before the next step needs a GPU."""
    import dataclasses

    from spag.game.episodes import read_episodes
    from spag.train.online import online_trainer

    model = make_tiny_checkpoint(tmp_path / "tiny", heads=2)  # vLLM's CPU attention: head size >= 32
    games = dataclasses.replace(
        LIVE,
        play=dataclasses.replace(
            LIVE.play,
            sampling=LIVE.play.sampling.model_copy(
                update={"backend": "vllm", "gpu_memory_utilization": 0.05}
            ),
        ),
    )
    online = online_trainer(
        model,
        ["y"],
        tmp_path / "model",
        games=games,
        config=TrainConfig(batch_size=3, **QUIET),
        episodes_dir=tmp_path / "episodes",
    )
    assert online.trainer.use_vllm and online.trainer.vllm_generation.mode == "colocate"
    out = online.trainer.rollout_func([group_prompt("y", A)] * 3 + [group_prompt("y", D)] * 3, online.trainer)
    played = read_episodes(tmp_path / "episodes")
    assert len(played) == 3 and all(e["attacker_model"].endswith("+online@step-0") for e in played)
    from spag.models.loading import load_tokenizer

    tok = load_tokenizer(model)
    said = [e["history"][0]["content"] for e in played] + [
        e["history"][1]["content"] for e in played if len(e["history"]) > 1
    ]
    decoded = [tok.decode(ids[:-1]) for ids, mask in zip(out["completion_ids"], out["env_mask"]) if mask[0]]
    assert sorted(decoded) == sorted(said)


# ------------------------------------------------------------------------------------------ the GPU preset


@pytest.mark.slow
def test_the_gpu_preset_trains_an_online_epoch_at_toy_size_under_zero3(tmp_path):
    """configs/online.yaml on the paper's setting, shrunk by paper-toy.yaml and online-toy.yaml, a tiny model
    in place of the imitation model: train@1 runs as the pipeline runs it, two processes under torchrun with
    ZeRO-3 (DeepSpeed's CPU accelerator), the games played with the paper's prompts and judge."""
    import shutil

    import yaml

    from spag.game.episodes import read_episodes
    from spag.train.bookkeeping import read_summary

    work = tmp_path / "project"
    make_tiny_checkpoint(work / "data" / "imitation" / "model")
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "config",
            "show",
            "configs/paper.yaml",
            "--override",
            "configs/paper-toy.yaml",
            "--override",
            "configs/online.yaml",
            "--override",
            "configs/online-toy.yaml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    params = yaml.safe_load(shown.stdout)
    assert (
        params["spag"]["method"] == "online" and params["spag"]["deepspeed"] == "configs/deepspeed_zero3.json"
    )
    assert params["game"]["play_prompts"] == "original" and params["game"]["rules"] == "original"
    params["spag"]["epochs"] = {"1": {"previous": "imitation"}}
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copytree(ROOT / "stages", work / "stages")
    (work / "configs").mkdir()
    shutil.copy(ROOT / "configs" / "deepspeed_zero3.json", work / "configs")
    words = work / "data" / "words"
    words.mkdir(parents=True)
    for name in ("train.txt", "all.txt"):
        (words / name).write_text("apple\nriver\ncloud\nhorse\ntable\n")
    # the paper's input files the preflight asks for (the stages before train@1 have no dvc.lock here)
    for name, text in (
        ("all_target_words.txt", "apple\n"),
        ("gpt4_game_top30k_results.json", "[]"),
        ("alpaca_data.json", "[]"),
    ):
        (work / "data" / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "stages/train.py", "1"],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    assert done.returncode == 0, launcher_failure(done.stderr)
    # DeepSpeed's gathers and scatters under torch 2.13 warned at every call (two lines each, hundreds here)
    assert "is deprecated. Please use `torch.distributed" not in done.stderr

    summary = read_summary(work / "data/epoch_1/model")
    assert summary["method"] == "online" and summary["steps"] == params["online"]["words"]
    assert summary["provenance"]["processes"] == 2 and summary["provenance"]["deepspeed"] is True
    games = read_episodes(work / "data/epoch_1/online/episodes")
    assert len(games) == summary["games"] > 0 and {
        json.loads(g["game_settings"])["rules"] for g in games
    } == {"original"}
    assert {p.name.split("-")[1] for p in (work / "data/epoch_1/online/episodes").glob("*.parquet")} == {
        "r0",
        "r1",
    }


def test_launcher_failure_keeps_the_fault_and_drops_the_module_list():
    """A worker that aborts prints the fault handler's dump, then a one-line list of thousands of extension
    modules, after hundreds of warnings (each two lines: where and why, then the source line); what a failed
    launcher test shows keeps the fault and the stack, not that list nor the warnings' lines."""
    from spag.testing import launcher_failure

    warning = (
        "/venv/torch/distributed/c10d_logger.py:83: FutureWarning: `all_gather_into_tensor` is deprecated.\n"
        "  return func(*args, **kwargs)\n"
    )
    worker = (
        warning * 500 + "Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n"
        '  File "spag/train/online.py", line 9 in step\n\nExtension modules: '
        + ", ".join(f"module{n}" for n in range(2000))
        + " (total: 2000)\n"
    )
    launcher = (
        'Traceback (most recent call last):\n  File "torchrun"\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  exitcode  : -6\n"
    )
    workers, _, end = launcher_failure(worker + launcher).partition("--- the launcher's end ---")
    assert "Fatal Python error: Aborted" in workers and "spag/train/online.py" in workers
    assert "module1999" not in workers and "exitcode  : -6" in end
    assert "return func" not in workers and "deprecated" not in workers
