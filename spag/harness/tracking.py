"""Experiment tracking of a training run, added by the harness through the core's
:class:`spag.train.callbacks.Tracking` hook: each intermediate checkpoint recorded as spag's in its folder's
manifest, and dvclive's curves and summary when the run's ``live`` setting asks for them. None of it changes
what a run computes.
"""

from __future__ import annotations

import math
from pathlib import Path

from spag.config import TrainConfig
from spag.harness.folders import mark_output_dir
from spag.harness.manifest import record_written
from spag.train.bookkeeping import LIVE_KIND, live_dir_of


def _record_checkpoints_callback():
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class RecordCheckpoints(TrainerCallback):
        """An intermediate checkpoint is recorded as spag's in the checkpoint folder, so that a later run
        knows it as its own (to continue it, or to remove it)."""

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                record_written(folder)

    return RecordCheckpoints()


def _make_live_callback(live):
    from transformers.integrations import DVCLiveCallback

    class LiveCallback(DVCLiveCallback):
        """transformers' dvclive callback, with each curve under ``train/`` (``train_runtime`` as
        ``train/runtime``, as the callback names it) and numbered by the optimiser step; the end-of-training
        totals are left to run_training (``summary/``). A resumed run first writes the curves up to its
        checkpoint again (from the checkpoint's log history), for ``dvc repro`` deletes dvclive's folder
        before it re-runs a stage."""

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            super().on_train_begin(args, state, control, model=model, **kwargs)
            if state.is_world_process_zero and state.global_step > 0 and self.live.step == 0:
                for entry in state.log_history:
                    self._log_curves(args, state, control, entry["step"], entry)

        def on_log(self, args, state, control, model=None, logs=None, **kwargs):
            self._log_curves(args, state, control, state.global_step, logs)

        def _log_curves(self, args, state, control, step, logs):
            if not logs or "loss" not in logs:
                return
            self.live.step = step
            curves = {
                f"train/{key.removeprefix('train_')}": float(value)
                for key, value in logs.items()
                if key != "step"
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            }
            super().on_log(args, state, control, logs=curves)

    return LiveCallback(live=live)


def _open_live(live_dir: Path, resume: bool, params: dict):
    from dvclive import Live

    # No experiment, no git commit, no dvc.yaml of its own: the pipeline's dvc.yaml declares the plots.
    live = Live(dir=str(live_dir), resume=resume, save_dvc_exp=False, dvcyaml=None, report=None)
    live.log_params(params)
    return live


class RunTracking:
    """The harness's :class:`spag.train.callbacks.Tracking`: checkpoints recorded, and dvclive when
    ``config.live``."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.live = None

    def callbacks(self, run) -> list:
        config = self.config
        if config.live and run.main:
            live_dir = live_dir_of(config, run.output_dir)
            mark_output_dir(live_dir, LIVE_KIND)
            params = {
                "method": run.method,
                "model": str(run.model),
                "ref": str(run.ref),
                "data": str(run.data),
                **{k: v for k, v in config.model_dump().items() if isinstance(v, (int, float, str, bool))},
            }
            self.live = _open_live(live_dir, resume=run.resume_from is not None, params=params)
        return [_record_checkpoints_callback()] + ([_make_live_callback(self.live)] if self.live else [])

    def finish(self, record: dict) -> None:
        if self.live is None:
            return
        for key in ("steps", "final_loss", "mean_loss", "tokens", "tokens_per_second"):
            if record[key] is not None:
                self.live.log_metric(f"summary/{key}", record[key], plot=False)
        self.live.end()
