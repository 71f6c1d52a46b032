"""Stage ``reward@N``: judge, decayed rewards, role weights, foul penalty, general SFT rows.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.pipeline.context import Layout
from spag.pipeline.games import stage_game
from spag.rewards.build import build_reward_set
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import summary


def reward(settings: Settings, layout: Layout, epoch: str) -> None:
    """Judged self-play episodes -> weighted training rows, mixed with general SFT data.

    With ``spag.control: true`` the game rows are dropped: the control arm trains on the SFT data alone.
    """
    stats = build_reward_set(
        layout.epoch(epoch) / "episodes",
        layout.epoch(epoch) / "rows.parquet",
        settings.reward,
        stage_game(settings),
        seed=settings.seed + int(epoch),
        control=settings.spag.control,
    )
    write_json_atomic(layout.metrics / "epochs" / epoch / "reward.json", stats.as_dict())
    summary(f"reward@{epoch}", stats.line())
