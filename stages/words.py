"""Stage `words`: the target word list and its training / held-out split.

The words are wordfreq's most frequent English words, or the first `top` words of a list file
(`words.source`, e.g. the original project's all_target_words.txt), in the file's order.
"""

from common import WORDS, param_file, params, stop

from spag.console import summary
from spag.io import DataError
from spag.words import split_words, top_words, words_from_file, write_words

p = params()["words"]
if p["source"]:
    try:
        words = words_from_file(param_file({"words": p}, "words", "source"), p["top"],
                                nouns_only=p["nouns_only"], skip_stop_words=p["skip_stop_words"])
    except DataError as exc:
        stop(f"words.source: {exc}")
else:
    words = top_words(p["top"], nouns_only=p["nouns_only"], skip_stop_words=p["skip_stop_words"])
train, held = split_words(words, p["eval_fraction"])
write_words(words, WORDS / "all.txt")
write_words(train, WORDS / "train.txt")
write_words(held, WORDS / "eval.txt")
summary("words", f"{len(words)} words{' from ' + p['source'] if p['source'] else ''}: {len(train)} training, "
                 f"{len(held)} held out")
