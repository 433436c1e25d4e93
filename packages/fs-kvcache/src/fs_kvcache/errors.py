"""The one exception family of fs_kvcache."""


class KVCacheError(Exception):
    """A cache used in a way that would corrupt it: mismatched shapes, a released handle, an over-trim..."""
