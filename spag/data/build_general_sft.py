"""Build ``general_sft.jsonl``: a small general instruction set so the SFT term has data offline.

The paper mixes 52k Alpaca instructions into SPAG training; a pipeline that must run without a network
needs something local. This set is small and deliberately plain: arithmetic and number facts whose answers
are computed here (so they are right), plus hand-written definitions, rewriting, classification and short
reasoning items. Rows are in the Alpaca shape (instruction, input, output).

Regenerate with ``python -m spag.data.build_general_sft``; a test checks the shipped file matches.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

SEED = 20240501
OUTPUT = Path(__file__).with_name("general_sft.jsonl")


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
                f"Sam have left?",
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
                f"get, and how "
                "many are left over?",
                f"{a} ÷ {b} = {q} remainder {r}, so each child gets {q} apples and {left}.",
            )
        )
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
                f"does it end? "
                "Use the 24-hour clock.",
                f"{length} minutes is {_hours_minutes(length)}, so the film ends at "
                f"{end // 60 % 24:02d}:{end % 60:02d}.",
            )
        )
    for _ in range(5):
        w, length = rng.randint(3, 15), rng.randint(4, 20)
        rows.append(
            _row(
                f"A rectangular garden is {w} m wide and {length} m long. What are its area and its "
                f"perimeter?",
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


_WORDS = (
    "garden",
    "planet",
    "window",
    "silver",
    "forest",
    "candle",
    "bridge",
    "rocket",
    "pencil",
    "orange",
    "river",
    "thunder",
    "library",
    "basket",
    "mountain",
    "whistle",
    "kitchen",
    "lantern",
    "harbor",
    "blanket",
)


def lists_and_words(rng: random.Random) -> list[dict]:
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
        words = rng.sample(_WORDS, 5)
        rows.append(
            _row("Put these words in alphabetical order.", ", ".join(sorted(words)) + ".", ", ".join(words))
        )
    for word in rng.sample(_WORDS, 5):
        rows.append(_row(f'Spell the word "{word}" backwards.', f'"{word}" backwards is "{word[::-1]}".'))
    for word in rng.sample(_WORDS, 5):
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

DEFINITIONS = [
    (
        "photosynthesis",
        "Photosynthesis is the process by which green plants, algae and some bacteria use "
        "sunlight, water and carbon dioxide to make sugar, releasing oxygen as a by-product.",
    ),
    (
        "a metaphor",
        "A metaphor is a figure of speech that describes something by saying it is something else, "
        'such as "time is a thief", to suggest a likeness without using "like" or "as".',
    ),
    (
        "inflation",
        "Inflation is a general rise in prices over time, which means each unit of money buys less "
        "than it did before.",
    ),
    (
        "an ecosystem",
        "An ecosystem is a community of living things together with their physical surroundings, "
        "such as water, soil and climate, all interacting as one system.",
    ),
    (
        "gravity",
        "Gravity is the force by which objects with mass attract one another; on Earth it pulls things "
        "towards the ground and keeps the Moon in orbit.",
    ),
    (
        "a democracy",
        "A democracy is a system of government in which power rests with the people, who rule "
        "either directly or through representatives they elect.",
    ),
    (
        "an algorithm",
        "An algorithm is a finite, ordered set of precise steps for solving a problem or "
        "carrying out a task.",
    ),
    (
        "a noun",
        'A noun is a word that names a person, place, thing or idea, such as "teacher", "city" or '
        '"happiness".',
    ),
    (
        "a verb",
        'A verb is a word that describes an action, state or occurrence, such as "run", "be" or "happen".',
    ),
    (
        "evaporation",
        "Evaporation is the change of a liquid into a gas at its surface, as when puddles dry up in the sun.",
    ),
    (
        "a hypothesis",
        "A hypothesis is a testable proposed explanation for an observation, which an experiment "
        "can support or refute.",
    ),
    (
        "an atom",
        "An atom is the smallest unit of a chemical element, made of a nucleus of protons and neutrons "
        "surrounded by electrons.",
    ),
    ("a budget", "A budget is a plan that sets out expected income and spending over a period of time."),
    ("empathy", "Empathy is the ability to understand and share the feelings of another person."),
    (
        "a prime number",
        "A prime number is a whole number greater than 1 whose only divisors are 1 and itself, "
        "such as 2, 3, 5 and 7.",
    ),
    (
        "a synonym",
        "A synonym is a word that means the same or nearly the same as another word, such as "
        '"big" and "large".',
    ),
    (
        "an antonym",
        'An antonym is a word with the opposite meaning of another word, such as "hot" and "cold".',
    ),
    (
        "climate",
        "Climate is the typical weather of a region measured over many years, as opposed to the "
        "weather on a single day.",
    ),
    (
        "a peninsula",
        "A peninsula is a piece of land surrounded by water on most sides but joined to the "
        "mainland on one side.",
    ),
    (
        "a fraction",
        "A fraction represents a part of a whole, written as one number over another, such as 3/4 "
        "for three parts out of four.",
    ),
    (
        "renewable energy",
        "Renewable energy comes from sources that are naturally replenished, such as "
        "sunlight, wind, flowing water and geothermal heat.",
    ),
    (
        "a vaccine",
        "A vaccine is a preparation that trains the immune system to recognise a disease-causing "
        "organism, so the body can fight it off more easily later.",
    ),
    (
        "irony",
        "Irony is a contrast between what is expected and what actually happens, or between what is "
        "said and what is meant.",
    ),
    ("a paragraph", "A paragraph is a group of sentences that develop one main idea in a piece of writing."),
    (
        "supply and demand",
        "Supply and demand is the economic idea that prices are set by the balance between "
        "how much of a good is available and how much people want to buy.",
    ),
]

REWRITES = [
    (
        "Rewrite the sentence in the active voice.",
        "The cake was eaten by the children.",
        "The children ate the cake.",
    ),
    (
        "Rewrite the sentence in the active voice.",
        "The letter was written by my grandmother.",
        "My grandmother wrote the letter.",
    ),
    (
        "Rewrite the sentence in the active voice.",
        "The window was broken by a stray ball.",
        "A stray ball broke the window.",
    ),
    (
        "Rewrite the sentence in the passive voice.",
        "The committee approved the new plan.",
        "The new plan was approved by the committee.",
    ),
    (
        "Rewrite the sentence in the passive voice.",
        "Maria painted the fence.",
        "The fence was painted by Maria.",
    ),
    (
        "Correct the grammar in this sentence.",
        "She don't like going to the dentist.",
        "She doesn't like going to the dentist.",
    ),
    (
        "Correct the grammar in this sentence.",
        "Me and him went to the market yesterday.",
        "He and I went to the market yesterday.",
    ),
    (
        "Correct the grammar in this sentence.",
        "There is three apples on the table.",
        "There are three apples on the table.",
    ),
    (
        "Correct the spelling in this sentence.",
        "I recieved the pakage on Wensday.",
        "I received the package on Wednesday.",
    ),
    (
        "Make this sentence more formal.",
        "Hey, can you send me that report thing by tomorrow?",
        "Could you please send me the report by tomorrow?",
    ),
    (
        "Make this sentence more formal.",
        "The meeting got moved 'cause the boss was sick.",
        "The meeting was rescheduled because the manager was unwell.",
    ),
    ("Make this sentence more polite.", "Give me the menu.", "Could I have the menu, please?"),
    (
        "Rewrite this sentence in the past tense.",
        "She walks to school and reads on the bus.",
        "She walked to school and read on the bus.",
    ),
    (
        "Rewrite this sentence in the future tense.",
        "We visit our cousins in the summer.",
        "We will visit our cousins in the summer.",
    ),
    (
        "Combine the two sentences into one.",
        "The rain stopped. We went outside to play.",
        "When the rain stopped, we went outside to play.",
    ),
    (
        "Shorten this sentence without changing its meaning.",
        "Due to the fact that it was raining, we made the decision to stay at home.",
        "Because it was raining, we decided to stay home.",
    ),
    (
        "Summarise the passage in one sentence.",
        "Bees collect nectar from flowers and turn it into honey. While they move from flower to "
        "flower, pollen "
        "sticks to their bodies and is carried to other plants. This helps the plants make seeds.",
        "Bees make honey from nectar and, by carrying pollen between flowers, help plants produce seeds.",
    ),
    (
        "Summarise the passage in one sentence.",
        "The library will close early on Friday for staff training. Books due that day can be returned on "
        "Saturday without a fine. The online catalogue will stay available.",
        "The library closes early on Friday for training, but Friday's returns can be made on "
        "Saturday without "
        "a fine and the online catalogue stays open.",
    ),
    (
        "Turn this statement into a question.",
        "The museum opens at nine o'clock.",
        "What time does the museum open?",
    ),
    (
        'Rewrite the sentence using a simpler word for "commence".',
        "The ceremony will commence at noon.",
        "The ceremony will start at noon.",
    ),
]

REASONING = [
    (
        "All mammals breathe air. Whales are mammals. Do whales breathe air?",
        "Yes. Since all mammals breathe air and whales are mammals, whales breathe air.",
    ),
    (
        "All roses are flowers. Some flowers fade quickly. Can we conclude that some roses fade quickly?",
        "No. The flowers that fade quickly might not include any roses, so the conclusion does not follow.",
    ),
    (
        "Anna is taller than Ben, and Ben is taller than Carl. Who is the shortest?",
        "Carl is the shortest, because Ben is taller than Carl and Anna is taller than Ben.",
    ),
    (
        "If today is Wednesday, what day will it be in 10 days?",
        "10 days is one week and 3 days, so it will be Saturday.",
    ),
    (
        "Which weighs more, a kilogram of feathers or a kilogram of iron?",
        "They weigh the same: each is one kilogram.",
    ),
    (
        "A farmer has 5 cows and 3 chickens. How many legs do the animals have in total?",
        "Cows have 4 legs and chickens have 2, so 5 × 4 + 3 × 2 = 20 + 6 = 26 legs.",
    ),
    (
        "If it takes 5 machines 5 minutes to make 5 widgets, how long would it take 100 machines to make 100 "
        "widgets?",
        "5 minutes. Each machine makes one widget in 5 minutes, so 100 machines make 100 widgets in "
        "5 minutes.",
    ),
    (
        "Tom is older than Sara. Sara is older than Lee. Is Lee older than Tom?",
        "No. Tom is older than Sara, who is older than Lee, so Lee is younger than Tom.",
    ),
    (
        "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. How much "
        "does the ball "
        "cost?",
        "The ball costs $0.05: then the bat costs $1.05, and together they cost $1.10.",
    ),
    (
        "If you are facing north and turn 90 degrees clockwise, which direction are you facing?",
        "You are facing east.",
    ),
    (
        "If you are facing east and turn around completely (180 degrees), which direction are you facing?",
        "You are facing west.",
    ),
    (
        "Every student in the class passed the test. Mia is a student in the class. Did Mia pass the test?",
        "Yes. Every student in the class passed, and Mia is in the class, so she passed.",
    ),
    (
        "No reptiles have fur. A gecko is a reptile. Does a gecko have fur?",
        "No. No reptiles have fur, and a gecko is a reptile, so it has no fur.",
    ),
    (
        "A shop is open from 9:00 to 17:30. How many hours is it open?",
        "From 9:00 to 17:30 is 8 hours and 30 minutes, or 8.5 hours.",
    ),
    (
        "There are 12 months in a year. How many months are there in 3 and a half years?",
        "3.5 × 12 = 42 months.",
    ),
    (
        "I have two coins that add up to 30 cents, and one of them is not a nickel. What are the coins?",
        "A quarter and a nickel: the quarter is the coin that is not a nickel.",
    ),
    (
        "If a plant grows 2 cm every week and is 10 cm tall now, how tall will it be in 6 weeks?",
        "It grows 2 × 6 = 12 cm, so it will be 10 + 12 = 22 cm tall.",
    ),
    (
        "In a race, you overtake the person in second place. What place are you in now?",
        "You are in second place, because you took the place of the person you overtook.",
    ),
    ("Which is larger: 0.5 or 0.45?", "0.5 is larger, because 0.50 is greater than 0.45."),
    ("Which is larger: 3/4 or 2/3?", "3/4 is larger: 3/4 = 9/12 and 2/3 = 8/12."),
    (
        "If all squares are rectangles, and this shape is a square, is it a rectangle?",
        "Yes. Every square is a rectangle, so this square is a rectangle.",
    ),
    (
        "A clock shows 3:00. What is the angle between the hour hand and the minute hand?",
        "90 degrees: the minute hand points at 12 and the hour hand at 3, a quarter of the way round.",
    ),
    (
        "Lisa has twice as many books as Omar. Omar has 7 books. How many books do they have together?",
        "Lisa has 2 × 7 = 14 books, so together they have 14 + 7 = 21 books.",
    ),
    (
        "A recipe needs 3 eggs for 12 pancakes. How many eggs are needed for 36 pancakes?",
        "36 pancakes is 3 times 12, so you need 3 × 3 = 9 eggs.",
    ),
    (
        "It is raining, and whenever it rains the ground gets wet. What can you say about the ground?",
        "The ground is wet, because it is raining and rain makes the ground wet.",
    ),
]

WORD_KNOWLEDGE = [
    ('Give a synonym for "happy".', "", "Joyful."),
    ('Give a synonym for "quick".', "", "Fast."),
    ('Give a synonym for "begin".', "", "Start."),
    ('Give an antonym for "ancient".', "", "Modern."),
    ('Give an antonym for "generous".', "", "Stingy."),
    ('Give an antonym for "expand".', "", "Shrink."),
    ('What is the plural of "child"?', "", "Children."),
    ('What is the plural of "mouse"?', "", "Mice."),
    ('What is the past tense of "go"?', "", "Went."),
    ('What is the past tense of "swim"?', "", "Swam."),
    (
        "Which word does not belong with the others?",
        "apple, banana, carrot, cherry",
        "Carrot, because it is a vegetable and the others are fruits.",
    ),
    (
        "Which word does not belong with the others?",
        "violin, guitar, trumpet, cello",
        "Trumpet, because it is a brass instrument and the others are string instruments.",
    ),
    (
        "Which word does not belong with the others?",
        "Paris, Berlin, Madrid, Canada",
        "Canada, because it is a country and the others are cities.",
    ),
    (
        "Classify each animal as a mammal, bird or fish.",
        "dolphin, eagle, salmon, bat",
        "Dolphin: mammal. Eagle: bird. Salmon: fish. Bat: mammal.",
    ),
    (
        "Classify each item as a solid, liquid or gas at room temperature.",
        "iron, water, oxygen, ice",
        "Iron: solid. Water: liquid. Oxygen: gas. Ice: solid.",
    ),
    (
        "Identify the nouns in the sentence.",
        "The dog chased a ball across the park.",
        'The nouns are "dog", "ball" and "park".',
    ),
    ("Identify the verb in the sentence.", "The children laughed at the clown.", 'The verb is "laughed".'),
    (
        "Is the following sentence a fact or an opinion?",
        "Chocolate ice cream is the best flavour.",
        "It is an opinion, because it expresses a personal preference that cannot be proven.",
    ),
    (
        "Is the following sentence a fact or an opinion?",
        "Water boils at 100 degrees Celsius at sea level.",
        "It is a fact: it can be checked by measurement.",
    ),
    (
        "What is the sentiment of this review: positive, negative or neutral?",
        "The food arrived cold and the waiter ignored us all evening.",
        "Negative.",
    ),
    (
        "What is the sentiment of this review: positive, negative or neutral?",
        "Lovely staff, comfortable beds, and a great view from the room.",
        "Positive.",
    ),
]

GENERAL_KNOWLEDGE = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
    ("What is the capital of Australia?", "The capital of Australia is Canberra."),
    (
        "How many continents are there, and what are they?",
        "There are seven continents: Africa, Antarctica, "
        "Asia, Australia (Oceania), Europe, North America and South America.",
    ),
    ("What is the largest planet in our solar system?", "Jupiter is the largest planet in our solar system."),
    ("What gas do plants take in from the air for photosynthesis?", "Plants take in carbon dioxide."),
    ("At what temperature does water freeze in degrees Celsius?", "Water freezes at 0 degrees Celsius."),
    ("How many sides does a hexagon have?", "A hexagon has six sides."),
    ("How many days are there in a leap year?", "A leap year has 366 days."),
    ("What is the chemical symbol for gold?", "The chemical symbol for gold is Au."),
    ("Which organ pumps blood around the human body?", "The heart pumps blood around the body."),
    ("What is the longest river in South America?", "The Amazon is the longest river in South America."),
    ("Name the three primary colours of light.", "Red, green and blue."),
    ("How many minutes are there in a day?", "24 × 60 = 1,440 minutes."),
    ('Who wrote "Romeo and Juliet"?', 'William Shakespeare wrote "Romeo and Juliet".'),
]

WRITING = [
    (
        "Write a one-sentence thank-you note to a neighbour who watered your plants.",
        "",
        "Thank you so much for watering my plants while I was away; they look healthier than ever.",
    ),
    (
        "Give three tips for getting a good night's sleep.",
        "",
        "1. Go to bed and wake up at the same times every day. 2. Avoid screens and caffeine in the "
        "hour before "
        "bed. 3. Keep your bedroom dark, quiet and cool.",
    ),
    (
        "Suggest a short, descriptive title for this paragraph.",
        "Every spring, thousands of cranes stop at the lake on their way north. They rest, feed in "
        "the shallow "
        "water and leave again within a few weeks.",
        "The Cranes' Spring Stopover",
    ),
    (
        "Write a simple instruction for making a cup of tea.",
        "",
        "Boil water, pour it over a tea bag in a cup, let it steep for three to five minutes, "
        "remove the bag, "
        "and add milk or sugar if you like.",
    ),
    (
        "Explain in one sentence why the sky looks blue.",
        "",
        "Air molecules scatter blue sunlight much more than red light, so blue light reaches our "
        "eyes from every "
        "direction of the sky.",
    ),
    ("List three renewable sources of energy.", "", "Solar power, wind power and hydroelectric power."),
    (
        'Give an example sentence using the word "reluctant".',
        "",
        "He was reluctant to leave the party early, because he was enjoying the music.",
    ),
    (
        'Explain the difference between "their", "there" and "they\'re".',
        "",
        '"Their" shows possession (their house), "there" refers to a place (over there), and "they\'re" is '
        'short for "they are" (they\'re late).',
    ),
]


def hand_written() -> list[dict]:
    rows = [_row(f"Define {term}.", text) for term, text in DEFINITIONS]
    rows += [_row(instruction, output, extra) for instruction, extra, output in REWRITES]
    rows += [_row(question, answer) for question, answer in REASONING]
    rows += [_row(instruction, output, extra) for instruction, extra, output in WORD_KNOWLEDGE]
    rows += [_row(question, answer) for question, answer in GENERAL_KNOWLEDGE]
    rows += [_row(instruction, output, extra) for instruction, extra, output in WRITING]
    return rows


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
    from spag.io import write_jsonl_atomic

    rows = generate()
    write_jsonl_atomic(OUTPUT, rows)
    print(f"{len(rows)} rows -> {OUTPUT}")


if __name__ == "__main__":
    main()
