"""Counterfactual regret minimisation on Kuhn poker: the gold standard a learning curve is held against.

Vanilla CFR (Zinkevich et al., 2007) with alternating updates, as OpenSpiel's ``CFRSolver`` runs it: each
iteration walks the whole game tree once per seat, every deal with its chance 1/6, adds each action's
counterfactual regret at that seat's information sets and the seat's own reach times the current policy
to its policy sum, then lets regret matching set the seat's next policy (the uniform policy where no regret
is positive). The **average** policy, each information set's policy sum normalised, converges to a Nash
equilibrium; its exploitability falls roughly as 1/T. The iterates themselves need not converge.

Profiles are those of :mod:`spag.game.kuhn.exploitability`: the probability of the aggressive action at each
of the 12 information sets. tests/test_twin.py holds the average policy to OpenSpiel's, iteration by
iteration.
"""

from __future__ import annotations

from collections.abc import Iterator

from spag.game.kuhn import CARDS, FIRST, ROLES
from spag.game.kuhn.exploitability import INFOSETS, _over, exploitability, moves, payoff

Key = tuple[str, str]  # (card, history), as a Profile keys an information set


class CFR:
    """CFR's state: cumulative regrets and policy sums of the aggressive and the passive action at each
    information set, and the current policy (uniform before the first iteration)."""

    def __init__(self):
        keys = [(i.card, i.history) for i in INFOSETS]
        self.regret = {key: [0.0, 0.0] for key in keys}  # [aggressive, passive]
        self.policy_sum = {key: [0.0, 0.0] for key in keys}
        self.current = dict.fromkeys(keys, 0.5)
        self.iterations = 0

    def iterate(self) -> None:
        """One iteration: a walk and a regret-matching update for the first seat, then for the second."""
        self.iterations += 1
        deal = 1 / (len(CARDS) * (len(CARDS) - 1))
        for seat in ROLES:
            for first in CARDS:
                for second in CARDS:
                    if first != second:
                        self._walk(seat, (first, second), (), {ROLES[0]: 1.0, ROLES[1]: 1.0}, deal)
            for key in self.current:
                if INFOSET_SEAT[key] == seat:
                    self.current[key] = _matched(self.regret[key])

    def _walk(
        self,
        seat: str,
        cards: tuple[str, str],
        actions: tuple[str, ...],
        reach: dict[str, float],
        chance: float,
    ) -> float:
        """The first player's expected payoff below ``actions`` under the current policy, adding ``seat``'s
        regrets and policy sums on the way (``reach``: each player's probability of its own actions so far)."""
        if _over(actions):
            return payoff(*cards, actions)
        player = ROLES[len(actions) % 2]
        key = (cards[len(actions) % 2], ",".join(actions))
        p = self.current[key]
        aggressive, passive = moves(actions)
        values = []
        for action, q in ((aggressive, p), (passive, 1 - p)):
            after = {**reach, player: reach[player] * q}
            values.append(self._walk(seat, cards, (*actions, action), after, chance))
        value = p * values[0] + (1 - p) * values[1]
        if player == seat:
            sign = (
                1.0 if player == FIRST else -1.0
            )  # payoffs are the first player's: the second's is the negative
            other = reach[ROLES[1 - ROLES.index(player)]] * chance
            for n, q in enumerate((p, 1 - p)):
                self.regret[key][n] += other * sign * (values[n] - value)
                self.policy_sum[key][n] += reach[player] * q
        return value

    def average(self) -> dict[Key, float]:
        """The average policy: each information set's policy sum normalised (uniform where it is 0)."""
        return {key: (s[0] / (s[0] + s[1]) if s[0] + s[1] > 0 else 0.5) for key, s in self.policy_sum.items()}


INFOSET_SEAT: dict[Key, str] = {(i.card, i.history): i.player for i in INFOSETS}


def _matched(regret: list[float]) -> float:
    """Regret matching's probability of the aggressive action: its share of the positive regrets."""
    positive = [max(0.0, r) for r in regret]
    total = sum(positive)
    return positive[0] / total if total > 0 else 0.5


def cfr_curve(iterations: int) -> Iterator[dict]:
    """CFR from its first iteration to ``iterations``: after each, ``{"iteration", "exploitability" (of the
    average policy, chips a hand), "average" (its profile)}``."""
    solver = CFR()
    for _ in range(iterations):
        solver.iterate()
        average = solver.average()
        yield {"iteration": solver.iterations, "exploitability": exploitability(average), "average": average}
