"""Stage `imitation_data`: the winners' moves in the teacher's decisive games, both roles, plus general
SFT data when `imitate.sft` asks for it (the original's imitation set had none)."""

from common import DATA, METRICS, params, templates_file

from spag.console import summary
from spag.io import write_json_atomic
from spag.rewards import build_imitation_set

p = params()
stats = build_imitation_set(DATA / "teacher" / "episodes", DATA / "imitation" / "rows.parquet", seed=p["seed"],
                            sft=p["imitate"]["sft"], sft_limit=p["imitate"]["sft_limit"],
                            rules=p["game"]["rules"], templates=templates_file(p),
                            keep_truncated=p["reward"]["keep_truncated"])
write_json_atomic(METRICS / "imitation" / "data.json", stats.as_dict())
if not stats.attacker_games or not stats.defender_games:
    print("warning: the imitation set lacks wins of one role; give the teacher more words or a stronger model")
summary("imitation_data", stats.line())
