"""fs_kvcache: Dense, forkable, paged copy-on-write and radix prefix KV caches for numpy and MLX arrays."""

from .dense import DenseKVCache
from .errors import KVCacheError
from .paged import BlockPool, PagedKVCache
from .prompt_cache import identity_string, load_prompt_cache, save_prompt_cache
from .radix import RadixPrefixCache

__version__ = "0.1.0"
__all__ = [
    "BlockPool",
    "DenseKVCache",
    "KVCacheError",
    "PagedKVCache",
    "RadixPrefixCache",
    "identity_string",
    "load_prompt_cache",
    "save_prompt_cache",
]
