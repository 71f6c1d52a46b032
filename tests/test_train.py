"""Tokenisation, the reference cache and whole training runs on a tiny real Llama (no download)."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from spag.game.taboo.prompts import training_prompt_with_bounds
from spag.harness import training
from spag.models.chat import to_model_input
from spag.rewards.rows import drop_history_lines, read_rows, validate_row
from spag.runtime.errors import DataError
from spag.testing import make_tiny_checkpoint
from spag.train.bookkeeping import read_summary
from spag.train.data import collate, encode_rows
from spag.train.reference import compute_reference_logprobs, read_cache

GAME_UTTERANCES = [
    "Think of the hot drink people have first thing in the morning.",
    "I like a cup of tea in the morning.",
    "It comes from roasted beans and is brown and bitter.",
    "I know the word! It is coffee",
]


def game_rows(seed=0):
    rng = random.Random(seed)
    rows, history = [], []
    for turn, utterance in enumerate(GAME_UTTERANCES):
        role = "attacker" if turn % 2 == 0 else "defender"
        prompt, bounds = training_prompt_with_bounds(role, "coffee", history, 5, rng)
        rows.append(
            {
                "prompt": prompt,
                "completion": utterance,
                "history_bounds": bounds,
                "reward": 0.4 if role == "defender" else -0.3,
                "weight": 1.0,
                "role": role,
                "kind": "game",
                "target_word": "coffee",
                "turn": turn,
                "episode": "e0",
            }
        )
        history = history + [{"role": role, "content": utterance}]
    rows.append(
        {
            "prompt": "Name a yellow fruit.",
            "completion": "A banana.",
            "reward": None,
            "weight": 1.0,
            "role": None,
            "kind": "sft",
            "target_word": None,
            "turn": None,
            "episode": None,
        }
    )
    return rows


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from spag.models.loading import load_tokenizer

    return load_tokenizer(tiny)


FAST = {
    "batch_size": 5,
    "grad_accum": 1,
    "logging_steps": 1,
    "warmup_ratio": 0.0,
    "show_progress": False,
    "seed": 0,
}


# ------------------------------------------------------------------------------------- tokenisation


def test_encode_rows_matches_the_play_time_input_and_ends_with_eos(tokenizer):
    rows = [validate_row(r, i) for i, r in enumerate(game_rows())]
    encoded = encode_rows(rows, tokenizer, max_length=4096, show_progress=False)
    prompt_ids = tokenizer(to_model_input(tokenizer, rows[1]["prompt"]), add_special_tokens=False)[
        "input_ids"
    ]
    completion_ids = tokenizer(rows[1]["completion"], add_special_tokens=False)["input_ids"]
    assert encoded.input_ids[1] == prompt_ids + completion_ids + [tokenizer.eos_token_id]
    assert encoded.completion_lengths[1] == len(completion_ids) + 1
    assert encoded.prompts_shortened == encoded.rows_too_long == 0


def _ids(tokenizer, prompt):
    return tokenizer(to_model_input(tokenizer, prompt), add_special_tokens=False)["input_ids"]


def test_a_long_prompt_gives_up_its_oldest_history_lines_never_the_rules_or_the_target_word(tokenizer):
    rows = [validate_row(r, i) for i, r in enumerate(game_rows())]
    last = rows[3]  # the defender's guess, after three lines of history
    full = len(_ids(tokenizer, last["prompt"])) + len(tokenizer(last["completion"])["input_ids"]) + 1
    first_line = len(tokenizer(GAME_UTTERANCES[0])["input_ids"])
    encoded = encode_rows([last], tokenizer, max_length=full - first_line // 2, show_progress=False)
    assert (
        encoded.prompts_shortened == 1 and encoded.history_lines_dropped == 1 and encoded.rows_too_long == 0
    )
    text = tokenizer.decode(encoded.input_ids[0])
    assert GAME_UTTERANCES[0] not in text  # the oldest line went
    assert GAME_UTTERANCES[1] in text and GAME_UTTERANCES[2] in text  # the later ones stayed
    assert (
        "Adversarial Taboo" in text or "Rules of the game" in text
    )  # the rules stayed (every training text)
    assert text.endswith(GAME_UTTERANCES[3] + tokenizer.eos_token)  # the completion whole, with its eos
    # The attacker's row keeps its target word however short the budget (while the rest still fits).
    attacker = rows[2]
    one_gone = _ids(tokenizer, drop_history_lines(attacker["prompt"], attacker["history_bounds"], 1))
    budget = len(one_gone) - 1 + len(tokenizer(attacker["completion"])["input_ids"]) + 1
    squeezed = encode_rows([attacker], tokenizer, max_length=budget, show_progress=False)
    assert squeezed.history_lines_dropped == 2  # both earlier lines went, one was not enough
    assert '"coffee"' in tokenizer.decode(squeezed.input_ids[0])


def test_a_row_too_long_without_its_history_is_left_out_not_cut(tokenizer):
    rows = [validate_row(r, i) for i, r in enumerate(game_rows())]
    encoded = encode_rows(rows, tokenizer, max_length=40, show_progress=False)
    assert encoded.rows_too_long == 4 and len(encoded) == 1  # the four game rows; the short SFT row fits
    assert encoded.input_ids[0][-encoded.completion_lengths[0] :] == (
        tokenizer("A banana.", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    )
    nothing = encode_rows(rows, tokenizer, max_length=4, show_progress=False)
    assert len(nothing) == 0 and nothing.rows_too_long == len(rows)
    with pytest.raises(ValueError, match="at least 2"):
        encode_rows(rows, tokenizer, max_length=1, show_progress=False)


def test_history_bounds_that_do_not_fit_the_prompt_are_refused():
    row = {"prompt": "short", "completion": "x", "history_bounds": [0, 99]}
    with pytest.raises(DataError, match="history_bounds"):
        validate_row(row, 3, "rows.jsonl")


def test_collate_left_pads_and_masks_by_length(tokenizer):
    items = [
        {"input_ids": [5, 6, 7, 8], "completion_length": 2, "weight": 1.0, "reward": 0.5, "is_game": True},
        # the completion ends with the pad id (pad may equal eos): still counted, by length
        {"input_ids": [9, 0], "completion_length": 1, "weight": 2.0, "reward": 0.0, "is_game": False},
    ]
    batch = collate(items, pad_token_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [0, 0, 9, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    assert batch["completion_mask"].tolist() == [[0, 0, 1, 1], [0, 0, 0, 1]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
    assert batch["logits_to_keep"] == 3
    assert "ref_logp" not in batch


def test_bad_rows_name_the_record(tmp_path):
    rows = game_rows()
    del rows[2]["completion"]
    with pytest.raises(DataError, match=r"record 2: missing field 'completion'"):
        read_rows(write_rows(tmp_path / "a.jsonl", rows))
    rows = game_rows()
    rows[1]["weight"] = "heavy"
    with pytest.raises(DataError, match=r"record 1: 'weight' must be a number"):
        read_rows(write_rows(tmp_path / "b.jsonl", rows))
    rows = game_rows()
    rows[3]["reward"] = None
    with pytest.raises(DataError, match=r"record 3: game row without a reward"):
        training.train("offline-po", "unused", write_rows(tmp_path / "c.jsonl", rows), tmp_path / "out")


# ------------------------------------------------------------------------------------- training runs


def mean_nll(model_dir, rows):
    from spag.models.loading import load_model

    model, tok = load_model(model_dir, device="cpu")
    encoded = encode_rows([validate_row(r, i) for i, r in enumerate(rows)], tok, 2048, show_progress=False)
    logp = compute_reference_logprobs(model, encoded, tok.pad_token_id, batch_size=8, show_progress=False)
    return -sum(logp.values()) / len(logp)


@pytest.mark.slow
def test_sft_training_lowers_the_loss_and_saves_a_plain_hf_directory(tiny, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = game_rows()
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = training.train(
        "sft",
        tiny,
        data,
        tmp_path / "sft",
        learning_rate=3e-3,
        max_steps=12,
        live_dir=tmp_path / "live",
        **FAST,
    )
    before, after = mean_nll(tiny, rows), mean_nll(out, rows)
    assert after < before - 0.5, (before, after)

    summary = read_summary(out)
    assert summary["steps"] == 12 and summary["rows"] == 5 and summary["tokens"] > 0
    assert summary["reference"] == {"mode": "none"}
    assert not (out / "checkpoints").exists()

    model = AutoModelForCausalLM.from_pretrained(out)
    saved_tok = AutoTokenizer.from_pretrained(out)
    assert (
        saved_tok.pad_token_id == tokenizer.pad_token_id and saved_tok.eos_token_id == tokenizer.eos_token_id
    )
    assert model.config.pad_token_id == tokenizer.pad_token_id
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert saved_tok.chat_template == tokenizer.chat_template

    losses = (tmp_path / "live" / "plots" / "metrics" / "train" / "loss.tsv").read_text().splitlines()
    assert losses[0] == "step\tloss" and len(losses) == 13


@pytest.mark.slow
def test_offline_po_reference_cache_is_reused_and_keyed_by_the_data(tiny, tmp_path):
    rows = game_rows()
    data = write_rows(tmp_path / "rows.jsonl", rows)
    live = tmp_path / "live"
    first = read_summary(
        training.train(
            "offline-po", tiny, data, tmp_path / "po1", learning_rate=1e-3, max_steps=2, live_dir=live, **FAST
        )
    )
    cache = first["reference"]["cache"]
    assert first["reference"]["mode"] == "precomputed" and first["reference"]["reused"] is False
    assert cache.startswith(str(data) + ".ref-")

    # Before any update the policy is the reference: the cached log-probs were computed with exactly
    # the tokenisation, padding and forward pass of training, so the first step sees ratio 1 and KL 0.
    metrics = live / "plots" / "metrics" / "train"
    first_kl = float((metrics / "kl.tsv").read_text().splitlines()[1].split("\t")[1])
    first_ratio = float((metrics / "ratio_mean.tsv").read_text().splitlines()[1].split("\t")[1])
    assert abs(first_kl) < 1e-5 and abs(first_ratio - 1) < 1e-5
    for name in ("loss_po", "loss_sft", "clip_fraction"):
        assert (metrics / f"{name}.tsv").exists()

    second = read_summary(
        training.train("offline-po", tiny, data, tmp_path / "po2", max_steps=1, **FAST, live=False)
    )
    assert second["reference"]["cache"] == cache and second["reference"]["reused"] is True

    # Rewards and weights do not change what the reference says; the cache still applies.
    reweighted = [dict(r, weight=2.0) for r in rows]
    write_rows(data, reweighted)
    third = read_summary(
        training.train("offline-po", tiny, data, tmp_path / "po3", max_steps=1, **FAST, live=False)
    )
    assert third["reference"]["reused"] is True

    # A different completion is different data: a new cache, computed afresh.
    changed = [dict(r) for r in reweighted]
    changed[0]["completion"] = "Something hot and dark that people drink with breakfast."
    write_rows(data, changed)
    fourth = read_summary(
        training.train("offline-po", tiny, data, tmp_path / "po4", max_steps=1, **FAST, live=False)
    )
    assert fourth["reference"]["reused"] is False and fourth["reference"]["cache"] != cache
    from pathlib import Path

    assert read_cache(Path(cache), "not-the-key", len(rows)) is None


@pytest.mark.slow
def test_resume_continues_from_the_latest_checkpoint(tiny, tmp_path):
    data = write_rows(tmp_path / "rows.jsonl", game_rows())
    out = tmp_path / "imitation"
    common = dict(learning_rate=1e-3, save_steps=2, live_dir=tmp_path / "live", **FAST)
    training.train("sft-kl", tiny, data, out, max_steps=2, keep_checkpoints=True, **common)
    assert (out / "checkpoints" / "checkpoint-2").is_dir()

    training.train("sft-kl", tiny, data, out, max_steps=4, resume=True, **common)
    summary = read_summary(out)
    assert summary["steps"] == 4
    assert summary["resumed_from"].endswith("checkpoint-2")
    assert not (out / "checkpoints").exists()
    steps = [
        line.split("\t")[0]
        for line in (tmp_path / "live" / "plots" / "metrics" / "train" / "loss.tsv")
        .read_text()
        .splitlines()[1:]
    ]
    assert steps == ["1", "2", "3", "4"]
    # the mean loss covers all four steps, not only the two after the resume
    losses = [
        float(line.split("\t")[1])
        for line in (tmp_path / "live" / "plots" / "metrics" / "train" / "loss.tsv")
        .read_text()
        .splitlines()[1:]
    ]
    assert summary["mean_loss"] == pytest.approx(sum(losses) / 4, rel=1e-3)


@pytest.mark.slow
def test_lora_on_the_fly_reference_is_merged_on_save(tiny, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    data = write_rows(tmp_path / "rows.jsonl", game_rows())
    out = training.train(
        "sft-kl",
        tiny,
        data,
        tmp_path / "lora",
        learning_rate=5e-3,
        max_steps=3,
        lora_r=4,
        ref_on_the_fly=True,
        live=False,
        **FAST,
    )
    assert read_summary(out)["reference"] == {"mode": "on-the-fly"}
    assert not (out / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged.state_dict()[name], base.state_dict()[name])
    assert not list((tmp_path).glob("*.ref-*.parquet"))  # nothing precomputed


def test_cli_trains_with_a_separate_reference(tiny, tmp_path):
    from typer.testing import CliRunner

    from spag.cli import app

    data = write_rows(tmp_path / "rows.jsonl", game_rows())
    ref = make_tiny_checkpoint(tmp_path / "ref", seed=1)
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--method",
            "offline-po",
            "--model",
            str(tiny),
            "--ref",
            str(ref),
            "--data",
            str(data),
            "-o",
            str(tmp_path / "out"),
            "--max-steps",
            "1",
            "--batch-size",
            "5",
            "--grad-accum",
            "1",
            "--ref-on-the-fly",
            "--live-dir",
            str(tmp_path / "live"),
            "--logging-steps",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "{'loss'" not in result.output  # logged numbers go to the bar's postfix, not a printed dict
    summary = read_summary(tmp_path / "out")
    assert summary["ref"] == str(ref) and summary["config"]["learning_rate"] == 2e-6
    assert summary["config"]["kl_coeff"] == 0.2
    # a reference with other weights: the first step's ratio is not 1
    kl = (tmp_path / "live" / "plots" / "metrics" / "train" / "kl.tsv").read_text().splitlines()[1]
    assert abs(float(kl.split("\t")[1])) > 1e-3

    bad = CliRunner().invoke(
        app,
        ["train", "--method", "ppo", "--model", str(tiny), "--data", str(data), "-o", str(tmp_path / "x")],
    )
    assert bad.exit_code != 0 and "expected one of" in bad.output


def test_deepspeed_zero3_config_offloads_and_leaves_sizes_to_the_trainer():
    from pathlib import Path

    config = json.loads(
        (Path(__file__).resolve().parent.parent / "configs" / "deepspeed_zero3.json").read_text()
    )
    zero = config["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["offload_param"]["device"] == "cpu"
    # the final save gathers the partitioned weights into one plain checkpoint
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    # sizes, precision and optimiser settings come from the Trainer's arguments (spag train's flags)
    for key in (
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
    ):
        assert config[key] == "auto"
    assert config["bf16"]["enabled"] == "auto"
    assert all(v == "auto" for v in config["optimizer"]["params"].values())
    assert "scheduler" not in config  # the Trainer's cosine schedule with warm-up applies


@pytest.mark.slow
def test_two_processes_share_the_reference_pass_and_train_together(tiny, tmp_path):
    """torchrun on CPU (gloo): each process scores half the rows, the main one writes cache and model."""
    import os
    import shutil
    import subprocess
    import sys

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    data = write_rows(tmp_path / "rows.jsonl", game_rows())
    done = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "spag.cli",
            "train",
            "--method",
            "offline-po",
            "--model",
            str(tiny),
            "--data",
            str(data),
            "-o",
            str(tmp_path / "out"),
            "--max-steps",
            "2",
            "--batch-size",
            "2",
            "--grad-accum",
            "1",
            "--ref-batch-size",
            "2",
            "--device",
            "cpu",
            "--no-live",
            "--no-bf16",
        ],  # float32 on any CPU: the comparison below is exact
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = read_summary(tmp_path / "out")
    assert summary["steps"] == 2 and summary["reference"]["reused"] is False

    # the gathered cache equals a single-process pass over all rows
    from spag.models.loading import load_model

    model, tok = load_model(tiny, device="cpu", dtype="float32")
    encoded = encode_rows(read_rows(data), tok, 2048, show_progress=False)
    single = compute_reference_logprobs(model, encoded, tok.pad_token_id, batch_size=8, show_progress=False)
    import pyarrow.parquet as pq

    cached = pq.read_table(summary["reference"]["cache"]).column("ref_logprob").to_pylist()
    assert cached == pytest.approx([single[i] for i in range(len(encoded))], abs=1e-5)


@pytest.mark.slow
def test_a_live_dir_holding_someone_elses_files_is_refused_and_kept(tiny, tmp_path):
    """dvclive replaces dvc.yaml, params.yaml, metrics.json and plots/ in its folder: never a user's."""
    from spag.testing import run_cli

    data = write_rows(tmp_path / "rows.jsonl", game_rows())
    project = tmp_path / "project"
    project.mkdir()
    (project / "dvc.yaml").write_text("stages: {}\n")
    (project / "params.yaml").write_text("seed: 1\n")
    args = [
        "train",
        "--method",
        "sft",
        "--model",
        tiny,
        "--data",
        data,
        "--max-steps",
        "1",
        "--batch-size",
        "5",
        "--grad-accum",
        "1",
        "--no-bf16",
    ]
    refused = run_cli(*args, "-o", tmp_path / "out", "--live-dir", project)
    assert refused.code == 2
    assert refused.error_lines()[-1].startswith("error: ") and str(project) in refused.error_lines()[-1]
    assert (project / "dvc.yaml").read_text() == "stages: {}\n" and (
        project / "params.yaml"
    ).read_text() == "seed: 1\n"
    assert not (tmp_path / "out").exists()
    # A folder spag's own dvclive wrote is replaced by the next run's curves.
    live = tmp_path / "live"
    for output in ("out1", "out2"):
        done = run_cli(*args, "-o", tmp_path / output, "--live-dir", live)
        assert done.code == 0, done.stderr
    assert (live / "metrics.json").exists()


