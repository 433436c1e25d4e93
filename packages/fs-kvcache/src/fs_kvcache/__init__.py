"""fs_kvcache: Dense, forkable, paged copy-on-write and radix prefix KV caches for numpy and MLX arrays."""

__version__ = "0.1.0"
