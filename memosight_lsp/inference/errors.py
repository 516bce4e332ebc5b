"""The engine's errors, importable without torch (the CLI names them before it loads one)."""


class ModelLoadError(Exception):
    """A model could not be loaded; the message is one line a user can act on."""
