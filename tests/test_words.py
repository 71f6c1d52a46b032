"""Target words: frequent, clean, deterministic, and split into disjoint training and held-out sets."""

import pytest

from spag.game.words import FUNCTION_WORDS, read_words, split_words, top_words, write_words
from spag.runtime.errors import DataError


def test_top_words_are_clean_and_deterministic():
    words = top_words(3000)
    assert len(words) == 3000
    assert words == top_words(3000)
    assert len(set(words)) == len(words)
    assert all(w.isalpha() and w.islower() and len(w) >= 3 for w in words)
    assert not set(words) & FUNCTION_WORDS
    assert "the" not in words and "and" not in words
    assert top_words(100) == words[:100]


def test_split_is_disjoint_stable_and_roughly_sized():
    words = top_words(5000)
    train, held = split_words(words, 0.1)
    assert not set(train) & set(held)
    assert sorted(train + held) == sorted(words)
    assert 0.07 < len(held) / len(words) < 0.13
    # a word's side never depends on the rest of the list
    _, held_small = split_words(words[:500], 0.1)
    assert set(held_small) == set(held) & set(words[:500])


def test_read_words_rejects_odd_entries(tmp_path):
    path = tmp_path / "words.txt"
    write_words(["apple", "river"], path)
    assert read_words(path) == ["apple", "river"]
    path.write_text("apple\n\n# comment\nice cream\n")
    with pytest.raises(DataError, match="line 4"):
        read_words(path)
    path.write_text("apple\n1234\n")
    with pytest.raises(DataError, match="line 2"):
        read_words(path)


def test_a_word_listed_again_in_any_case_is_read_once_with_a_note(tmp_path, capsys):
    path = tmp_path / "words.txt"
    path.write_text("apple\nriver\n# a comment\napple\nApple\nstone\n")
    assert read_words(path) == ["apple", "river", "stone"]
    note = capsys.readouterr().err.strip()
    assert note == (
        f"note: {path}: 2 repeated word(s) dropped, each word is played once: line 4 ('apple', as "
        "line 1), line 5 ('Apple', as line 1)"
    )
    path.write_text("apple\nriver\n")
    read_words(path)
    assert capsys.readouterr().err == ""  # nothing to say of a list without repeats


def test_a_dotted_capital_i_is_written_as_one_letter_and_read_back(tmp_path):
    """M5 (fourth attack): `spag words` wrote İstanbul as i and a combining dot, then refused its own output;
    a refused word's error named its record twice and showed a bare combining mark."""
    from spag.game.words import lower_word, read_words, words_from_file, write_words

    assert lower_word("İstanbul") == "istanbul" and lower_word("CAFÉ") == "café"
    source = tmp_path / "list.txt"
    source.write_text("apple\nİstanbul\n", encoding="utf-8")
    words = words_from_file(source, skip_stop_words=False)
    assert words == ["apple", "istanbul"]
    write_words(words, tmp_path / "out.txt")
    assert read_words(tmp_path / "out.txt") == words
    (tmp_path / "bad.txt").write_text("i\u0307stanbul\n", encoding="utf-8")
    with pytest.raises(DataError) as refused:
        read_words(tmp_path / "bad.txt")
    assert str(refused.value) == (
        f"{tmp_path / 'bad.txt'}: line 1: 'i̇stanbul' is not a word the judge can match: "
        "it holds U+0307 (a combining mark) (letters, digits, - and ' only)"
    )
