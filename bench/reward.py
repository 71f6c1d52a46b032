"""`spag reward` on a synthetic corpus: wall time of the whole command, from episodes file to rows file.

    python bench/reward.py [--episodes 100000] [--words 5000] [--keep DIR]

The corpus is bench/judge.py's (every outcome: fouls, said words, right and wrong guesses, ties), written
once as Parquet through spag's episode writer. The command runs as a user runs it (`spag reward EPISODES
-o ROWS`, the command's defaults: decayed winners' rewards, no general SFT rows), three times; the
best time counts. With --keep the episodes and the rows stay in DIR, so that two versions of the code can
be compared on the same input and their rows checked for equality.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from judge import make_corpus

from spag.game.episodes import write_episodes
from spag.game.words import top_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--words", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="keep the episodes and rows in this folder")
    args = parser.parse_args()

    folder = args.keep or Path(tempfile.mkdtemp(prefix="spag-bench-reward-"))
    folder.mkdir(parents=True, exist_ok=True)
    episodes = folder / "episodes.parquet"
    if not episodes.exists():
        corpus = make_corpus(args.episodes, top_words(args.words))
        write_episodes([{**e, "id": str(i)} for i, e in enumerate(corpus)], episodes)
    rows = folder / "rows.parquet"
    command = [str(Path(sys.executable).with_name("spag")), "reward", str(episodes), "-o", str(rows)]
    times = []
    for _ in range(args.repeats):
        rows.unlink(missing_ok=True)
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode:
            sys.exit(f"spag reward failed ({done.returncode}): {done.stderr.strip()}")
    summary = (
        done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip().splitlines()[-1]
    )
    print(f"corpus: {args.episodes} episodes in {episodes}")
    print(
        f"spag reward: best of {args.repeats} {min(times):.2f} s ({', '.join(f'{t:.2f}' for t in times)}); "
        f"{args.episodes / min(times):,.0f} episodes/s"
    )
    print(f"its summary: {summary}")


if __name__ == "__main__":
    main()