def test_a_saved_checkpoint_has_the_usual_file_modes(tmp_path):
    import os

    from spag.testing import make_tiny_checkpoint

    umask = os.umask(0)
    os.umask(umask)
    saved = make_tiny_checkpoint(tmp_path / "ckpt")
    modes = {p.name: p.stat().st_mode & 0o777 for p in saved.iterdir() if p.is_file()}
    assert modes["model.safetensors"] == 0o666 & ~umask  # others can read the weights, as with any new file
    assert set(modes.values()) == {0o666 & ~umask}


def test_every_file_training_writes_has_the_usual_mode(tiny, tmp_path):
    """Intermediate checkpoints too (safetensors writes 0600), the reference cache and dvclive's curves."""
    import os

    umask = os.umask(0o022)
    try:
        (tmp_path / "data").mkdir()
        data = write_rows(tmp_path / "data" / "rows.jsonl", game_rows())
        training.train(
            "offline-po",
            tiny,
            data,
            tmp_path / "out",
            learning_rate=1e-3,
            max_steps=1,
            save_steps=1,
            keep_checkpoints=True,
            live_dir=tmp_path / "live",
            **FAST,
        )
    finally:
        os.umask(umask)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != data]
    assert any(p.name == "model.safetensors" and "checkpoint-1" in p.parts for p in written)
    assert {
        str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777)
        for p in written
        if p.stat().st_mode & 0o777 != 0o644
    } == {}


