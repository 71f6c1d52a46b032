"""`spag words` and `spag judge` through the real command line."""

import json
import subprocess
import sys

import pytest

GAMES = [
    {
        "target_word": "apple",
        "max_turns": 5,
        "extra": 1,
        "history": [
            {"role": "attacker", "content": "fruit?"},
            {"role": "defender", "content": "I know the word! It is apple"},
        ],
    },
    {"target_word": "cat", "max_turns": 5, "history": [{"role": "attacker", "content": "my cat"}]},
]


def spag(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "spag.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_judge_writes_outcomes_and_keeps_fields(tmp_path, fmt):
    src = tmp_path / f"games.{fmt}"
    src.write_text(json.dumps(GAMES) if fmt == "json" else "".join(json.dumps(g) + "\n" for g in GAMES))
    out = tmp_path / "judged.jsonl"
    result = spag("judge", src, "-o", out)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["outcome"], r["turns"]) for r in rows] == [("defender_wins", 2), ("attacker_breaks_rules", 1)]
    assert rows[0]["extra"] == 1
    assert "[spag judge] 2 episodes" in result.stderr


def test_judge_to_stdout(tmp_path):
    src = tmp_path / "games.json"
    src.write_text(json.dumps(GAMES))
    result = spag("judge", src)
    assert [json.loads(line)["outcome"] for line in result.stdout.splitlines()] == [
        "defender_wins",
        "attacker_breaks_rules",
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json at all", "record 0"),
        (json.dumps({"target_word": "x", "history": [{"role": "bob", "content": "hi"}]}), "unknown role"),
        (json.dumps({"history": []}), "target_word"),
    ],
)
def test_bad_input_fails_cleanly_with_no_output(tmp_path, content, message):
    src = tmp_path / "bad.jsonl"
    src.write_text(content + "\n")
    out = tmp_path / "judged.jsonl"
    result = spag("judge", src, "-o", out)
    assert result.returncode == 2
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "bad.jsonl" in lines[0] and message in lines[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]


def test_words_command_writes_split(tmp_path):
    result = spag(
        "words",
        "-o",
        tmp_path / "w.txt",
        "--top",
        300,
        "--train-out",
        tmp_path / "t.txt",
        "--eval-out",
        tmp_path / "e.txt",
    )
    assert result.returncode == 0, result.stderr
    words = (tmp_path / "w.txt").read_text().split()
    train = (tmp_path / "t.txt").read_text().split()
    held = (tmp_path / "e.txt").read_text().split()
    assert len(words) == 300 and sorted(train + held) == sorted(words)
