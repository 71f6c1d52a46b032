"""A training run's folders, claimed by the harness around the core's run (:mod:`spag.train.job`,
:mod:`spag.train.online`): the model's output folder, its checkpoints and dvclive's folder pass the output
rule before any work, the first process holds their locks while the run lasts, and the run is tracked
(:class:`spag.harness.tracking.RunTracking`), and a DeepSpeed run's process is prepared before it
(:mod:`spag.harness.environment`). :func:`train` and :func:`train_online` are what the commands, the stages
and a launched job call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from spag.config import TrainConfig
from spag.harness.claims import claim_output_dir
from spag.harness.environment import prepare_deepspeed
from spag.harness.folders import PLAY_KIND, remove_if_bare
from spag.harness.locks import writing
from spag.harness.tracking import RunTracking
from spag.harness.zero import cuda_bytes, first_process, world_size, zero_where_it_pays
from spag.models.devices import check_launch
from spag.models.loading import pick_device
from spag.train.bookkeeping import CHECKPOINTS_KIND, LIVE_KIND, TRAIN_KIND, checkpoint_dir_of, live_dir_of
from spag.train.job import run_training, with_knobs


@contextlib.contextmanager
def training_outputs(output_dir, config: TrainConfig) -> Iterator[Path]:
    """Claim a run's folders (refusing one that is not ours to write), lock them on the first process for
    the block, and yield the output folder to write (a symlink followed). A checkpoint folder outside the
    output that the run emptied is removed after it."""
    first = first_process()
    # Only the first process decides whether the folder may be written: another process that starts later
    # finds the first one's files there already, and claims the folder the first one checked.
    output_dir = claim_output_dir(
        output_dir, TRAIN_KIND, overwrite=config.overwrite or not first, resume=config.resume
    )
    checkpoint_dir = claim_output_dir(checkpoint_dir_of(config, output_dir), CHECKPOINTS_KIND, overwrite=True)
    if config.live:  # dvclive rewrites its folder's dvc.yaml, params.yaml, metrics.json and plots/
        claim_output_dir(live_dir_of(config, output_dir), LIVE_KIND, overwrite=True, resume=config.resume)
    inside = checkpoint_dir.absolute().is_relative_to(output_dir.absolute())
    with contextlib.ExitStack() as locks:
        if first:
            locks.enter_context(writing(output_dir))
            if not inside:
                locks.enter_context(writing(checkpoint_dir))
        yield output_dir
    if not inside and first:
        remove_if_bare(checkpoint_dir)


def deepspeed_process(config: TrainConfig, device: str) -> None:
    """A DeepSpeed run's process prepared (:func:`spag.harness.environment.prepare_deepspeed`; on a CPU its
    processes joined over gloo) once its DeepSpeed file is known to be a JSON object; nothing without one."""
    if config.deepspeed:
        check_launch(None, config.deepspeed, deepspeed_key="deepspeed")
        prepare_deepspeed(on_cpu=device == "cpu")


def train(
    method, model, data, output_dir, ref=None, config=None, other_checkpoints="refuse", **knobs
) -> Path:
    """:func:`spag.train.job.run_training` (the same arguments) with its folders claimed and its run
    tracked, and DeepSpeed left out of one process where ZeRO does not pay (:mod:`spag.harness.zero`)."""
    whole = with_knobs(config, knobs)
    device = pick_device(whole.device)
    whole, note = zero_where_it_pays(whole, method, model, device, world_size(), cuda_bytes(device))
    if note and first_process():
        print(note, flush=True)
    deepspeed_process(whole, device)
    with training_outputs(output_dir, whole) as output:
        return run_training(
            method, model, data, output, ref, whole, other_checkpoints, tracking=RunTracking(whole)
        )


def train_online(model, words, output_dir, *, config: TrainConfig, episodes_dir, **options) -> Path:
    """:func:`spag.train.online.run_online` (the same arguments) with its folders claimed (the episode
    folder too) and its run tracked."""
    from spag.train.online import run_online

    deepspeed_process(config, pick_device(config.device))
    with training_outputs(output_dir, config) as output:
        claim_output_dir(episodes_dir, PLAY_KIND, overwrite=True, resume=True)
        return run_online(
            model,
            words,
            output,
            config=config,
            episodes_dir=episodes_dir,
            tracking=RunTracking(config),
            **options,
        )
