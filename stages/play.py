"""Stage `play@N`: the previous checkpoint plays itself on this epoch's training words."""

import random

from common import WORDS, epoch_arg, epoch_dir, params, previous_model

from spag.play import PlayConfig, run_games
from spag.words import read_words

p = params()
epoch = epoch_arg()
cfg = p["play"]
train_words = read_words(WORDS / "train.txt")
# Each epoch plays a fresh seeded sample of the training words (the paper plays all of them).
words = random.Random(f"{p['seed']}-{epoch}").sample(train_words, min(cfg["words"], len(train_words)))
model = str(previous_model(p, epoch))
config = PlayConfig(
    max_turns=p["game"]["max_turns"],
    temperature=cfg["temperature"],
    top_k=cfg["top_k"],
    max_new_tokens=cfg["max_new_tokens"],
    batch_size=cfg["batch_size"],
    seed=p["seed"] + int(epoch),
)
run_games(model, model, words, config, backend=cfg["backend"], output=epoch_dir(epoch) / "episodes")
