"""Keep freed activation memory in the process: glibc's ``mallopt`` set once, where the compiled kernels run.

Why: a compiled half-layer (compiled_block.py) allocates its activations afresh every call - a 512-token prompt's
normed rows, q, k, v, their RoPE'd copies: ~16 MB in the first half, more in the second - and frees them on return.
glibc serves blocks above its mmap threshold with ``mmap`` and returns them on ``free``, and trims the top of the heap
once more than its trim threshold lies free there; both thresholds start at 128 KiB and only grow to twice the
largest block freed so far. So every layer's blocks came back from the kernel as fresh pages, each 4 KiB one a page
fault and a zeroing: a Qwen3-0.6B bf16 layer's q/k/v half took 12.3 ms at 512 tokens against 7.3 ms for its parts
called on kept buffers, and a whole 512-token prefill ran 1.14× faster (bf16; int4 1.10×) with the thresholds
raised here (Zen 5, 2026-12-07, docs/performance.md).

Decision: blocks up to ``MMAP_MAX`` come from the heap, and the heap keeps up to ``TRIM`` bytes free at its top, so a
prompt's activations reuse the pages the previous layer freed. The cost is resident memory that stays after a long
prompt (at most about one prompt chunk's activations plus ``TRIM``), which a server holding a model expects anyway.
Logits of a whole prompt and weights stay above ``MMAP_MAX`` (mapped, returned on free). ``FS_KEEP_HEAP=0`` leaves
glibc's defaults (cpu/__init__.py); elsewhere than glibc (musl, macOS) nothing is set.

    keep_freed_memory() -> bool   # True where mallopt took both settings
"""

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
# blocks up to this come from the heap (a 2,048-token chunk's [S, 3072] float32: 25 MB); glibc takes at most 32 MiB
MMAP_MAX = 32 << 20
TRIM = 256 << 20  # free bytes the heap keeps at its top before returning them

_done: list[bool] = []


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process (later calls return the first one's answer)."""
    if _done:
        return _done[0]
    ok = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):  # not glibc (musl has no mallopt symbol to call)
            mallopt = None
        if mallopt is not None:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM))
    _done.append(ok)
    return ok
