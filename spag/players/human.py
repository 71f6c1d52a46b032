"""A person plays one side in the terminal: the prompt is shown, the reply is typed on one line."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from spag.players.base import FINISH_STOP, Reply
from spag.runtime.errors import PlayerError


class HumanPlayer:
    """Reads one line per prompt from ``input`` (stdin); an empty line is asked again."""

    def __init__(
        self,
        name: str = "human",
        input: TextIO | None = None,
        output: TextIO | None = None,
        max_empty: int = 3,
    ):
        self.name = name
        self._input = input or sys.stdin
        self._output = output or sys.stderr
        self._max_empty = max_empty

    def generate(
        self,
        prompts,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 256,
        min_new_tokens: int = 1,
        seed=None,
        stop: Sequence[str] = (),
        stop_pattern: str | None = None,
    ) -> list[Reply]:
        return [self._ask(prompt) for prompt in prompts]

    def _ask(self, prompt: str) -> Reply:
        out = self._output
        out.write("\n" + "-" * 72 + "\n" + prompt + "\n")
        for _ in range(self._max_empty):
            out.write("your message> ")
            out.flush()
            line = self._input.readline()
            if line == "":
                raise PlayerError("the human player's input ended (end of file)")
            text = line.strip()
            if text:
                return Reply(text=text, n_tokens=0, finish_reason=FINISH_STOP)
            out.write("(an empty message is not a move; please type something)\n")
        return Reply(text="", n_tokens=0, finish_reason=FINISH_STOP)
