"""Stage `teacher_play`: the teacher plays itself; its winning moves become the imitation data.

The default teacher is the base model with the strategies of spag/teacher.py (a coached attacker, a
dictionary guess at the defender's last turn), so that a small model wins games in both roles; params
can name an OpenAI-compatible endpoint instead (GPT-4 in the paper), with the strategies off.
"""

from collections import Counter

from common import BASE_MODEL, DATA, WORDS, params, play_config, player_options, sample_words

from spag.console import summary
from spag.game.rules import DECISIVE
from spag.partial import resumable_output
from spag.play import PLAY_KIND, PlayStats, run_games
from spag.words import read_words

p = params()
t = p["teacher"]
words = sample_words(WORDS / "train.txt", t["words"], seed=f"{p['seed']}-teacher")
model = str(BASE_MODEL) if t["model"] == "base" else t["model"]
config = play_config(p, "teacher", seed=p["seed"])
stats = PlayStats()
# Resumable under `dvc repro`: the shards live beside the declared output until the stage finishes.
with resumable_output(DATA / "teacher" / "episodes", PLAY_KIND) as work:
    episodes = run_games(model, model, words, config, backend=t["backend"], output=work, resume=True,
                         guess_words=read_words(WORDS / "all.txt"), stats=stats, **player_options(t))
wins = Counter(e["outcome"] for e in episodes if e["outcome"] in DECISIVE)
summary("teacher_play", f"{stats.line()}; wins for imitation: attacker {wins['attacker_wins']}, "
                        f"defender {wins['defender_wins']}")
