"""Stage `teacher_play`: the teacher plays itself; its winning moves become the imitation data.

The default teacher is the base model, with worked examples in its play prompt; params can name an
OpenAI-compatible endpoint instead (GPT-4 in the paper).
"""

from common import BASE_MODEL, DATA, WORDS, params

from spag.play import PlayConfig, run_games
from spag.words import read_words

p = params()
t = p["teacher"]
words = read_words(WORDS / "train.txt")[: t["words"]]
model = str(BASE_MODEL) if t["model"] == "base" else t["model"]
options = {"base_url": t["base_url"]} if t["backend"] == "openai" else {}
config = PlayConfig(
    max_turns=p["game"]["max_turns"],
    temperature=t["temperature"],
    max_new_tokens=t["max_new_tokens"],
    seed=p["seed"],
    examples=t["examples"],
)
run_games(model, model, words, config, backend=t["backend"], output=DATA / "teacher" / "episodes", **options)
