"""Target words: the most frequent English words (wordfreq) or a list file, and a fixed train / held-out
split."""

from __future__ import annotations

import hashlib
import os
import random
import re
import sys
import unicodedata

from spag.runtime.atomic import write_text_atomic
from spag.runtime.errors import DataError
from spag.runtime.records import read_text

_ALPHA = re.compile(r"^[a-z]+$")

# Words that carry grammar rather than a topic: no game can be played on them.
FUNCTION_WORDS = frozenset(
    """
    the and for are but not you all any can had her was one our out day get has him his how man new now
    old see two way who boy did its let put say she too use that with have this will your from they know
    want been good much some time very when come here just like long make many more only over such take
    than them well were what which while would there their these those then into onto upon about above
    after again against below between both before being during each few further once other same should
    through under until where why yours yourself yourselves ourselves themselves himself herself itself
    myself does doing done because also could might must shall may ought since though although unless
    whether whom whose within without among amongst across along around behind beyond beside besides
    toward towards near off per via yet nor either neither every everyone everything someone something
    anyone anything nothing nobody none somebody anybody thus hence therefore however moreover else ever
    even still already just almost quite rather really perhaps maybe indeed yes okay hey hello dont cant
    wont isnt arent wasnt werent doesnt didnt hasnt havent hadnt shouldnt wouldnt couldnt im ive youre
    theyre weve hes shes thats whats theres lets etc
    """.split()
)


def is_noun_only(word: str) -> bool:
    """Whether every reading of ``word`` is a noun (lemminflect's lexicon): "planet" yes, "need" no.

    Nouns are what a small model can describe and guess; the paper's list keeps every part of speech.
    """
    from lemminflect import getAllLemmas

    readings = getAllLemmas(word)
    return bool(readings) and set(readings) == {"NOUN"}


def top_words(n: int, lang: str = "en", nouns_only: bool = False, skip_stop_words: bool = True) -> list[str]:
    """The ``n`` most frequent words: lowercase alphabetic, 3+ letters, no function words, no repeats.

    ``nouns_only`` keeps only words that are nouns in every reading (see :func:`is_noun_only`);
    ``skip_stop_words=False`` keeps the function words too.
    """
    from wordfreq import top_n_list

    if n < 1:
        raise ValueError(f"the number of words must be at least 1, got {n}")
    words: list[str] = []
    seen: set[str] = set()
    # wordfreq's list contains punctuation, numbers and short words; ask for enough to fill n.
    pool = top_n_list(lang, max((16 if nouns_only else 4) * n, 1000), wordlist="best")
    for word in pool:
        w = lower_word(word)
        if len(w) < 3 or not _ALPHA.match(w) or (skip_stop_words and w in FUNCTION_WORDS) or w in seen:
            continue
        if nouns_only and not is_noun_only(w):
            continue
        seen.add(w)
        words.append(w)
        if len(words) == n:
            break
    return words


def words_from_file(
    path: str | os.PathLike, n: int | None = None, nouns_only: bool = False, skip_stop_words: bool = True
) -> list[str]:
    """The first ``n`` words of a list file (one per line, e.g. the original project's
    ``all_target_words.txt``), in the file's order, lower-cased, repeats dropped.

    ``skip_stop_words`` drops the function words (the original's list keeps them: pass False to play
    them as it did); ``nouns_only`` keeps only words that are nouns in every reading.
    """
    words: list[str] = []
    seen: set[str] = set()
    for word in read_words(path):
        w = lower_word(word)
        if w in seen or (skip_stop_words and w in FUNCTION_WORDS) or (nouns_only and not is_noun_only(w)):
            continue
        seen.add(w)
        words.append(w)
        if n is not None and len(words) == n:
            break
    return words


def is_held_out(word: str, eval_fraction: float) -> bool:
    """A word's split depends only on the word (a hash), so it never moves when lists grow."""
    digest = hashlib.sha256(word.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


def split_words(words: list[str], eval_fraction: float) -> tuple[list[str], list[str]]:
    """(training words, held-out evaluation words), disjoint, each in the input order."""
    train = [w for w in words if not is_held_out(w, eval_fraction)]
    held = [w for w in words if is_held_out(w, eval_fraction)]
    return train, held


WORD_PUNCTUATION = "-'’"  # inside a target word: t-shirt, o'clock


def _shown(ch: str) -> str:
    """A character as an error shows it: a combining mark (which draws on the character before it) by its code."""
    return f"U+{ord(ch):04X} (a combining mark)" if unicodedata.category(ch).startswith("M") else ch


def lower_word(word: str) -> str:
    """A word in lower case, one character per letter: ``İstanbul`` is ``istanbul``, not ``i`` and a combining
    dot (Python's lower() of the dotted capital I, which no list reader takes as a letter)."""
    return unicodedata.normalize("NFC", word.lower().replace("i\u0307", "i"))


def read_words(path: str | os.PathLike, repeats: bool = False) -> list[str]:
    """One word per line; blank lines and ``#`` comments skipped; a word listed again (in any case) is
    dropped, the first kept, with a note naming the lines (``repeats``: kept, for a game of few targets,
    whose list of deals may deal one twice). Odd entries, a missing, binary or empty file raise DataError
    naming it: no step has anything to do without words."""
    words: list[str] = []
    first_line: dict[str, int] = {}  # lower-cased word -> the line it was kept from
    dropped: list[str] = []
    text = read_text(path).removeprefix(
        "\ufeff"
    )  # a byte-order mark (editors on Windows) is no part of a word
    for lineno, line in enumerate(text.split("\n"), start=1):
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        where = f"line {lineno}"
        if any(ch.isspace() for ch in word) or not any(ch.isalpha() for ch in word):
            raise DataError(
                path,
                None,
                f"{where}: {word!r} is not a single target (a word, or a deal such as K-Q, without spaces)",
            )
        if any(unicodedata.category(ch).startswith("C") for ch in word):  # NUL, other controls, BOM, ...
            raise DataError(path, None, f"{where}: {word!r} holds an invisible control character")
        odd = sorted({ch for ch in word if not (ch.isalnum() or ch in WORD_PUNCTUATION)})
        if odd:  # "c++": the judge finds words between non-letters, so it could never see this one said
            raise DataError(
                path,
                None,
                f"{where}: {word!r} is not a word the judge can match: it holds "
                f"{' '.join(map(_shown, odd))} (letters, digits, - and ' only)",
            )
        key = word.casefold()
        if (
            key in first_line and not repeats
        ):  # played twice, a word would count twice in every mean and interval
            dropped.append(f"line {lineno} ({word!r}, as line {first_line[key]})")
            continue
        first_line[key] = lineno
        words.append(word)
    if not words:
        raise DataError(path, None, "holds no words (one word per line expected)")
    if dropped:
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        print(
            f"note: {path}: {len(dropped)} repeated word(s) dropped, each word is played once: {shown}",
            file=sys.stderr,
            flush=True,
        )
    return words


def write_words(words: list[str], path: str | os.PathLike) -> None:
    write_text_atomic(path, "".join(w + "\n" for w in words))


def sample_targets(targets: list[str], n: int, seed: str, repeat: bool = False) -> list[str]:
    """A seeded sample of ``n`` targets (of a word list: spread over its frequency range), all of them when
    there are fewer; with ``repeat`` (a game of few targets) a shorter list is played several times over,
    each round in its own order."""
    rng = random.Random(seed)
    if n <= len(targets) or not repeat:
        return rng.sample(targets, min(n, len(targets)))
    chosen: list[str] = []
    while len(chosen) < n:
        chosen += rng.sample(targets, min(len(targets), n - len(chosen)))
    return chosen
