"""How big the engine's K/V block pool is when the caller does not say: a quarter of the memory available now,
capped at what ``max_batch`` full contexts could use (vLLM sizes its pool from free memory the same way, with a
fraction of it; a quarter leaves room for the weights' pages, the activations and everything else on the machine).
"""

import os


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
