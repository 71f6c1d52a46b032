"""Benchmark: every named `spag analyze` query on a synthetic 1M-episode Parquet set, target < 2 s each
(a query that judges the episodes afresh: the judge's own rate).

The episodes are generated directly with pyarrow/numpy in the shape `spag play` writes (target_word,
max_turns, history as list<struct<role, content>>, outcome, turns, attacker_model, defender_model, id),
spread over several shards in data/teacher/episodes and data/epoch_<n>/episodes. Outcomes are drawn
at random with the game's constraints (fouls end on an attacker move, ties run the full 2 * max_turns
utterances); the judge is not called a million times, since the queries read the stored outcome.

A query that calls the judge (``spag_judge_by``, as ``rules_diff`` does with both rule sets) runs Python on
every episode, and no SQL makes that faster than the judge: its limit is the time bench/judge.py's target
rate (20,000 episodes/s on one core) allows for its judgements, ``--limit`` where that is longer. As in
bench/judge.py, whose rate leaves out each word's first judgement (its forms and pattern built once), the
first run, which builds them, is shown but not judged: the median run is.

Each query runs end to end as `spag analyze` runs it (fresh DuckDB connection, view set-up, the words
table for by_frequency) --repeat times; the table shows the first (cold) and the median run, and PASS
when the slowest run is under its limit (a query that judges: the median run).

    python bench/analyze.py [--episodes 1000000] [--shards 10] [--dir DIR] [--repeat 3] [--limit 2.0]
                            [--query NAME ...]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

JUDGE_RATE = 20_000  # episodes/s, bench/judge.py's target for one rule set on one core
OUTCOMES = np.array(["attacker_wins", "defender_wins", "tie", "attacker_breaks_rules"])
# Per run: the share of each outcome drifts over the epochs, as training would move it.
RUN_MIX = {
    "teacher": (0.40, 0.30, 0.20, 0.10),
    "epoch_1": (0.38, 0.27, 0.25, 0.10),
    "epoch_2": (0.36, 0.30, 0.26, 0.08),
    "epoch_3": (0.35, 0.33, 0.26, 0.06),
    "epoch_4": (0.34, 0.36, 0.25, 0.05),
}
SUBJECTS = [
    "It",
    "This thing",
    "Something like that",
    "What I have in mind",
    "The place I mean",
    "Your answer",
]
VERBS = [
    "reminds me of",
    "is often found near",
    "goes well with",
    "is used with",
    "makes me think of",
    "has something to do with",
]
OBJECTS = [
    "a rainy afternoon in the city",
    "the old kitchen table",
    "a long walk by the river",
    "the music teacher at school",
    "a box of tools in the garage",
    "a summer holiday by the sea",
    "the first day of winter",
    "a busy morning at the market",
]


def sentence_pool() -> pa.Array:
    return pa.array([f"{s} {v} {o}." for s in SUBJECTS for v in VERBS for o in OBJECTS])


def generate_shard(
    rng: np.random.Generator, n: int, words: pa.Array, pool: pa.Array, mix, model: str, first_id: int
) -> pa.Table:
    max_turns = 5
    outcome_idx = rng.choice(len(OUTCOMES), size=n, p=mix)
    turns = np.empty(n, dtype=np.int64)
    decided = (outcome_idx == 0) | (outcome_idx == 1)
    turns[decided] = rng.integers(2, 2 * max_turns + 1, size=decided.sum())
    fouls = outcome_idx == 3
    turns[fouls] = 2 * rng.integers(0, max_turns, size=fouls.sum()) + 1  # an attacker move: odd
    turns[outcome_idx == 2] = 2 * max_turns

    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(turns, out=offsets[1:])
    total = int(offsets[-1])
    position = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], turns)
    roles = pa.array(["attacker", "defender"]).take(pa.array(position % 2))
    contents = pool.take(pa.array(rng.integers(0, len(pool), size=total)))
    history = pa.ListArray.from_arrays(
        pa.array(offsets), pa.StructArray.from_arrays([roles, contents], names=["role", "content"])
    )
    return pa.table(
        {
            "id": pa.array([f"g{first_id + i}" for i in range(n)]),
            "target_word": words.take(pa.array(rng.integers(0, len(words), size=n))),
            "max_turns": pa.array(np.full(n, max_turns, dtype=np.int64)),
            "history": history,
            "outcome": pa.array(OUTCOMES[outcome_idx]),
            "turns": pa.array(turns),
            "attacker_model": pa.array([model] * n),
            "defender_model": pa.array([model] * n),
        }
    )


def generate(root: Path, episodes: int, shards: int, seed: int = 0) -> None:
    from spag.game.words import top_words

    rng = np.random.default_rng(seed)
    words = pa.array(top_words(50_000))
    pool = sentence_pool()
    runs = list(RUN_MIX)
    per_shard = episodes // shards
    for s in range(shards):
        run = runs[s % len(runs)]
        n = per_shard + (episodes % shards if s == shards - 1 else 0)
        table = generate_shard(rng, n, words, pool, RUN_MIX[run], f"checkpoints/{run}", s * per_shard)
        out = root / "data" / run / "episodes" / f"shard-{s:03d}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument(
        "--dir", type=Path, default=None, help="Keep the generated data here (reused if present)."
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit", type=float, default=2.0, help="Seconds a query may take.")
    parser.add_argument("--query", action="append", help="Run only this named query (repeatable).")
    args = parser.parse_args()

    from spag.analyze import execute, named_queries

    queries = named_queries()
    chosen = args.query or list(queries)
    for name in chosen:
        if name not in queries:
            parser.error(f"--query {name}: not a named query (one of {', '.join(queries)})")
    root = args.dir or Path(tempfile.mkdtemp(prefix="spag-bench-analyze-"))
    glob = str(root / "data" / "**" / "episodes" / "*.parquet")
    try:
        if not list(root.glob("data/*/episodes/*.parquet")):
            start = time.perf_counter()
            generate(root, args.episodes, args.shards)
            size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
            print(
                f"generated {args.episodes:,} episodes in {args.shards} shards ({size / 2**20:.0f} MiB) "
                f"in {time.perf_counter() - start:.1f} s"
            )
        counted = execute("SELECT count(*) AS n FROM episodes", glob).rows[0][0]
        print(f"episodes: {counted:,}   limit: {args.limit:.1f} s a query   repeats: {args.repeat}\n")

        print(f"{'query':<15} {'rows':>6} {'first s':>8} {'median s':>9} {'max s':>7} {'limit s':>8}  result")
        failed = 0
        for name in chosen:
            judgements = queries[name].sql.count("spag_judge_by(")
            limit = max(args.limit, judgements * counted / JUDGE_RATE)
            times, rows = [], 0
            for _ in range(args.repeat):
                result = execute(name, glob)
                times.append(result.seconds)
                rows = len(result.rows)
            ok = (statistics.median(times) if judgements else max(times)) < limit
            failed += not ok
            print(
                f"{name:<15} {rows:>6} {times[0]:>8.3f} {statistics.median(times):>9.3f} {max(times):>7.3f} "
                f"{limit:>8.1f}  {'PASS' if ok else 'FAIL'}"
            )
        print(f"[bench/analyze] {len(chosen) - failed} of {len(chosen)} queries within their limits")
        return 1 if failed else 0
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
