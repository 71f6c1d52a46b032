"""Stage `imitation_data`: the winners' moves in the teacher's decisive games, both roles."""

from common import DATA, METRICS, params

from spag.io import write_json_atomic
from spag.rewards import build_imitation_set

p = params()
stats = build_imitation_set(DATA / "teacher" / "episodes", DATA / "imitation" / "rows.parquet", seed=p["seed"])
counts = stats.as_dict()
write_json_atomic(METRICS / "imitation" / "data.json", counts)
print(f"imitation set: {counts}")
