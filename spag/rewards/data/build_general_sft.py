"""Build ``general_sft.jsonl``: a small general instruction set so the SFT term has data offline.

The paper mixes 52k Alpaca instructions into SPAG training; a pipeline that must run without a network
needs something local. This set is small and deliberately plain: arithmetic and number facts whose answers
are computed here (so they are right), plus hand-written definitions, rewriting, classification and short
reasoning items, kept as data in ``general_sft_source.yaml``. Rows are in the Alpaca shape (instruction,
input, output).

Regenerate with ``python -m spag.rewards.data.build_general_sft``; a test checks the shipped file matches.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import yaml

from spag.runtime.atomic import write_jsonl_atomic

SEED = 20240501
OUTPUT = Path(__file__).with_name("general_sft.jsonl")
SOURCE = Path(__file__).with_name("general_sft_source.yaml")
HAND_WRITTEN = ("definitions", "rewrites", "reasoning", "word_knowledge", "general_knowledge", "writing")


def _row(instruction: str, output: str, extra: str = "") -> dict:
    return {"instruction": instruction, "input": extra, "output": output}


# ------------------------------------------------------------------------------------------- computed


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _hours_minutes(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    text = f"{hours} hour{'s' if hours != 1 else ''}"
    return text + (f" and {rest} minutes" if rest else "")


def word_problems(rng: random.Random) -> list[dict]:
    """Short story problems, answered with the working shown. The four operations come first, then
    money, travel, clock and area; the order of the draws fixes the shipped file, so keep it."""
    return _four_operations(rng) + _everyday_measures(rng)


def _four_operations(rng: random.Random) -> list[dict]:
    """Stories of adding, taking away, multiplying and sharing with a remainder."""
    rows = []
    for _ in range(6):
        a, b = rng.randint(12, 90), rng.randint(12, 90)
        rows.append(
            _row(
                f"A baker bakes {a} loaves of bread in the morning and {b} in the afternoon. "
                "How many loaves does she bake that day?",
                f"She bakes {a} + {b} = {a + b} loaves.",
            )
        )
    for _ in range(6):
        a = rng.randint(30, 120)
        b = rng.randint(5, a - 5)
        rows.append(
            _row(
                f"Sam has {a} stickers and gives {b} of them to a friend. How many stickers does "
                "Sam have left?",
                f"Sam has {a} - {b} = {a - b} stickers left.",
            )
        )
    for _ in range(6):
        a, b = rng.randint(6, 24), rng.randint(3, 15)
        rows.append(
            _row(
                f"A box holds {a} pencils. How many pencils are there in {b} full boxes?",
                f"There are {a} × {b} = {a * b} pencils.",
            )
        )
    for _ in range(6):
        b = rng.randint(3, 9)
        a = rng.randint(2 * b, 12 * b)
        q, r = divmod(a, b)
        left = "none are left over" if r == 0 else f"{r} {'is' if r == 1 else 'are'} left over"
        rows.append(
            _row(
                f"{a} apples are shared equally among {b} children. How many apples does each child "
                "get, and how many are left over?",
                f"{a} ÷ {b} = {q} remainder {r}, so each child gets {q} apples and {left}.",
            )
        )
    return rows


def _everyday_measures(rng: random.Random) -> list[dict]:
    """Stories of prices, distances, times of day and areas, whose units the answer must carry."""
    rows = []
    for _ in range(6):
        price = rng.choice([20, 40, 60, 80, 120, 160, 240])
        pct = rng.choice([10, 20, 25, 50])
        off = price * pct / 100
        rows.append(
            _row(
                f"A jacket costs {_money(price)} and is on sale for {pct}% off. What is the sale price?",
                f"The discount is {pct}% of {_money(price)} = {_money(off)}, so the sale price is "
                f"{_money(price)} - {_money(off)} = {_money(price - off)}.",
            )
        )
    for _ in range(5):
        speed, hours = rng.choice([40, 50, 60, 75, 80, 90]), rng.randint(2, 6)
        rows.append(
            _row(
                f"A train travels at a steady {speed} km/h for {hours} hours. How far does it travel?",
                f"Distance = speed × time = {speed} km/h × {hours} h = {speed * hours} km.",
            )
        )
    for _ in range(5):
        hour, minute = rng.randint(9, 20), rng.choice([0, 10, 15, 20, 30, 40, 45, 50])
        length = rng.choice([85, 95, 100, 110, 125, 135, 150])
        end = hour * 60 + minute + length
        rows.append(
            _row(
                f"A film starts at {hour:02d}:{minute:02d} and lasts {length} minutes. At what time "
                "does it end? Use the 24-hour clock.",
                f"{length} minutes is {_hours_minutes(length)}, so the film ends at "
                f"{end // 60 % 24:02d}:{end % 60:02d}.",
            )
        )
    for _ in range(5):
        w, length = rng.randint(3, 15), rng.randint(4, 20)
        rows.append(
            _row(
                f"A rectangular garden is {w} m wide and {length} m long. What are its area and its "
                "perimeter?",
                f"Area = {w} × {length} = {w * length} square metres. "
                f"Perimeter = 2 × ({w} + {length}) = {2 * (w + length)} metres.",
            )
        )
    return rows


def calculations(rng: random.Random) -> list[dict]:
    rows = []
    for _ in range(5):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        rows.append(_row(f"What is {a} + {b}?", f"{a} + {b} = {a + b}."))
    for _ in range(5):
        a, b = rng.randint(500, 999), rng.randint(100, 499)
        rows.append(_row(f"What is {a} - {b}?", f"{a} - {b} = {a - b}."))
    for _ in range(5):
        a, b = rng.randint(11, 49), rng.randint(11, 49)
        rows.append(_row(f"Calculate {a} × {b}.", f"{a} × {b} = {a * b}."))
    for _ in range(5):
        pct, base = rng.choice([5, 10, 15, 20, 30, 40, 75]), rng.choice([40, 60, 80, 120, 200, 240, 360, 500])
        value = pct * base / 100
        shown = f"{value:g}"
        rows.append(_row(f"What is {pct}% of {base}?", f"{pct}% of {base} is {pct}/100 × {base} = {shown}."))
    for _ in range(4):
        a, b = rng.randint(2, 9), rng.randint(2, 5)
        rows.append(_row(f"What is {a} to the power of {b}?", f"{a}^{b} = {a**b}."))
    return rows


def _factorise(n: int) -> list[int]:
    factors, d = [], 2
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1
    if n > 1:
        factors.append(n)
    return factors


def number_facts(rng: random.Random) -> list[dict]:
    rows = []
    for n in rng.sample(range(21, 200, 2), 12):
        factors = _factorise(n)
        if len(factors) == 1:
            answer = f"Yes. {n} has no divisors other than 1 and itself, so it is prime."
        else:
            answer = f"No. {n} = {' × '.join(map(str, factors))}, so it is not prime."
        rows.append(_row(f"Is {n} a prime number?", answer))
    for _ in range(6):
        g = rng.randint(2, 12)
        a, b = g * rng.randint(2, 12), g * rng.randint(2, 12)
        if a == b:
            b += g
        rows.append(
            _row(
                f"What is the greatest common divisor of {a} and {b}?",
                f"The greatest common divisor of {a} and {b} is {math.gcd(a, b)}.",
            )
        )
    for _ in range(5):
        a, b = rng.randint(3, 15), rng.randint(3, 15)
        if a == b:
            b += 1
        rows.append(
            _row(
                f"What is the least common multiple of {a} and {b}?",
                f"The least common multiple of {a} and {b} is {a * b // math.gcd(a, b)}.",
            )
        )
    for _ in range(5):
        start, step = rng.randint(1, 20), rng.randint(2, 9)
        seq = [start + step * i for i in range(5)]
        rows.append(
            _row(
                "What number comes next in the sequence?",
                f"The numbers go up by {step} each time, so the next number is {seq[-1] + step}.",
                ", ".join(map(str, seq)) + ", ?",
            )
        )
    for _ in range(3):
        start, ratio = rng.randint(1, 5), rng.choice([2, 3])
        seq = [start * ratio**i for i in range(5)]
        rows.append(
            _row(
                "What number comes next in the sequence?",
                f"Each number is {ratio} times the one before, so the next number is {seq[-1] * ratio}.",
                ", ".join(map(str, seq)) + ", ?",
            )
        )
    return rows


def lists_and_words(rng: random.Random) -> list[dict]:
    words_list = _source()["words"]
    rows = []
    for _ in range(6):
        numbers = rng.sample(range(1, 100), rng.randint(5, 7))
        rows.append(
            _row(
                "Sort these numbers from smallest to largest.",
                ", ".join(map(str, sorted(numbers))) + ".",
                ", ".join(map(str, numbers)),
            )
        )
    for _ in range(4):
        numbers = rng.sample(range(1, 500), 6)
        rows.append(
            _row(
                "Which is the largest number in this list?",
                f"The largest number is {max(numbers)}.",
                ", ".join(map(str, numbers)),
            )
        )
    for _ in range(5):
        n = rng.randint(4, 6)
        numbers = [rng.randint(1, 30) for _ in range(n - 1)]
        # make the total a multiple of n so the mean is a whole number
        numbers.append(n * rng.randint(10, 20) - sum(numbers) % n)
        total = sum(numbers)
        rows.append(
            _row(
                "What is the mean of these numbers?",
                f"The sum is {total} and there are {n} numbers, so the mean is {total} ÷ {n} = {total // n}.",
                ", ".join(map(str, numbers)),
            )
        )
    for _ in range(5):
        words = rng.sample(words_list, 5)
        rows.append(
            _row("Put these words in alphabetical order.", ", ".join(sorted(words)) + ".", ", ".join(words))
        )
    for word in rng.sample(words_list, 5):
        rows.append(_row(f'Spell the word "{word}" backwards.', f'"{word}" backwards is "{word[::-1]}".'))
    for word in rng.sample(words_list, 5):
        vowels = sum(ch in "aeiou" for ch in word)
        rows.append(
            _row(
                f'How many letters and how many vowels (a, e, i, o, u) are in the word "{word}"?',
                f'"{word}" has {len(word)} letters, of which {vowels} are vowels.',
            )
        )
    return rows


def conversions(rng: random.Random) -> list[dict]:
    rows = []
    for c in rng.sample(range(-20, 45, 5), 5):
        f = c * 9 // 5 + 32
        rows.append(
            _row(
                f"Convert {c} degrees Celsius to Fahrenheit.",
                f"F = C × 9/5 + 32 = {c} × 9/5 + 32 = {f} degrees Fahrenheit.",
            )
        )
    for _ in range(3):
        km = rng.randint(2, 40) / 2
        rows.append(
            _row(f"How many metres are there in {km:g} kilometres?", f"{km:g} km = {km * 1000:g} metres.")
        )
    for _ in range(3):
        h, m = rng.randint(1, 9), rng.choice([0, 15, 30, 45])
        rows.append(
            _row(
                f"How many minutes are there in {h} hours and {m} minutes?",
                f"{h} × 60 + {m} = {h * 60 + m} minutes.",
            )
        )
    return rows


# ---------------------------------------------------------------------------------------- hand-written


def _source() -> dict:
    return yaml.safe_load(SOURCE.read_text(encoding="utf-8"))


def hand_written() -> list[dict]:
    """The hand-written rows of ``general_sft_source.yaml``, section by section."""
    source = _source()
    return [
        _row(r["instruction"], r["output"], r.get("input", ""))
        for section in HAND_WRITTEN
        for r in source[section]
    ]


def generate(seed: int = SEED) -> list[dict]:
    """Every row of the built-in set, in a fixed shuffled order."""
    rng = random.Random(seed)
    rows = (
        word_problems(rng)
        + calculations(rng)
        + number_facts(rng)
        + lists_and_words(rng)
        + conversions(rng)
        + hand_written()
    )
    unique = list({(r["instruction"], r["input"]): r for r in rows}.values())  # random draws can repeat
    rng.shuffle(unique)
    return unique


def main() -> None:
    rows = generate()
    write_jsonl_atomic(OUTPUT, rows)
    print(f"{len(rows)} rows -> {OUTPUT}")


if __name__ == "__main__":
    main()
