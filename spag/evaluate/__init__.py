"""Evaluation: game win rates, reasoning benchmarks (lm-eval's stock tasks on real items, offline), paired
comparisons of two checkpoints, and round-robin tournaments with Elo ratings.

Heavy libraries (torch, lm-eval, matplotlib) are imported inside the functions that use them.
"""

from spag.evaluate.benchmark import run_benchmark
from spag.evaluate.compare import compare_benchmarks
from spag.evaluate.games import evaluate_models, tally_games, wilson_interval
from spag.evaluate.tournament import run_tournament, tournament_metrics

__all__ = [
    "compare_benchmarks",
    "evaluate_models",
    "run_benchmark",
    "run_tournament",
    "tally_games",
    "tournament_metrics",
    "wilson_interval",
]
