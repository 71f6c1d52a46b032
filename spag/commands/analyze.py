"""Placeholder: filled by its issue."""


def register(app) -> None:  # pragma: no cover - replaced by the real command module
    pass