# ------------------------------------------------------------------------------------------ TF32


def _precision_holders():
    """Every place torch keeps a float32 precision (the generic one, each backend's, each of their ops')."""
    import torch

    b = torch.backends
    return [
        b,
        b.cuda.matmul,
        b.cudnn,
        b.mkldnn,
        *(
            getattr(parent, op)
            for parent in (b.cudnn, b.mkldnn)
            for op in ("conv", "rnn", "matmul")
            if hasattr(parent, op)
        ),
    ]


@pytest.fixture
def fp32_precision():
    """A test of torch's float32 precision starts from torch's untouched state (every setting "none": earlier
    tests may have trained with TF32 settings) and leaves the process as it found it (a process-wide setting)."""
    holders = _precision_holders()
    before = [holder.fp32_precision for holder in holders]
    for holder in holders:
        holder.fp32_precision = "none"
    yield
    for holder, value in zip(holders, before):
        holder.fp32_precision = value


def test_transformers_own_tf32_switch_leaves_the_older_reader_raising(fp32_precision):
    """Why spag sets TF32 itself: after transformers' switch, torch.get_float32_matmul_precision (which
    torch.compile's autotune cache calls) raises "mix of the legacy and new APIs"."""
    import torch
    from transformers.utils.import_utils import enable_tf32

    enable_tf32.__wrapped__(True)  # what TrainingArguments(tf32=True) calls
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()


