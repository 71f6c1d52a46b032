"""The replies of a decoding batch, kept on the device between reads (the counter sampler's decode loop).

Each step's tokens go into a (rows, max_new_tokens) tensor on the device, and a row that draws an end-of-turn
token is marked there (:meth:`DeviceLedger.record`): nothing is copied to the host. Every ``every`` steps,
and at the last, the steps since the previous read come back in one copy (:meth:`DeviceLedger.read`), and
each row's tokens are taken in order as the per-step loop takes them: a stop string ends a reply at the
token that completes it, ``max_new_tokens`` at its last token, an end-of-turn token before either. The
tokens a row drew after its end are dropped, so the replies are the per-step loop's for the same draws; a
row's draws do not depend on the rows beside it (:mod:`spag.players.hf.sampling`), nor on when a finished
row leaves the batch.
"""

from __future__ import annotations

from collections.abc import Callable

from spag.players.base import FINISH_LENGTH, FINISH_STOP

NOTHING = -1  # a step after the row's end of turn: no token


class DeviceLedger:
    """Tokens and ends of ``rows`` replies of at most ``max_new_tokens`` tokens, read back every ``every``
    steps; ``generated`` and ``finish`` (by decode position) hold what has been read."""

    def __init__(self, rows: int, max_new_tokens: int, end_index, device, every: int):
        import torch

        self.max_new_tokens, self.every = max_new_tokens, max(1, int(every))
        self.end_index = end_index
        self.tokens = torch.full((rows, max_new_tokens), NOTHING, dtype=torch.long, device=device)
        self.ended = torch.zeros(rows, dtype=torch.bool, device=device)
        self.generated: list[list[int]] = [[] for _ in range(rows)]
        self.finish: list[str | None] = [None] * rows
        self._read = 0  # steps read back so far

    def record(self, tokens, index, step: int) -> None:
        """The tokens drawn at ``step`` by the rows at decode positions ``index`` (a device tensor)."""
        import torch

        ended = self.ended[index] | torch.isin(tokens, self.end_index)
        self.tokens[index, step] = torch.where(ended, NOTHING, tokens)
        self.ended[index] = ended

    def due(self, step: int) -> bool:
        """Whether the steps up to ``step`` are read now: every ``every`` steps, and at the last one."""
        return step + 1 - self._read >= self.every or step == self.max_new_tokens - 1

    def read(self, active: list[int], index, step: int, stopped: Callable[[list[int]], bool]) -> None:
        """Read back the steps since the last read of the rows at decode positions ``active`` (``index`` on
        the device), one copy for all of them; ``stopped(ids)``: whether a reply ending so is at a stop."""
        import torch

        window = torch.cat([self.tokens[index, self._read : step + 1], self.ended[index, None].long()], dim=1)
        for r, row in zip(active, window.tolist()):  # the one copy to the host of these steps
            if self.finish[r] is None:
                self._take(r, row[:-1], bool(row[-1]), stopped)
        self._read = step + 1

    def _take(self, r: int, tokens: list[int], ended: bool, stopped) -> None:
        ids = self.generated[r]
        for token in tokens:
            if token == NOTHING:
                break
            ids.append(token)
            if stopped(ids):
                self.finish[r] = FINISH_STOP
                return
            if len(ids) >= self.max_new_tokens:
                self.finish[r] = FINISH_LENGTH
                return
        if ended:
            self.finish[r] = FINISH_STOP
