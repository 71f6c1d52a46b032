"""Stage `teacher_play`: the teacher plays itself; its winning moves become the imitation data.

The default teacher is the base model with the strategies of spag/teacher.py (a coached attacker, a
dictionary guess at the defender's last turn), so that a small model wins games in both roles; params
can name an OpenAI-compatible endpoint instead (GPT-4 in the paper), with the strategies off.

Instead of playing, `teacher.episodes: FILE` imports existing episodes (the original project's GPT-4 games,
judged here by `game.rules`, held-out words left out), and `teacher.rows: FILE` a ready-made imitation file
(query/target rows, used as they are by imitation_data). DVC tracks the file's path, not its content:
after changing the file in place, run `dvc repro -f teacher_play`.
"""

from collections import Counter

from common import BASE_MODEL, DATA, WORDS, param_file, params, play_config, player_options, sample_words, stop

from spag.console import summary
from spag.game.rules import DECISIVE
from spag.io import DataError
from spag.partial import resumable_output
from spag.words import read_words

p = params()
t = p["teacher"]
out = DATA / "teacher" / "episodes"
if t["rows"]:
    from spag.rewards import import_ready_made_rows

    try:
        n = import_ready_made_rows(param_file(p, "teacher", "rows"), out)
    except DataError as exc:
        stop(f"teacher.rows: {exc}")
    summary("teacher_play", f"{n} ready-made imitation rows imported from {t['rows']} (no games played)")
    raise SystemExit(0)

if t["episodes"]:
    from spag.game.episodes import import_episodes

    try:
        episodes, held_out = import_episodes(param_file(p, "teacher", "episodes"), out, rules=p["game"]["rules"],
                                             exclude_words=read_words(WORDS / "eval.txt"))
    except DataError as exc:
        stop(f"teacher.episodes: {exc}")
    wins = Counter(e["outcome"] for e in episodes if e["outcome"] in DECISIVE)
    summary("teacher_play", f"{len(episodes)} episodes imported from {t['episodes']} ({held_out} on held-out "
                            f"words left out), judged by the {p['game']['rules']} rules; wins for imitation: "
                            f"attacker {wins['attacker_wins']}, defender {wins['defender_wins']}")
    raise SystemExit(0)

from spag.game.episodes import PLAY_KIND  # noqa: E402
from spag.play import PlayStats, run_games  # noqa: E402

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