def test_tf32_is_set_in_one_place_and_every_reader_agrees(fp32_precision):
    import torch

    from spag.models.loading import set_tf32

    set_tf32(True)
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cuda.matmul.allow_tf32 is True  # the older flag reads the same, and does not raise
    set_tf32(False)
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_the_trainer_is_never_asked_to_set_tf32(tmp_path):
    from spag.config import TrainConfig
    from spag.train.job import _training_arguments

    args = _training_arguments(TrainConfig(live=False), tmp_path, "cpu")
    assert args.tf32 is None
    with pytest.raises(DataError, match="--tf32: TF32 is a mode of NVIDIA GPUs"):
        _training_arguments(TrainConfig(tf32=True, live=False), tmp_path, "cpu")


def test_rows_of_similar_length_are_batched_together_unless_asked_for_random_batches(tmp_path):
    """group_by_length: each batch takes rows of similar length (less padding to compute), the batches in a
    random order; off, the original's random batches."""
    import torch
    from transformers import Trainer
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from spag.config import TrainConfig
    from spag.train.data import RowDataset
    from spag.train.job import _training_arguments

    class Rows:  # what RowDataset reads: short and long rows, interleaved
        lengths = (3, 40) * 32
        input_ids = tuple((1,) * n for n in lengths)
        completion_lengths = weights = rewards = is_game = (1,) * 64
        ref_logprobs = None

        def __len__(self):
            return 64

    def padded_tokens(order):  # what a batch of 4 computes: each row padded to the batch's longest
        return sum(4 * max(Rows.lengths[i] for i in order[b : b + 4]) for b in range(0, 64, 4))

    computed = {}
    for grouped in (True, False):
        config = TrainConfig(live=False, batch_size=4, grad_accum=1, group_by_length=grouped)
        trainer = Trainer.__new__(Trainer)  # only what the sampler reads: the arguments and the data
        trainer.args = _training_arguments(config, tmp_path, "cpu")
        trainer.train_dataset, trainer.processing_class = RowDataset(Rows()), None
        sampler = trainer._get_train_sampler()
        assert isinstance(sampler, LengthGroupedSampler) == grouped
        torch.manual_seed(0)
        order = list(sampler)
        assert sorted(order) == list(range(64))  # every row once
        computed[grouped] = padded_tokens(order)
    assert computed[True] < 0.75 * computed[False]


