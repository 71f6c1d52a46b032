"""Stage `reward@N`: judged self-play episodes -> weighted training rows, mixed with general SFT data.

With `spag.control: true` the game rows are dropped: the control arm trains on the SFT data alone.
"""

from common import METRICS, epoch_arg, epoch_dir, params, templates_file

from spag.console import summary
from spag.io import write_json_atomic
from spag.rewards import RewardOptions, build_reward_set

p = params()
epoch = epoch_arg()
cfg = p["reward"]
stats = build_reward_set(
    epoch_dir(epoch) / "episodes",
    epoch_dir(epoch) / "rows.parquet",
    decay=cfg["decay"],
    sft=cfg["sft"],
    sft_limit=cfg["sft_limit"],
    seed=p["seed"] + int(epoch),
    control=p["spag"]["control"],
    options=RewardOptions(decay=cfg["decay"], foul_penalty=cfg["foul_penalty"], loser_reward=cfg["loser_reward"],
                          role_baseline=cfg["role_baseline"], keep_truncated=cfg["keep_truncated"]),
    rules=p["game"]["rules"],
    templates=templates_file(p),
)
write_json_atomic(METRICS / "epochs" / epoch / "reward.json", stats.as_dict())
summary(f"reward@{epoch}", stats.line())
