"""How big the engine's K/V block pool is when the caller does not say: a quarter of the memory available now,
capped at what ``max_batch`` full contexts could use (vLLM sizes its pool from free memory the same way, with a
fraction of it; a quarter leaves room for the weights' pages, the activations and everything else on the machine).
"""

import logging
import os
from typing import Any

from fs_kvcache import BlockPool

from .errors import GenerateError

log = logging.getLogger("fs_generate.engine")


def available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable, else free pages), None when the OS does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def physical_memory() -> int | None:
    """Bytes of RAM in this machine (a budget beyond it can never be allocated), None when the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def default_kv_budget(token_bytes: int, context: int, max_batch: int) -> tuple[int, str]:
    """A quarter of the memory available now, capped at what ``max_batch`` full contexts could use."""
    avail = available_memory()
    full = token_bytes * context * max_batch
    quarter = avail // 4 if avail is not None else 1 << 30
    budget = min(full, quarter)
    source = "a quarter of the available memory" if quarter < full else f"{max_batch} full contexts of {context}"
    if avail is None:
        source = "1 GiB (the OS did not say how much memory is available)" if quarter < full else source
    return budget, f"kv_budget_bytes=None: {budget / 2**20:.1f} MiB for the K/V pool ({source})"


def block_pool(
    model: Any, kv_budget_bytes: int | None, block_size: int, max_batch: int, kv_bits: Any = None
) -> tuple[BlockPool, Any, str]:
    """The engine's block pool and the model's K/V store over it, sized by ``kv_budget_bytes`` (the default above
    when None) -> (pool, store, a line saying how it was sized). ``kv_bits`` (a ``KVBits``): blocks of codes, so
    the same budget holds more of them. A budget that holds no block, exceeds the machine's memory or cannot be
    allocated is refused with the numbers."""
    if kv_budget_bytes is not None and (type(kv_budget_bytes) is not int or kv_budget_bytes < 1):
        raise GenerateError(f"kv_budget_bytes must be a positive int or None, got {kv_budget_bytes!r}")
    fmt = (kv_bits.bits, kv_bits.group_size) if kv_bits is not None else ()
    block_bytes = model.kv_block_bytes(block_size, *fmt)
    note = f"kv_budget_bytes={kv_budget_bytes}"
    if kv_budget_bytes is None:
        ctx = model.config.max_position_embeddings
        kv_budget_bytes, note = default_kv_budget(block_bytes // block_size, ctx, max_batch)
        log.info(note)
    num_blocks = kv_budget_bytes // block_bytes
    total = physical_memory()
    if total is not None and kv_budget_bytes > total:
        raise GenerateError(
            f"kv_budget_bytes={kv_budget_bytes} is more than this machine's {total} bytes of memory; "
            "leave it unset for a quarter of the memory available"
        )
    if num_blocks < 1:
        raise GenerateError(
            f"kv_budget_bytes={kv_budget_bytes} holds no block: one block of {block_size} positions takes "
            f"{block_bytes} bytes (K and V, every layer)"
        )
    pool = BlockPool(num_blocks, block_size)
    try:
        store = model.make_kv_store(pool, *fmt)
    except MemoryError:
        raise GenerateError(
            f"kv_budget_bytes={kv_budget_bytes}: the K/V pool ({num_blocks} blocks) could not be allocated"
        ) from None
    return pool, store, note
