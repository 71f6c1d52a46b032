"""Stage ``imitation_data``: the winners' moves of the teacher's decisive games, both roles (``imitate.moves:
all``: every move of every game).

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.pipeline.context import Layout
from spag.pipeline.games import stage_game
from spag.rewards.build import build_imitation_set
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import summary


def imitation_data(settings: Settings, layout: Layout) -> None:
    """The winners' moves in the teacher's decisive games, both roles (or all of its moves: ``imitate.moves``),
    plus general SFT data when ``imitate.sft`` asks for it (the original's imitation set had none)."""
    stats = build_imitation_set(
        layout.data / "teacher" / "episodes",
        layout.data / "imitation" / "rows.parquet",
        settings.imitate,
        stage_game(settings),
        seed=settings.seed,
        keep_truncated=settings.reward.keep_truncated,
    )
    write_json_atomic(layout.metrics / "imitation" / "data.json", stats.as_dict())
    if not all(stats.role_games.values()):
        print(
            "warning: the imitation set lacks wins of one role; give the teacher more words or a stronger model"
        )
    summary("imitation_data", stats.line())