def test_rows_whose_prompts_begin_alike_are_batched_together_in_a_seeded_order(tmp_path):
    """group_by_prompt: each batch takes rows that lie side by side in the order of their prompts' tokens
    (one layout, one game's turns), so the beginning they share is long; the batches come in an order the
    seed decides, every row once; group_by_length with it is refused, naming both keys."""
    import random

    from pydantic import ValidationError

    from spag.config import TrainConfig
    from spag.train.data import RowDataset
    from spag.train.job import _training_arguments
    from spag.train.trainer import SpagTrainer

    rng = random.Random(0)
    layouts = [[1] * 30, [2] * 30, [3] * 5]  # three sets of rules, two long and one short
    prompts = [
        layouts[i % 3] + [rng.randrange(10, 99) for _ in range(rng.randrange(1, 20))] for i in range(64)
    ]

    class Rows:  # what RowDataset reads: prompts of three layouts, interleaved, and a two-token completion
        input_ids = tuple(p + [5, 6] for p in prompts)
        completion_lengths = (2,) * 64
        weights = rewards = is_game = (1,) * 64
        ref_logprobs = None

        def __len__(self):
            return 64

    def shared_tokens(order):  # the tokens each batch's rows share, counted once per row after the first
        total = 0
        for b in range(0, 64, 4):
            rows = [prompts[i] for i in order[b : b + 4]]
            common = next(
                (k for k in range(min(map(len, rows))) if len({r[k] for r in rows}) > 1), min(map(len, rows))
            )
            total += common * (len(rows) - 1)
        return total

    def sampled(seed, group_by_prompt):
        config = TrainConfig(
            live=False,
            batch_size=4,
            grad_accum=1,
            seed=seed,
            group_by_length=not group_by_prompt,
            group_by_prompt=group_by_prompt,
        )
        trainer = SpagTrainer.__new__(SpagTrainer)  # only what the sampler reads
        trainer.args = _training_arguments(config, tmp_path, "cpu")
        trainer.train_dataset, trainer.processing_class = RowDataset(Rows()), None
        trainer.group_by_prompt = group_by_prompt
        return list(trainer._get_train_sampler())

    order = sampled(0, True)
    assert sorted(order) == list(range(64))
    batches = [tuple(order[b : b + 4]) for b in range(0, 64, 4)]
    sorted_rows = sorted(range(64), key=prompts.__getitem__)
    assert sorted(batches) == sorted(tuple(sorted_rows[b : b + 4]) for b in range(0, 64, 4))
    assert shared_tokens(order) > 2 * shared_tokens(sampled(0, False))
    assert sampled(0, True) == order and sampled(1, True) != order
    assert sorted(sampled(1, True)) == list(range(64))
    with pytest.raises(
        ValidationError,
        match="group_by_length: each of group_by_length, group_by_prompt orders the batches its own way",
    ):
        TrainConfig.model_validate({"group_by_length": True, "group_by_prompt": True})


