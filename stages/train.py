"""Stage `train@N`: SPAG offline policy optimisation, starting from and referenced to the previous model."""

from common import ROOT, epoch_arg, epoch_dir, model_dir, params, previous_model, train

p = params()
epoch = epoch_arg()
cfg = p["spag"]
train(cfg["method"], previous_model(p, epoch), epoch_dir(epoch) / "rows.parquet", model_dir(f"epoch_{epoch}"),
      ROOT / "dvclive" / f"epoch_{epoch}", cfg, p["seed"] + int(epoch))
