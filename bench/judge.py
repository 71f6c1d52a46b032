"""Judge throughput: episodes/s over a synthetic 100k-episode corpus, on one core.

    python bench/judge.py [--episodes 100000] [--words 5000]

Target: at least 20,000 episodes/s. The corpus mixes every outcome: fouls, said words, right and wrong
guesses, and ties that run to the turn limit (the slowest case: every utterance is scanned).
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter

from spag.game.taboo.rules import judge, word_forms
from spag.game.words import top_words

FILLER = (
    "think about what you use in the morning when the weather turns cold and people gather "
    "near something warm while they talk about small things and old stories"
).split()


def utterance(rng: random.Random, target: str, mention: bool) -> str:
    words = rng.choices(FILLER, k=rng.randint(8, 25))
    if mention:
        words.insert(rng.randrange(len(words)), rng.choice(sorted(word_forms(target))))
    return " ".join(words).capitalize() + "."


def make_corpus(n: int, vocabulary: list[str], seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    corpus = []
    for _ in range(n):
        target = rng.choice(vocabulary)
        history = []
        for i in range(10):
            role = "attacker" if i % 2 == 0 else "defender"
            kind = rng.random()
            if role == "defender" and kind < 0.06:
                guess = target if rng.random() < 0.5 else rng.choice(vocabulary)
                history.append({"role": role, "content": f"Hmm. I know the word! It is {guess}."})
                break
            history.append({"role": role, "content": utterance(rng, target, mention=kind < 0.02)})
        corpus.append({"target_word": target, "max_turns": 5, "history": history})
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--words", type=int, default=5_000)
    args = parser.parse_args()

    vocabulary = top_words(args.words)
    corpus = make_corpus(args.episodes, vocabulary)
    utterances = sum(len(e["history"]) for e in corpus)

    start = time.perf_counter()
    for word in vocabulary:  # the cold cost: building each word's forms and pattern once
        judge(word, [], 1)
    warm = time.perf_counter() - start

    start = time.perf_counter()
    outcomes = Counter(judge(e["target_word"], e["history"], e["max_turns"]).outcome for e in corpus)
    elapsed = time.perf_counter() - start

    rate = len(corpus) / elapsed
    print(f"corpus: {len(corpus)} episodes, {utterances} utterances, {len(vocabulary)} target words")
    print(f"outcomes: {dict(outcomes)}")
    print(f"word-pattern cache warm-up: {warm:.2f} s for {len(vocabulary)} words")
    print(f"judge: {rate:,.0f} episodes/s ({utterances / elapsed:,.0f} utterances/s) on one core")
    print(f"target 20,000 episodes/s: {'PASS' if rate >= 20_000 else 'FAIL'}")


if __name__ == "__main__":
    main()
