"""Stage `play@N`: the previous checkpoint plays itself on this epoch's training words."""

from common import (METRICS, WORDS, epoch_arg, epoch_dir, params, play_config, player_options, previous_model,
                    sample_words)

from spag.analyze import run_query
from spag.console import summary
from spag.io import write_json_atomic
from spag.partial import resumable_output
from spag.game.episodes import PLAY_KIND
from spag.play import PlayStats, run_games

p = params()
epoch = epoch_arg()
cfg = p["play"]
# Each epoch plays a fresh seeded sample of the training words (the paper plays all of them).
words = sample_words(WORDS / "train.txt", cfg["words"], seed=f"{p['seed']}-{epoch}")
model = str(previous_model(p, epoch))
stats = PlayStats()
# Shards go to a work folder beside the declared output, which DVC does not delete: a killed stage
# continues from its finished games on the next `dvc repro` (see spag.partial).
with resumable_output(epoch_dir(epoch) / "episodes", PLAY_KIND) as work:
    run_games(model, model, words, play_config(p, "play", seed=p["seed"] + int(epoch)), backend=cfg["backend"],
              output=work, resume=True, stats=stats, **player_options(cfg))
# The learning-curve numbers of this epoch's self-play (decisive, foul and win rates, lengths), from DuckDB.
(selfplay,) = run_query("selfplay", str(epoch_dir(epoch) / "episodes" / "*.parquet"))
write_json_atomic(METRICS / "epochs" / epoch / "selfplay.json", selfplay)
summary(f"play@{epoch}", f"{stats.line()}; decisive {selfplay['decisive_rate']:.2f}, foul {selfplay['foul_rate']:.2f}")
