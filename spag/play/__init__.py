"""Self-play: many games advanced together by one batched call per turn, written as shards, resumable.

- :mod:`spag.play.engine`       the turn loop: :func:`~spag.play.engine.play_games`, ``play_matches`` and ``run_games``
- :mod:`spag.harness.play_job`          self-play under a launcher: one rank per GPU, the words shared by rank
- :mod:`spag.play.environment`  one game behind ``reset``/``step``, for engines that drive games themselves

May import :mod:`spag.config` and everything below it (game, players, models, schema, runtime); it knows
nothing of rewards, training or evaluation.
"""