def _mixed_lengths(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice([40, 60, 400, 600]) for _ in range(count)]


MIXED_LENGTHS = _mixed_lengths(64, seed=0)  # rows of short and long prompts


def rebalancing_sampler(tmp_path, seed, **knobs):
    """The sampler SpagTrainer builds for 64 rows of MIXED_LENGTHS under these knobs (batch_rebalance on)."""
    from spag.config import TrainConfig
    from spag.train.data import RowDataset
    from spag.train.job import _training_arguments
    from spag.train.trainer import SpagTrainer

    class Rows:  # what RowDataset reads: rows of short and long prompts
        input_ids = tuple([7] * n for n in MIXED_LENGTHS)
        completion_lengths = (2,) * 64
        weights = rewards = is_game = (1,) * 64
        ref_logprobs = None

        def __len__(self):
            return 64

    config = TrainConfig(live=False, seed=seed, batch_rebalance=True, **knobs)
    trainer = SpagTrainer.__new__(SpagTrainer)  # only what the sampler reads
    trainer.args = _training_arguments(config, tmp_path, "cpu")
    trainer.train_dataset, trainer.batch_rebalance = RowDataset(Rows()), True
    trainer.step_tokens = config.step_tokens
    return trainer._get_train_sampler()


def test_rebalanced_micro_batches_hold_a_steps_rows_in_groups_of_like_cost_in_a_seeded_order(tmp_path):
    """batch_rebalance: transformers' sampler deals each step's batch_size x grad_accum rows into grad_accum
    micro-batches of similar cost (many short rows or a few long ones), every row once an epoch, in an order
    the run's seed decides; with group_by_length it is refused, naming both keys."""
    from pydantic import ValidationError

    from spag.config import TrainConfig

    lengths = MIXED_LENGTHS

    def micro_batches(seed):
        return list(rebalancing_sampler(tmp_path, seed, batch_size=4, grad_accum=4))

    batches = micro_batches(0)
    assert len(batches) == 16 and sorted(i for b in batches for i in b) == list(range(64))
    steps = [batches[s : s + 4] for s in range(0, 16, 4)]
    assert all(sum(map(len, step)) == 16 for step in steps)  # each step: batch_size x grad_accum rows
    assert len({len(b) for b in batches}) > 1  # of varying size

    def padded_tokens(groups):
        return sum(len(b) * max(lengths[i] for i in b) for b in groups)

    shuffled = random.Random(1).sample(range(64), 64)
    assert padded_tokens(batches) < 0.75 * padded_tokens([shuffled[b : b + 4] for b in range(0, 64, 4)])
    assert micro_batches(0) == batches and micro_batches(1) != batches
    with pytest.raises(
        ValidationError,
        match="group_by_length: each of group_by_length, batch_rebalance orders the batches its own way",
    ):
        TrainConfig.model_validate({"group_by_length": True, "batch_rebalance": True})


def test_steps_of_a_token_budget_hold_about_the_budget_in_rows_that_vary_and_every_row_once(tmp_path):
    """step_tokens (with batch_rebalance): an epoch of ceil(tokens / step_tokens) steps, each holding about
    the budget (the epoch's mean, give or take a row) in as many rows as their lengths allow, every row once
    an epoch, each step dealt into grad_accum micro-batches; every process deals the same steps and takes
    its own share of each; the order follows the seed and the epoch; without batch_rebalance it is refused,
    naming both keys."""
    import math

    from pydantic import ValidationError

    from spag.config import TrainConfig
    from spag.train.sampling import TokenBudgetSampler

    lengths = MIXED_LENGTHS

    def sampler(seed):
        return rebalancing_sampler(tmp_path, seed, batch_size=4, grad_accum=2, step_tokens=2000)

    def tokens(rows):
        return sum(lengths[i] for i in rows)

    batches = list(sampler(0))
    steps = [batches[s] + batches[s + 1] for s in range(0, len(batches), 2)]
    assert len(steps) == math.ceil(sum(lengths) / 2000) == 10
    assert sorted(i for step in steps for i in step) == list(range(64))
    assert all(tokens(step) <= 2000 + max(lengths) for step in steps)
    assert max(map(tokens, steps)) - min(map(tokens, steps)) <= max(lengths)
    assert len({len(step) for step in steps}) > 2  # the rows of a step vary with their lengths
    shuffled = random.Random(1).sample(range(64), 64)
    fixed = [tokens(shuffled[s : s + 6]) for s in range(0, 60, 6)]  # steps of fixed rows, as many
    assert max(map(tokens, steps)) - min(map(tokens, steps)) < 0.75 * (max(fixed) - min(fixed))

    epoch = sampler(0)
    epoch.set_epoch(1)
    again = list(epoch)
    assert (
        len(again) == len(batches)
        and again != batches
        and sorted(i for b in again for i in b) == list(range(64))
    )
    assert list(sampler(0)) == batches and list(sampler(1)) != batches

    ranks = [list(TokenBudgetSampler(lengths, 2000, 2, 2, seed=0, rank=r)) for r in (0, 1)]
    assert all(
        len(batch) > 0 for batch in ranks[0] + ranks[1]
    )  # each process has rows for each of its micro-batches
    steps = [ranks[0][s] + ranks[0][s + 1] + ranks[1][s] + ranks[1][s + 1] for s in range(0, 20, 2)]
    assert sorted(i for step in steps for i in step) == list(range(64))  # the same steps, shared out
    assert max(map(tokens, steps)) - min(map(tokens, steps)) <= max(lengths)
    few = [list(TokenBudgetSampler([10, 20, 30], 5, 2, 2, seed=0, rank=r)) for r in (0, 1)]
    assert all(
        len(share) == 2 and all(len(batch) > 0 for batch in share) for share in few
    )  # rows repeat to fill 4 micro-batches
    with pytest.raises(
        ValidationError, match="step_tokens: steps of a number of tokens are dealt by batch_rebalance"
    ):
        TrainConfig.model_validate({"step_tokens": 2000})


