"""Rewards and training rows: judged episodes become the rows the trainers learn from.

- :mod:`spag.rewards.rows`        the training row: its one definition, Parquet schema, reading, writing
- :mod:`spag.rewards.build`       episodes -> rows (polars): decayed rewards, role weights, penalties
- :mod:`spag.rewards.sft`         general instruction data for the SFT term (and ``data/``, the built-in set)
- :mod:`spag.rewards.ready_made`  ready-made imitation files (the original's), used as they are

May import :mod:`spag.config` and everything below it; independent of :mod:`spag.play` (neither imports
the other).
"""
