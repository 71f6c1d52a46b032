"""The ``spag`` subcommands: one module per subcommand group, each exposing ``register(app)``, its options
made from the settings schema (:mod:`spag.commands.options`).

The layer under :mod:`spag.cli`: may import every layer below it (pipeline, evaluate, analyze, train, play,
rewards, config, game, players, models, schema, runtime).
"""
