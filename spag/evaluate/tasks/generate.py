"""Write the local reasoning suite: four small multiple-choice tasks, generated with a fixed seed.

The suite lets ``spag benchmark`` run on a machine with no network and an empty datasets cache. It is
no stand-in for the paper's benchmarks in difficulty or coverage; it exists so that every checkpoint of
the loop gets a reasoning score measured the same way (lm-eval log-likelihood multiple choice), and so
that two checkpoints can be compared item by item.

Tasks (each a ``<task>.yaml`` for lm-eval including the shared ``_default.yaml``,
``data/<task>.test.jsonl`` with 150 items and ``data/<task>.train.jsonl`` with 20 items for few-shot
examples, disjoint; ``local_data.py`` loads them relative to this folder):

- ``spag_arith_compare``: which of two small arithmetic expressions is larger.
- ``spag_odd_one_out``: which of four words does not belong with the other three (category reasoning).
- ``spag_syllogism``: does a conclusion follow from premises about made-up categories (yes / no /
  cannot tell); the made-up names keep world knowledge out of it.
- ``spag_physical``: everyday physical commonsense (heavier, floats, breaks when dropped, ...).

Every record is ``{"id", "question", "choices": [...], "label": <index of the right choice>}``.

Regenerate with ``python -m spag.evaluate.tasks.generate`` (the output is byte-identical for a given
seed; the committed files were written with the default seed).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
DATA_DIR = TASKS_DIR / "data"
DEFAULT_SEED = 20240601
TEST_SIZE = 150
TRAIN_SIZE = 20

Item = dict  # {"question": str, "choices": list[str], "label": int}


# -------------------------------------------------------------------------------- arithmetic comparison


def _expression(rng: random.Random) -> tuple[str, int]:
    kind = rng.choice(("plus", "minus", "times"))
    if kind == "plus":
        a, b = rng.randint(5, 79), rng.randint(5, 79)
        return f"{a} plus {b}", a + b
    if kind == "minus":
        a = rng.randint(30, 150)
        b = rng.randint(3, a - 1)
        return f"{a} minus {b}", a - b
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    return f"{a} times {b}", a * b


def arith_compare_item(rng: random.Random) -> Item:
    while True:
        (left, x), (right, y) = _expression(rng), _expression(rng)
        # Close values make the comparison a matter of computing, not of guessing from magnitudes.
        if x != y and abs(x - y) <= 25:
            break
    smaller = rng.random() < 0.5
    word = "smaller" if smaller else "larger"
    answer = left if (x < y) == smaller else right
    choices = [left, right]
    return {
        "question": f"Which is {word}: {left} or {right}?",
        "choices": choices,
        "label": choices.index(answer),
    }


# ------------------------------------------------------------------------------------------ odd one out

# No word belongs to two categories ("orange", "peach" and "plum" are colours too, so they are left out).
CATEGORIES = {
    "fruits": "apple banana mango pear melon fig kiwi papaya pineapple strawberry".split(),
    "animals": "dog horse tiger rabbit sheep monkey elephant wolf goat camel lion bear".split(),
    "tools": "hammer saw wrench screwdriver chisel drill pliers shovel axe rake".split(),
    "colours": "red blue green yellow purple brown pink grey scarlet crimson".split(),
    "vehicles": "car bus truck bicycle train tram scooter motorcycle van tractor".split(),
    "instruments": "piano violin guitar trumpet flute drum cello harp clarinet banjo".split(),
    "body parts": "elbow knee shoulder ankle wrist finger chin thumb forehead heel".split(),
    "furniture": "table chair sofa wardrobe bed desk shelf stool bench dresser".split(),
    "clothing": "shirt jacket trousers sock scarf glove coat skirt sweater hat".split(),
    "countries": "France Japan Brazil Kenya Canada Egypt India Spain Mexico Norway".split(),
    "weather": "rain snow hail fog thunder drizzle sleet frost breeze storm".split(),
    "kitchenware": "pan kettle ladle whisk spatula colander teapot saucepan grater".split(),
}


def odd_one_out_item(rng: random.Random) -> Item:
    group, other = rng.sample(sorted(CATEGORIES), 2)
    members = rng.sample(sorted(set(CATEGORIES[group])), 3)
    odd = rng.choice(CATEGORIES[other])
    choices = members + [odd]
    rng.shuffle(choices)
    listed = ", ".join(choices)
    return {
        "question": f"Which word does not belong with the others: {listed}?",
        "choices": choices,
        "label": choices.index(odd),
    }


# ------------------------------------------------------------------------------------------- syllogisms

_NONSENSE = (
    "blicket wug dax fep zorp toma kiki bouba lorp mib snarf glim trell vosk quib nerp "
    "florn gax pim rull sapp teb vinx yorb zell"
).split()
_NAMES = "Ada Ben Cleo Dev Ema Finn Gus Hana Ivo Jun Kai Lena Milo Nora Omar Pia Rex Suki Theo Uma".split()
_YES, _NO, _UNKNOWN = "yes", "no", "cannot tell"
SYLLOGISM_CHOICES = [_YES, _NO, _UNKNOWN]


def _plural(word: str) -> str:
    return word + ("es" if word.endswith(("s", "x", "z", "sh", "ch")) else "s")


def syllogism_item(rng: random.Random) -> Item:
    a, b, c = rng.sample(_NONSENSE, 3)
    name = rng.choice(_NAMES)
    A, B, C = _plural(a), _plural(b), _plural(c)
    forms = {
        # answer: [(premises, question)], valid and invalid forms; the answer is drawn first so that
        # the three answers are equally common.
        _YES: [
            (f"All {A} are {B}. {name} is a {a}.", f"Is {name} a {b}?"),
            (f"All {A} are {B}. All {B} are {C}. {name} is a {a}.", f"Is {name} a {c}?"),
            (f"{name} is either a {a} or a {b}. {name} is not a {a}.", f"Is {name} a {b}?"),
        ],
        _NO: [
            (f"No {A} are {B}. {name} is a {a}.", f"Is {name} a {b}?"),
            (f"All {A} are {B}. {name} is not a {b}.", f"Is {name} a {a}?"),
            (f"All {A} are {B}. No {B} are {C}. {name} is a {a}.", f"Is {name} a {c}?"),
        ],
        _UNKNOWN: [
            (f"All {A} are {B}. {name} is a {b}.", f"Is {name} a {a}?"),
            (f"Some {A} are {B}. {name} is a {a}.", f"Is {name} a {b}?"),
            (f"All {A} are {B}. All {C} are {B}. {name} is a {a}.", f"Is {name} a {c}?"),
            (f"No {A} are {B}. {name} is not a {a}.", f"Is {name} a {b}?"),
        ],
    }
    answer = rng.choice(SYLLOGISM_CHOICES)
    premises, question = rng.choice(forms[answer])
    return {
        "question": f"{premises} {question}",
        "choices": list(SYLLOGISM_CHOICES),
        "label": SYLLOGISM_CHOICES.index(answer),
    }


# -------------------------------------------------------------------------------- physical commonsense

# name: (typical mass in kg, floats in water, likely to break when dropped on a stone floor, melts
# outside on a hot day). None marks a property that is not clear-cut: no question is asked about it.
OBJECTS = {
    "a feather": (0.001, True, False, False),
    "a paper clip": (0.001, False, False, False),
    "a cork": (0.005, True, False, False),
    "an ice cube": (0.02, True, None, True),
    "a pencil": (0.006, True, False, False),
    "a chocolate bar": (0.1, False, None, True),
    "a glass cup": (0.25, None, True, False),
    "a tennis ball": (0.06, True, False, False),
    "a wooden spoon": (0.05, True, False, False),
    "a steel nail": (0.01, False, False, False),
    "a raw egg": (0.06, False, True, False),
    "a stick of butter": (0.11, True, False, True),
    "a ceramic plate": (0.5, False, True, False),
    "a rubber duck": (0.05, True, False, False),
    "a brick": (2.5, False, None, False),
    "a beach ball": (0.3, True, False, False),
    "a light bulb": (0.03, None, True, False),
    "a snowman": (50.0, None, None, True),
    "a bowling ball": (6.0, None, False, False),
    "a wax candle": (0.2, True, None, None),
    "a mirror": (3.0, False, True, False),
    "a car": (1400.0, None, None, False),
    "a log of wood": (20.0, True, False, False),
    "a watermelon": (6.0, True, True, False),
    "a coin": (0.007, False, False, False),
    "a piano": (250.0, None, None, False),
    "a plastic bottle cap": (0.002, True, False, False),
    "a popsicle": (0.08, True, None, True),
    "a porcelain vase": (1.0, None, True, False),
    "an anvil": (50.0, False, False, False),
}


def _differ(p, q) -> bool:
    """Both properties known and different: the question has one right answer."""
    return p is not None and q is not None and p != q


def physical_item(rng: random.Random) -> Item:
    names = sorted(OBJECTS)
    while True:
        x, y = rng.sample(names, 2)
        mx, fx, bx, hx = OBJECTS[x]
        my, fy, by, hy = OBJECTS[y]
        kind = rng.choice(("heavier", "lighter", "floats", "sinks", "breaks", "melts"))
        if kind in ("heavier", "lighter"):
            if max(mx, my) / min(mx, my) < 5:  # only clear differences in weight
                continue
            answer = (x if mx > my else y) if kind == "heavier" else (x if mx < my else y)
            question = f"Which is {kind}: {x} or {y}?"
        elif kind in ("floats", "sinks"):
            if not _differ(fx, fy):
                continue
            answer = (x if fx else y) if kind == "floats" else (y if fx else x)
            verb = "float on" if kind == "floats" else "sink in"
            question = f"Which would {verb} water: {x} or {y}?"
        elif kind == "breaks":
            if not _differ(bx, by):
                continue
            answer = x if bx else y
            question = f"Which is more likely to break if dropped on a stone floor: {x} or {y}?"
        else:
            if not _differ(hx, hy):
                continue
            answer = x if hx else y
            question = f"Which would melt if left outside on a hot summer day: {x} or {y}?"
        choices = [x, y]
        return {"question": question, "choices": choices, "label": choices.index(answer)}


# ---------------------------------------------------------------------------------------------- writing

GENERATORS: dict[str, Callable[[random.Random], Item]] = {
    "spag_arith_compare": arith_compare_item,
    "spag_odd_one_out": odd_one_out_item,
    "spag_syllogism": syllogism_item,
    "spag_physical": physical_item,
}


def generate_task(
    name: str, seed: int = DEFAULT_SEED, test_size: int = TEST_SIZE, train_size: int = TRAIN_SIZE
) -> dict[str, list[Item]]:
    """Distinct items (no question twice), split into test and train (few-shot) parts."""
    offset = sorted(GENERATORS).index(name)
    rng = random.Random(seed * 100 + offset)
    items: list[Item] = []
    seen: set[str] = set()
    attempts = 0
    while len(items) < test_size + train_size:
        attempts += 1
        if attempts > 100 * (test_size + train_size):
            raise RuntimeError(f"{name}: could not draw {test_size + train_size} distinct items")
        item = GENERATORS[name](rng)
        if item["question"] in seen:
            continue
        seen.add(item["question"])
        items.append(item)
    test = [{"id": i, **item} for i, item in enumerate(items[:test_size])]
    train = [{"id": i, **item} for i, item in enumerate(items[test_size:])]
    return {"test": test, "train": train}


DEFAULT_YAML_NAME = "_default.yaml"  # not a task (no `task:`): lm-eval's index skips it
DEFAULT_YAML = """\
# Fields shared by every task of the local reasoning suite (offline), written by generate.py; each
# <task>.yaml includes this file. local_data.py reads a task's data_files relative to this folder, so
# `lm_eval --include_path <this folder> --tasks spag_local` works from any working directory.
tag: spag_local
custom_dataset: !function local_data.load
training_split: train
fewshot_split: train
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

