"""The one exception family of fs_tokenizer."""


class TokenizerError(Exception):
    """A tokenizer file, input or request fs_tokenizer cannot honour (the field, token or position named)."""
