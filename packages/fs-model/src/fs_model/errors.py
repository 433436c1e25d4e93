"""The one exception family of fs_model."""


class ModelError(Exception):
    """A checkpoint, config or input the model cannot run (raised before any compute)."""
