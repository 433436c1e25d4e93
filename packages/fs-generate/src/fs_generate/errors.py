"""The one exception family of fs_generate."""


class GenerateError(Exception):
    """A request that cannot be generated: bad prompt, bad sampling parameters, unknown model (named)."""
