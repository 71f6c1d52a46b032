"""Stage `imitate`: imitation learning (SFT with a KL penalty to the base model) on the teacher's wins."""

from common import BASE_MODEL, DATA, ROOT, model_dir, params, train

p = params()
cfg = p["imitate"]
train(cfg["method"], BASE_MODEL, DATA / "imitation" / "rows.parquet", model_dir("imitation"),
      ROOT / "dvclive" / "imitate", cfg, p["seed"])
