"""The one exception family of fs_weights: every bad input raises a ``WeightsError`` subclass."""


class WeightsError(Exception):
    """Base class: a checkpoint, config or request that fs_weights cannot honour."""


class SafetensorsError(WeightsError):
    """A malformed or inconsistent .safetensors file or shard index (file, tensor and offset named)."""


class ConfigError(WeightsError):
    """A config.json / generation_config.json that is missing, malformed or inconsistent (key named)."""


class CrossCheckError(WeightsError):
    """A checkpoint whose tensors do not match its config (raised by a strict cross-check)."""