class KilledAfter:
    """A run's tracking hook whose callback stops the run with an error once ``step`` has trained, before
    anything of that step is saved: a run killed there."""

    def __init__(self, step: int):
        self.step = step

    def callbacks(self, run) -> list:
        from transformers import TrainerCallback

        step = self.step

        class Kill(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == step:
                    raise RuntimeError(f"killed after step {step}")

        return [Kill()]

    def finish(self, record: dict) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("order", ["random", "rebalanced", "token-budget"])
def test_a_run_killed_in_its_second_epoch_resumes_to_the_model_of_an_unbroken_run(
    tiny, tokenizer, tmp_path, order
):
    """Steps of 3 an epoch, a checkpoint every 2, killed after step 5 and resumed from step 4 (one step into
    the second epoch) to step 6: the resumed epoch skips the step it had trained and deals its rows as the
    unbroken run did, so both end at the same weights. The HF Trainer's random batches, transformers'
    rebalanced micro-batches (fixed rows a step) and steps of a token budget (rows varying) alike."""
    import torch
    from safetensors.torch import load_file

    from spag.train.job import run_training

    rows = game_rows()
    lengths = [
        len(ids)
        for ids in encode_rows(
            [validate_row(r, i) for i, r in enumerate(rows)], tokenizer, 1024, show_progress=False
        ).input_ids
    ]
    knobs = {
        "random": {"batch_size": 2},
        "rebalanced": {"batch_size": 2, "batch_rebalance": True},
        "token-budget": {"batch_size": 1, "batch_rebalance": True, "step_tokens": sum(lengths) // 3 + 1},
    }[order]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    common = {**FAST, **knobs, "learning_rate": 1e-3, "max_steps": 6, "save_steps": 2, "live": False}

    unbroken = run_training("sft-kl", tiny, data, tmp_path / "unbroken", **common)
    out = tmp_path / "resumed"
    with pytest.raises(RuntimeError, match="killed after step 5"):
        run_training("sft-kl", tiny, data, out, tracking=KilledAfter(5), **common)
    run_training("sft-kl", tiny, data, out, resume=True, **common)
    assert read_summary(out)["resumed_from"].endswith("checkpoint-4")
    assert read_summary(unbroken)["steps"] == read_summary(out)["steps"] == 6
    ended, resumed = load_file(unbroken / "model.safetensors"), load_file(out / "model.safetensors")
    moved = load_file(tiny / "model.safetensors")
    assert any(not torch.equal(ended[name], moved[name]) for name in ended)  # the steps trained
    for name, weights in ended.items():
        torch.testing.assert_close(resumed[name], weights, rtol=0, atol=1e-6, msg=name)


def test_a_deepspeed_run_asks_pycpuinfo_about_the_cpu_once(monkeypatch):
    """DeepSpeed asks py-cpuinfo at each op it loads and py-cpuinfo starts a Python process per question;
    a DeepSpeed run (prepared by the harness) keeps the first answer for the process, every caller gets its
    own copy."""
    import subprocess

    import cpuinfo

    from spag.harness.environment import cpu_info_read_once

    started = []

    class Counted(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            started.append(args)
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Counted)
    monkeypatch.setattr(cpuinfo, "get_cpu_info", cpuinfo.get_cpu_info)  # the library's own, restored after
    cpuinfo.get_cpu_info(), cpuinfo.get_cpu_info()
    assert len(started) == 2  # without the change: a process per question
    cpu_info_read_once()
    cpu_info_read_once()
    first = cpuinfo.get_cpu_info()
    first["flags"] = None
    again = cpuinfo.get_cpu_info()
    assert len(started) == 3 and again["flags"] and again["arch"] == first["arch"]


def test_deepspeed_runs_build_their_ops_with_the_environments_ninja(monkeypatch):
    """torch compiles DeepSpeed's ops with the ninja on PATH; two ninjas record commands differently and
    rebuild every op by turns, so a DeepSpeed run puts the environment's own ninja first, started
    activated or not."""
    import os
    import shutil
    import sys
    from pathlib import Path

    from spag.harness.environment import environment_ninja_first

    ours = Path(sys.executable).parent / "ninja"
    if not ours.is_file():
        pytest.skip("this environment has no ninja of its own")
    monkeypatch.setenv(
        "PATH",
        os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != ours.parent)
        or os.defpath,
    )
    assert shutil.which("ninja") != str(ours)
    environment_ninja_first()
    assert shutil.which("ninja") == str(ours)
    environment_ninja_first()  # once is enough: PATH does not grow
    assert os.environ["PATH"].split(os.pathsep).count(str(ours.parent)) == 1


def test_a_finished_run_writes_no_checkpoint_at_its_last_step(tiny, tmp_path, monkeypatch):
    """The Trainer checkpoints the last step whatever save_steps; spag saves the finished model right after,
    so that checkpoint (the optimizer's state: twice the model) is skipped unless checkpoints are kept."""
    from transformers import Trainer

    saved = []
    original = Trainer._save_checkpoint

    def recording(self, *args, **kwargs):
        saved.append(self.state.global_step)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_save_checkpoint", recording)
    data = write_rows(tmp_path / "rows.jsonl", game_rows())
    training.train("sft-kl", tiny, data, tmp_path / "plain", max_steps=3, save_steps=2, live=False, **FAST)
    assert saved == [2]  # the intermediate one only
    saved.clear()
    training.train(
        "sft-kl",
        tiny,
        data,
        tmp_path / "kept",
        max_steps=3,
        save_steps=2,
        keep_checkpoints=True,
        live=False,
        **FAST,
    )
    assert saved == [2, 3]
    assert (tmp_path / "kept" / "checkpoints" / "checkpoint-3").is_dir()
    assert read_summary(tmp_path / "plain")["steps"] == 3


def test_the_trainer_reports_to_the_trackers_a_run_names(tmp_path):
    """Item 6 of the fourth attack's issue: transformers' report_to as a setting (dvclive stays, always)."""
    from pydantic import ValidationError

    from spag.config import TrainConfig
    from spag.pipeline.preflight import tracker_problems
    from spag.train.job import _training_arguments

    assert _training_arguments(TrainConfig(), tmp_path, "cpu").report_to == []  # "none": no integration
    chosen = _training_arguments(TrainConfig(report_to=["tensorboard", "mlflow"]), tmp_path, "cpu")
    assert chosen.report_to == ["tensorboard", "mlflow"]
    with pytest.raises(ValidationError, match="report_to"):
        TrainConfig(report_to=["dvclive"])  # dvclive writes always, by its own callback
    import importlib.util

    problems = tracker_problems("spag.report_to", ["tensorboard"])
    if importlib.util.find_spec("tensorboard") is None:
        assert [str(p) for p in problems] == [
            "params.yaml: spag.report_to: tensorboard is not installed here: pip "
            "install tensorboard (or leave it out of spag.report_to)"
        ]
    else:
        assert problems == []


def test_lora_under_bf16_holds_the_frozen_base_in_bfloat16_and_the_adapters_in_float32(tiny):
    """A LoRA run in bfloat16 reads its frozen base at half the bytes; what learns stays float32. Without
    LoRA, or without bf16, every weight is a float32 master weight."""
    import torch

    from spag.config import TrainConfig
    from spag.models.loading import load_tokenizer
    from spag.train.job import load_policy

    tokenizer = load_tokenizer(tiny)

    def dtypes(config, bf16):
        model = load_policy(tiny, config, tokenizer, bf16=bf16)
        params = list(model.named_parameters())
        return {p.dtype for _, p in params if not p.requires_grad}, {
            p.dtype for _, p in params if p.requires_grad
        }

    assert dtypes(TrainConfig(lora_r=4, live=False), bf16=True) == ({torch.bfloat16}, {torch.float32})
    assert dtypes(TrainConfig(lora_r=4, live=False), bf16=False) == ({torch.float32}, {torch.float32})
    assert dtypes(TrainConfig(live=False), bf16=True) == (set(), {torch.float32})


# Each of two gloo processes under torchrun has its own micro-batches of a step and writes its shares.
STEP_SHARES = """
import json, sys, torch, torch.distributed as dist
from spag.train.trainer import step_shares
dist.init_process_group("gloo")
rank = dist.get_rank()
mine = [[(True, 1.0)], [(True, 0.5), (False, 2.0)]] if rank == 0 else [[(True, 1.5), (True, 1.0), (False, 1.0)], [(False, 0.25)]]
batches = [
    {"is_game": torch.tensor([g for g, _ in rows]), "weight": torch.tensor([w for _, w in rows])} for rows in mine
]
shares = step_shares(batches, dist.get_world_size())
with open(f"shares-{rank}.json", "w") as out:
    json.dump(shares.tolist(), out)
dist.destroy_process_group()
"""


def test_a_steps_rows_are_summed_over_its_processes_for_each_micro_batchs_share(tmp_path):
    """batch_rebalance under two processes: each process's micro-batches divide by the rows of the whole
    step, both processes' (summed by a real all_reduce over gloo), shared by 2 processes x 2 micro-batches."""
    script = tmp_path / "step_shares.py"
    script.write_text(STEP_SHARES, encoding="utf-8")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # rows, game rows, sft rows, Σ w of game rows, Σ w of sft rows: 7, 4, 3, 4.0, 3.25 over 4 micro-batches
    expected = [7 / 4, 4 / 4, 3 / 4, 4.0 / 4, 3.25 / 4]
    for rank in (0, 1):
        assert json.loads((tmp_path / f"shares-{rank}.json").read_text()) == pytest.approx(expected)
