"""The Trainer's callbacks: checkpoint file modes, no checkpoint at the last step, dvclive's curves, and the
progress bar with the logged numbers as its postfix. Experiment tracking, not training: none of them changes
what a run computes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

from transformers.trainer_callback import ProgressCallback

from spag.models.loading import usual_modes
from spag.runtime.folders import mark_output_dir
from spag.runtime.manifest import record_written
from spag.train.bookkeeping import LIVE_KIND, live_dir_of


def _usual_modes_callback():
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class UsualModes(TrainerCallback):
        """An intermediate checkpoint's files get the usual mode, as the final model's do (safetensors
        writes its weights 0600); the checkpoint is recorded as spag's in the checkpoint folder."""

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                usual_modes(folder)
                record_written(folder)

    return UsualModes()


def _no_final_checkpoint_callback():
    from transformers import TrainerCallback

    class NoFinalCheckpoint(TrainerCallback):
        """No checkpoint at the last step (the Trainer writes one there whatever ``save_steps``): the finished
        model is saved right after, and the checkpoint, whose optimizer state is twice the model's size,
        would be written only to be removed. Kept when the run keeps its checkpoints."""

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                control.should_save = False

    return NoFinalCheckpoint()


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


def run_callbacks(run) -> tuple[list, object]:
    """The callbacks of a run of :mod:`spag.train.job` (checkpoint file modes, no checkpoint at the last
    step unless checkpoints are kept, dvclive curves when ``live``) and its dvclive Live."""
    config = run.config
    live = None
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
        live = _open_live(live_dir, resume=run.resume_from is not None, params=params)
    callbacks = [_usual_modes_callback()] + (
        [] if config.keep_checkpoints else [_no_final_checkpoint_callback()]
    )
    return callbacks + ([_make_live_callback(live)] if live is not None else []), live


def show_postfix_progress(trainer) -> None:
    if trainer.pop_callback(ProgressCallback) is not None:  # present when progress bars are on
        trainer.add_callback(_PostfixProgress)


class _PostfixProgress(ProgressCallback):
    """The Trainer's progress bar, its logged numbers shown as the bar's postfix (loss, KL, learning rate)
    instead of a printed dict per logging step; the curves are in dvclive and training_summary.json."""

    SHOWN: ClassVar[dict[str, str]] = {
        "loss": "loss",
        "reward": "reward",
        "kl": "kl",
        "ratio_mean": "ratio",
        "learning_rate": "lr",
    }

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            shown = {
                name: f"{logs[key]:.4g}"
                for key, name in self.SHOWN.items()
                if isinstance(logs.get(key), (int, float))
            }
            if shown:
                self.training_bar.set_postfix(shown, refresh=False)
