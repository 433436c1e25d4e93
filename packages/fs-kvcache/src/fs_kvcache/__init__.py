"""fs_kvcache: Dense, forkable, paged copy-on-write and radix prefix KV caches for numpy and MLX arrays."""

from .dense import DenseKVCache
from .errors import KVCacheError

__version__ = "0.1.0"
__all__ = ["DenseKVCache", "KVCacheError"]
