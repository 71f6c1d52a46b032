"""The Trainer's callbacks that belong to training itself: checkpoint file modes, no checkpoint at the last
step, and the progress bar with the logged numbers as its postfix; and :class:`Tracking`, the hook through
which the harness adds experiment tracking (dvclive, :mod:`spag.harness.tracking`). None of them changes
what a run computes.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol

from transformers.trainer_callback import ProgressCallback

from spag.models.loading import usual_modes


class Tracking(Protocol):
    """What a run reports beyond its output folder: more callbacks for the Trainer, and the run's summary
    record once the model is in place (the harness's dvclive, :mod:`spag.harness.tracking`)."""

    def callbacks(self, run) -> list:
        """The Trainer callbacks of ``run`` (a :class:`spag.train.job._Run`), on every process."""

    def finish(self, record: dict) -> None:
        """The run's summary (``training_summary.json``), on the main process, after the model is in place."""


def _usual_modes_callback():
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class UsualModes(TrainerCallback):
        """An intermediate checkpoint's files get the usual mode, as the final model's do (safetensors
        writes its weights 0600)."""

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                usual_modes(folder)

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


def run_callbacks(run, tracking: Tracking | None) -> list:
    """The callbacks of a run of :mod:`spag.train.job` or :mod:`spag.train.online`: checkpoint file modes,
    no checkpoint at the last step unless checkpoints are kept, and ``tracking``'s."""
    callbacks = [_usual_modes_callback()]
    if not run.config.keep_checkpoints:
        callbacks.append(_no_final_checkpoint_callback())
    return callbacks + (tracking.callbacks(run) if tracking is not None else [])


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
