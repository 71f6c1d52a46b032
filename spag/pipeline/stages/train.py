"""Stage ``train@N``: SPAG policy optimisation from the previous checkpoint: offline on this epoch's rows, or
online.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from pathlib import Path

from spag.config import ONLINE, Reward, Settings
from spag.harness.folders import PLAY_KIND, mark_output_dir
from spag.harness.launch import launch_online
from spag.harness.partial import resumable_output
from spag.harness.training import train_online
from spag.pipeline.context import Declared, Layout, previous_model
from spag.pipeline.games import sample_words, stage_game
from spag.pipeline.training import train_config, train_model
from spag.play.engine import PlayConfig
from spag.runtime.errors import ParamsError, SettingError
from spag.train.online import OnlineGames


def train(settings: Settings, layout: Layout, epoch: str) -> None:
    """SPAG offline policy optimisation, starting from and referenced to the previous model; or, with
    ``spag.method: online``, online self-play from it (its games in ``data/epoch_N/online/episodes``, which
    under offline-po holds no games)."""
    step = settings.spag
    if step.method == ONLINE:
        _train_online(settings, layout, epoch)
        return
    train_model(
        step,
        step.epochs_per_iteration,
        previous_model(settings, layout, epoch),
        layout.epoch(epoch) / "rows.parquet",
        layout.model(f"epoch_{epoch}"),
        layout,
        f"epoch_{epoch}",
        settings.seed + int(epoch),
    )

    mark_output_dir(_online_episodes(layout, epoch), PLAY_KIND)


def _online_episodes(layout: Layout, epoch: str) -> Path:
    return layout.epoch(epoch) / "online" / "episodes"


def _train_online(settings: Declared, layout: Layout, epoch: str) -> None:
    """Online self-play (:mod:`spag.train.online`): train@N plays its own games on a seeded sample of the
    training words, with the policy it trains, from the previous checkpoint."""
    p, step, name = settings.play, settings.spag, f"epoch_{epoch}"
    source = layout.words / ("all.txt" if p.include_held_out else "train.txt")
    words = sample_words(
        source, settings.online.words, f"{settings.seed}-{epoch}-online", stage_game(settings)
    )
    seed = settings.seed + int(epoch)
    try:
        games = OnlineGames(
            play=PlayConfig(stage_game(settings), p, seed),
            online=settings.online,
            reward=Reward(keep_truncated=settings.reward.keep_truncated, payoff=settings.reward.payoff),
        )
    except SettingError as exc:
        raise ParamsError("params.yaml", exc.key, exc.message) from None
    output = layout.model(name)
    config = train_config(step, step.epochs_per_iteration, output, layout, name, seed)
    # The games go to a work folder beside the declared output, which DVC does not delete, as the
    # checkpoints do: a killed stage resumes from its latest checkpoint and the games played before it.
    episodes = _online_episodes(layout, epoch)
    with resumable_output(episodes, PLAY_KIND) as work:
        job = dict(
            games=games,
            config=config,
            episodes_dir=work,
            data=source,
            other_checkpoints="restart",
            published=episodes,
        )
        model = previous_model(settings, layout, epoch)
        if not step.launcher:
            train_online(model, words, output, **job)
        else:
            launch_online(step.launcher, model, words, output, **job)
