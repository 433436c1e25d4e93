"""The one exception family of fs_generate."""


class GenerateError(Exception):
    """A request that cannot be generated: bad prompt, bad sampling parameters, unknown model (named)."""


class ConstraintError(GenerateError):
    """A request's constraint (``json_schema``, ``regex`` or ``grammar``, named by ``kind``) that the compiler
    refuses, that exceeds its limits, or that admits no output: the request's fault, at submit or mid-way."""

    def __init__(self, message: str, kind: str = "grammar"):
        super().__init__(message)
        self.kind = kind
