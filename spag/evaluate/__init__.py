"""Evaluation: game win rates and their decomposition, reasoning benchmarks (lm-eval's stock tasks on real
items, offline), paired comparisons of two checkpoints, effects over training seeds, and round-robin
tournaments with Elo ratings. Statistics clustered by target are :mod:`spag.runtime.statistics`.

A sibling of :mod:`spag.analyze` (neither imports the other); may import train, play, rewards, config, game,
players, models, schema and runtime. Heavy libraries (torch, lm-eval, matplotlib) are imported inside the
functions that use them.
"""
