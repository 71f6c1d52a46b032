"""One module per ``spag`` subcommand group; each exposes ``register(app)``."""
