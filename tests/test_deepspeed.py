"""DeepSpeed ZeRO-3 for real, on its CPU accelerator: two processes under torchrun, gloo between them.

The runs use configs/deepspeed_zero3.json itself, the file the GPUs use (parameters and optimiser offloaded to
the CPU, 16-bit weights gathered on save). Float32 (``--no-bf16``) so that a run with DeepSpeed and one
without compute the same numbers up to the order of floating-point sums.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_train import game_rows, write_rows

from spag.harness import training
from spag.testing import launcher_failure, make_tiny_checkpoint
from spag.train.bookkeeping import read_summary

ROOT = Path(__file__).resolve().parent.parent
ZERO3 = ROOT / "configs" / "deepspeed_zero3.json"
TWO_PROCESSES = "torchrun --standalone --nproc_per_node 2"
STEPS = 4
# Two processes with 2 rows each make one optimiser step, as one process accumulating two micro-batches of 2
# rows: the same rows in the same micro-batches (the losses normalise per micro-batch), the same gradient.
SETTINGS = [
    "--max-steps",
    str(STEPS),
    "--grad-accum",
    "1",
    "--lr",
    "1e-3",
    "--warmup-ratio",
    "0",
    "--logging-steps",
    "1",
    "--device",
    "cpu",
    "--no-bf16",
]
# Float32 sums in another order (two processes, gathered gradients, DeepSpeed's CPU Adam): the curves and
# the weights agree closely but not bit for bit.
LOSS_TOLERANCE = 1e-4
WEIGHT_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return write_rows(tmp_path_factory.mktemp("rows") / "rows.jsonl", game_rows() * 4)


def spag_command(*args) -> list[str]:
    return [sys.executable, "-m", "spag.cli", *map(str, args)]


def curve(live: Path, name: str = "loss") -> list[float]:
    lines = (live / "plots" / "metrics" / "train" / f"{name}.tsv").read_text().split("\n")[1:]
    return [float(line.split("\t")[1]) for line in lines if line]


def weights(model_dir: Path) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)  # plain transformers
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


# Each case: the method, how the two processes batch the rows, and the one process that computes the same steps.
# With step_tokens, a budget that holds all 20 rows makes each step of them: the token-budget sampler deals
# them between the processes (accelerate must not deal them again), and each process's losses divide by the
# step's rows of each kind summed over both, as one batch of the 20 rows does.
CASES = {
    "sft-kl": ("sft-kl", ["--batch-size", "2"], {"batch_size": 2, "grad_accum": 2}),
    "offline-po": ("offline-po", ["--batch-size", "2"], {"batch_size": 2, "grad_accum": 2}),
    "offline-po-token-budget": (
        "offline-po",
        ["--batch-rebalance", "--step-tokens", "1000000"],
        {"batch_size": 20, "grad_accum": 1},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_zero3_under_two_processes_trains_like_one_process(case, tiny, rows, tmp_path):
    method, batching, plain_batching = CASES[case]
    done = subprocess.run(
        spag_command(
            "train",
            "--method",
            method,
            "--model",
            tiny,
            "--data",
            rows,
            "-o",
            tmp_path / "zero3",
            *batching,
            *SETTINGS,
            "--live-dir",
            tmp_path / "zero3-live",
            "--deepspeed",
            ZERO3,
            "--launcher",
            TWO_PROCESSES,
        ),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + launcher_failure(done.stderr)
    summary = read_summary(tmp_path / "zero3")
    assert summary["provenance"]["processes"] == 2 and summary["provenance"]["deepspeed"] is True
    assert summary["steps"] == STEPS

    training.train(
        method,
        tiny,
        rows,
        tmp_path / "plain",
        **plain_batching,
        learning_rate=1e-3,
        warmup_ratio=0.0,
        max_steps=STEPS,
        logging_steps=1,
        device="cpu",
        bf16=False,
        live_dir=tmp_path / "plain-live",
        show_progress=False,
    )
    zero3_loss, plain_loss = curve(tmp_path / "zero3-live"), curve(tmp_path / "plain-live")
    assert len(zero3_loss) == len(plain_loss) == STEPS
    assert zero3_loss == pytest.approx(plain_loss, abs=LOSS_TOLERANCE)
    assert plain_loss[-1] < plain_loss[0] - 0.05  # the steps moved the model: the comparison means something

    trained, plain, start = weights(tmp_path / "zero3"), weights(tmp_path / "plain"), weights(tiny)
    assert trained.keys() == plain.keys()
    for name, tensor in trained.items():
        assert torch.allclose(tensor, plain[name], atol=WEIGHT_TOLERANCE), name
    assert any(not torch.equal(trained[name], start[name]) for name in trained)


def test_a_failed_launch_exits_with_an_error(tiny, rows, tmp_path):
    done = subprocess.run(
        spag_command(
            "train",
            "--method",
            "sft-kl",
            "--model",
            tiny,
            "--data",
            rows,
            "-o",
            tmp_path / "out",
            *SETTINGS,
            "--launcher",
            f"{sys.executable} -c 'raise SystemExit(3)'",
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 3
    assert "training under" in done.stderr and "failed (exit code 3)" in done.stderr
    assert not (tmp_path / "out" / "training_summary.json").exists()


def test_resume_never_continues_checkpoints_of_another_run(tiny, rows, tmp_path):
    from spag.runtime.errors import DataError

    checkpoints = tmp_path / "checkpoints"
    first = dict(
        max_steps=2,
        save_steps=1,
        batch_size=4,
        grad_accum=1,
        device="cpu",
        bf16=False,
        live=False,
        show_progress=False,
        checkpoint_dir=checkpoints,
        keep_checkpoints=True,
    )
    training.train("sft-kl", tiny, rows, tmp_path / "out", **first)
    assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]

    changed = {**first, "learning_rate": 1e-3, "resume": True, "overwrite": True}
    with pytest.raises(DataError, match=r"another run \(learning_rate: 5e-06 -> 0.001\)"):
        training.train("sft-kl", tiny, rows, tmp_path / "out", **changed)
    assert (checkpoints / "checkpoint-2").is_dir()  # refused: nothing removed

    training.train("sft-kl", tiny, rows, tmp_path / "out", other_checkpoints="restart", **changed)
    summary = read_summary(tmp_path / "out")
    assert summary["resumed_from"] is None and summary["config"]["learning_rate"] == 1e-3

    same = {**changed, "max_steps": 2}
    training.train("sft-kl", tiny, rows, tmp_path / "out", **same)
    assert read_summary(tmp_path / "out")["resumed_from"] == str(checkpoints / "checkpoint-2")


def test_the_reference_on_the_fly_runs_inside_the_engine_in_its_precision(tiny, rows, tmp_path):
    """The original's setting: the reference is a frozen part of the DeepSpeed engine, cast to bfloat16 with
    the policy, so before the first update the two agree exactly (KL 0, ratio 1); the saved model is the
    policy alone, loadable by plain transformers (checkpoints are taken after every step on the way)."""
    from safetensors import safe_open

    out, live = tmp_path / "out", tmp_path / "live"
    done = subprocess.run(
        spag_command(
            "train",
            "--method",
            "offline-po",
            "--model",
            tiny,
            "--data",
            rows,
            "-o",
            out,
            "--batch-size",
            "2",
            "--grad-accum",
            "1",
            "--max-steps",
            "2",
            "--lr",
            "1e-3",
            "--warmup-ratio",
            "0",
            "--logging-steps",
            "1",
            "--device",
            "cpu",
            "--bf16",
            "--deepspeed",
            ZERO3,
            "--ref-on-the-fly",
            "--live-dir",
            live,
            "--save-steps",
            "1",
        ),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + launcher_failure(done.stderr)
    summary = read_summary(out)
    assert summary["reference"]["mode"] == "on-the-fly" and summary["provenance"]["bf16"] is True
    assert curve(live, "kl")[0] == 0.0 and curve(live, "ratio_mean")[0] == 1.0
    assert curve(live, "kl")[1] != 0.0  # after one update the policy has moved away from it
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert not [k for k in f.keys() if "spag_reference" in k]  # noqa: SIM118 - safe_open is not iterable
    assert weights(out).keys() == weights(tiny).keys()


def test_zero3_bf16_with_the_reference_in_the_engine_under_two_processes(tiny, rows, tmp_path):
    """The paper's training setting under two processes: ZeRO-3, bfloat16, the reference inside the engine.
    Before the first update the reference and the policy agree exactly on both ranks' rows (KL 0, ratio 1).
    Intermediate checkpoints hold the policy alone: neither the 16-bit weights nor DeepSpeed's frozen-parameter
    fragments carry the reference (for a 7B model, 27 GB less a checkpoint). A run resumed from one reloads the
    reference from its path and ends as the uninterrupted run did."""
    import shutil

    from safetensors import safe_open

    def train(out: Path, *extra):
        done = subprocess.run(
            spag_command(
                "train",
                "--method",
                "offline-po",
                "--model",
                tiny,
                "--data",
                rows,
                "-o",
                out,
                "--batch-size",
                "2",
                "--grad-accum",
                "1",
                "--max-steps",
                "3",
                "--lr",
                "1e-3",
                "--warmup-ratio",
                "0",
                "--logging-steps",
                "1",
                "--device",
                "cpu",
                "--bf16",
                "--deepspeed",
                ZERO3,
                "--ref-on-the-fly",
                "--save-steps",
                "1",
                "--live-dir",
                out.with_name(out.name + "-live"),
                "--launcher",
                TWO_PROCESSES,
                *extra,
            ),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + launcher_failure(done.stderr)
        return read_summary(out)

    whole = train(tmp_path / "whole", "--keep-checkpoints")
    assert whole["provenance"]["processes"] == 2 and whole["provenance"]["bf16"] is True
    assert whole["reference"]["mode"] == "on-the-fly"
    kl, ratio = curve(tmp_path / "whole-live", "kl"), curve(tmp_path / "whole-live", "ratio_mean")
    assert kl[0] == 0.0 and ratio[0] == 1.0 and kl[1] != 0.0

    with safe_open(str(Path(tiny) / "model.safetensors"), "pt") as f:
        policy_keys = set(f.keys())
    checkpoints = sorted((tmp_path / "whole" / "checkpoints").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-2", "checkpoint-3"]  # save_total_limit 2
    for checkpoint in checkpoints:
        with safe_open(str(checkpoint / "model.safetensors"), "pt") as f:
            assert set(f.keys()) == policy_keys, checkpoint
        for states in checkpoint.glob("global_step*/*model_states.pt"):
            saved = torch.load(states, weights_only=False)
            assert saved["frozen_param_fragments"] is None and saved["frozen_param_shapes"] is None
            assert all(v.numel() == 0 for k, v in saved["module"].items() if k.startswith("spag_reference."))

    # The same run killed after its second checkpoint: resumed from it, the reference loaded from its path.
    shutil.copytree(tmp_path / "whole" / "checkpoints", tmp_path / "killed")
    shutil.rmtree(tmp_path / "killed" / "checkpoint-3")
    resumed = train(tmp_path / "resumed", "--checkpoint-dir", tmp_path / "killed", "--resume")
    assert resumed["resumed_from"] == str(tmp_path / "killed" / "checkpoint-2")
    assert curve(tmp_path / "resumed-live", "kl") == kl
    assert curve(tmp_path / "resumed-live") == curve(tmp_path / "whole-live")
    # DeepSpeed's restored optimiser state is not bit for bit the one it saved: the weights agree to within
    # one step of bfloat16's resolution
    trained = weights(tmp_path / "whole")
    for name, tensor in weights(tmp_path / "resumed").items():
        torch.testing.assert_close(tensor, trained[name], rtol=2**-7, atol=1e-6, msg=name)


def test_a_failed_launch_shows_what_the_failing_worker_said_before_the_launchers_summary():
    worker = 'Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n  File "online.py", line 9 in step\n'
    summary = (
        'Traceback (most recent call last):\n  File ".venv/bin/torchrun", line 6, in <module>\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 4000 + "\n"
    )
    stderr = "UserWarning: a warning of no use\n" + worker + summary
    shown = launcher_failure(stderr)
    workers_part, launcher_part = shown.split("--- the launcher's end ---")
    assert (
        'File "online.py", line 9 in step' in workers_part and "Fatal Python error: Aborted" in workers_part
    )
    assert "UserWarning" not in workers_part and "ChildFailedError" not in workers_part
    assert launcher_part.rstrip().endswith("=" * 100)
    assert worker.strip() not in stderr[-3000:]  # a plain tail would have lost it
