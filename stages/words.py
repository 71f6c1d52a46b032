"""Stage `words`: the target word list and its training / held-out split."""

from common import WORDS, params

from spag.console import summary
from spag.words import split_words, top_words, write_words

p = params()["words"]
words = top_words(p["top"], nouns_only=p.get("nouns_only", False))
train, held = split_words(words, p["eval_fraction"])
write_words(words, WORDS / "all.txt")
write_words(train, WORDS / "train.txt")
write_words(held, WORDS / "eval.txt")
summary("words", f"{len(words)} words: {len(train)} training, {len(held)} held out")