TASK_YAML = """\
# Local reasoning suite (offline), written by generate.py; the shared fields are in {default}.
include: {default}
task: {name}
dataset_kwargs:
  data_files:
    train: data/{name}.train.jsonl
    test: data/{name}.test.jsonl
"""


def write_suite(
    data_dir: Path = DATA_DIR, seed: int = DEFAULT_SEED, tasks_dir: Path = TASKS_DIR
) -> list[Path]:
    """Write every task's YAML (into ``tasks_dir``) and its data (into ``data_dir``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    written = [tasks_dir / DEFAULT_YAML_NAME]
    written[0].write_text(DEFAULT_YAML, encoding="utf-8")
    for name in sorted(GENERATORS):
        path = tasks_dir / f"{name}.yaml"
        path.write_text(TASK_YAML.format(name=name, default=DEFAULT_YAML_NAME), encoding="utf-8")
        written.append(path)
    for name in sorted(GENERATORS):
        for split, items in generate_task(name, seed).items():
            path = data_dir / f"{name}.{split}.jsonl"
            path.write_text(
                "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8"
            )
            written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=TASKS_DIR, help="Folder for the YAML files and data/.")
    args = parser.parse_args()
    for path in write_suite(args.out / "data", args.seed, args.out):
        print(path)


if __name__ == "__main__":
    main()
