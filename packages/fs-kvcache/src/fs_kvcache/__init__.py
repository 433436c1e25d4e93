"""fs_kvcache: KV caches for numpy and MLX - dense and forkable, quantized (affine 2/4/8-bit), rotating (a sliding
window), paged copy-on-write, block-prefix and radix prefix caches."""

from .arrays import is_mlx, to_numpy
from .block_prefix import BlockPrefixCache
from .block_table import BlockTable
from .dense import DenseKVCache
from .errors import KVCacheError
from .kv_store import KVStore, PagedBatch, PagedLayer
from .paged import BlockPool, PagedKVCache
from .prompt_cache import identity_string, load_prompt_cache, save_prompt_cache
from .quantized import KV_BITS, QuantizedKVCache
from .radix import RadixPrefixCache
from .rotating import RotatingKVCache, chunk_window

__version__ = "0.1.0"
__all__ = [
    "KV_BITS",
    "BlockPool",
    "BlockPrefixCache",
    "BlockTable",
    "DenseKVCache",
    "KVCacheError",
    "KVStore",
    "PagedBatch",
    "PagedKVCache",
    "PagedLayer",
    "QuantizedKVCache",
    "RadixPrefixCache",
    "RotatingKVCache",
    "chunk_window",
    "identity_string",
    "is_mlx",
    "load_prompt_cache",
    "save_prompt_cache",
    "to_numpy",
]
