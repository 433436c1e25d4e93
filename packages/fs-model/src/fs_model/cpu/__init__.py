"""The CPU kernels of the numpy backend, and every decision about which of them may run, made here once.

What this install and this CPU can do is found out at import: whether numba is installed (a dependency of
fs-model wherever it has wheels; ``fs-model[fast]`` elsewhere) and which instruction-set features the host reports
(through llvmlite, which numba depends on). The ``FS_*`` environment switches are read here and nowhere else;
``SWITCHES`` holds them (tests flip its fields).

| switch | default | effect |
|---|---|---|
| ``FS_NUM_THREADS=N`` | every usable core | caps numba's threads (each call shape picks 1 or N: threads.py) |
| ``FS_BF16_GEMM=0`` | on where the CPU has AVX512-BF16 | bf16 weights keep float32 activations (``bf16w``, BLAS) |
| ``FS_INT8_ACTIVATIONS=0`` / ``all`` | 4-bit (AVX2 or VNNI CPUs) | ``0``: float activations; ``all``: 8-bit too |
| ``FS_REFERENCE_PATH=1`` | off | every step uses the numpy glue instead of the fused kernels |
| ``FS_TILES=0`` | on where the CPU has AVX2 + FMA | kept weights take the row kernels instead of the register tiles |
| ``FS_WIDE_TILES=0`` | on where the CPU has AVX-512 | float tiles stay 8-wide (AVX2) instead of 16-wide |
| ``FS_SUPERBLOCK_SCALES=0`` | on | GGUF K-quant tiles read float32 scales / biases, not the super-block records |
| ``FS_COLUMN_TILES=0`` | on where the tiles run | 4-, 5-, 6-bit codes keep the row tiles, not ``q4ic``, ``q6ic``, … |
| ``FS_BATCH_INVARIANT=0`` | on | kept-weight models may take M-dependent kernels (BLAS / GEMM prefill, int8 decode) |
| ``FS_ISA=avx2`` | ``native`` | every kernel is compiled for the AVX2 set (no AVX-512/AMX), as on an AVX2-only host |
| ``FS_KEEP_HEAP=0`` | on (glibc) | glibc's malloc thresholds stay at their defaults (heap.py says why they move) |

``FS_ISA`` is the one switch read at import and never after: numba fixes its target machine at the first compile,
so the restricted feature set must be in its environment (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``) before that.
It lets one AVX-512 host prove the AVX2 code paths too (the ``kernels`` session runs the equality contracts under
it); compiled caches are keyed by the target, so the two sets of kernels never mix.

One module per kernel family: ``tiles`` (register-tiled kernels for every kept format, LLVM IR), ``bf16`` (bf16
weights as uint16 bits: the layer and its row kernel), ``affine`` (MLX-style 4/8-bit codes: the same),
``bf16_gemm`` and ``vnni`` (hand-written LLVM IR, ``llvm_ir``), ``fused`` (the decode step's glue), ``attention``
(attention over a KV cache, read in place), ``blas`` (BLAS-side helpers: scratch buffers, one OpenBLAS thread),
``threads`` (how many threads each call fans out to), ``heap`` (glibc keeps a prompt's freed pages).
"""

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

try:
    import llvmlite  # noqa: F401  (numba's own dependency: present whenever numba is)

    HAVE_LLVMLITE = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_LLVMLITE = False

ISAS = ("native", "avx2")
# what FS_ISA=avx2 takes away: every AVX-512 / AVX10 / AMX feature and the VEX-encoded extensions that only
# AVX-512-era CPUs have (an AVX2-only EPYC reports none of them)
_BEYOND_AVX2 = ("avx512", "avx10", "evex512", "amx", "avxvnni", "avxifma", "avxneconvert")


def _isa(env: Mapping[str, str]) -> str:
    isa = env.get("FS_ISA", "") or "native"
    if isa not in ISAS:
        warnings.warn(f"FS_ISA={isa!r} is not one of {', '.join(ISAS)}: using native", RuntimeWarning, stacklevel=2)
        return "native"
    return isa


def _target(isa: str) -> tuple[str, dict[str, bool]]:
    """(LLVM CPU name, {feature: on}) every kernel is compiled for: the host's, or the AVX2 level of it."""
    if not HAVE_LLVMLITE:
        return "", {}
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        name, features = llvm.get_host_cpu_name(), dict(llvm.get_host_cpu_features())
    except Exception:  # pragma: no cover - an llvmlite without these APIs: the numba kernels still work
        return "", {}
    if isa == "avx2" and not features.get("avx2"):
        warnings.warn(f"FS_ISA=avx2: this CPU ({name}) has no AVX2; using native", RuntimeWarning, stacklevel=2)
    elif isa == "avx2":  # x86-64-v3 is LLVM's name for the AVX2 + FMA + BMI level, tuned for no particular vendor
        name = "x86-64-v3"
        features = {f: on and not f.startswith(_BEYOND_AVX2) for f, on in features.items()}
    return name, features


ISA = _isa(os.environ)
CPU_NAME, _ON = _target(ISA)
CPU_FEATURES = ",".join(("+" if on else "-") + f for f, on in sorted(_ON.items()))  # LLVM's feature string
if ISA != "native" and CPU_NAME:  # before numba is imported: its compiler reads these at the first compile
    os.environ["NUMBA_CPU_NAME"], os.environ["NUMBA_CPU_FEATURES"] = CPU_NAME, CPU_FEATURES

try:
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_NUMBA = False

# what the kernels may use, e.g. {"avx2", "fma", "avx512f", "avx512bf16", "avx512vnni", ...}
FEATURES = frozenset(f for f, on in _ON.items() if on) if HAVE_NUMBA else frozenset()


@dataclass
class Switches:
    bf16_gemm: bool = True
    int8_activations: bool = True
    int8_activations_8bit: bool = False
    fused_decode: bool = True
    batch_invariant: bool = True
    tiles: bool = True
    wide_tiles: bool = True
    superblock_scales: bool = True
    column_tiles: bool = True
    keep_heap: bool = True
    num_threads: int | None = None
    isa: str = "native"  # read-only after import (see FS_ISA above)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Switches":
        threads = env.get("FS_NUM_THREADS", "")
        return cls(
            bf16_gemm=env.get("FS_BF16_GEMM", "") != "0",
            int8_activations=env.get("FS_INT8_ACTIVATIONS", "") != "0",
            int8_activations_8bit=env.get("FS_INT8_ACTIVATIONS", "") == "all",
            fused_decode=env.get("FS_REFERENCE_PATH", "") in ("", "0"),
            batch_invariant=env.get("FS_BATCH_INVARIANT", "") != "0",
            tiles=env.get("FS_TILES", "") != "0",
            wide_tiles=env.get("FS_WIDE_TILES", "") != "0",
            superblock_scales=env.get("FS_SUPERBLOCK_SCALES", "") != "0",
            column_tiles=env.get("FS_COLUMN_TILES", "") != "0",
            keep_heap=env.get("FS_KEEP_HEAP", "") != "0",
            num_threads=int(threads) if threads.isdigit() and int(threads) > 0 else None,
            isa=ISA,
        )


SWITCHES = Switches.from_env(os.environ)


def set_threads(n: int | None) -> None:
    """Cap every kernel pool at ``n`` threads: numba's and OpenBLAS's (``FS_NUM_THREADS``; the CLIs' ``--threads``).
    ``None`` keeps the default (every usable core)."""
    if n is None:
        return
    if type(n) is not int or n <= 0:
        raise ValueError(f"threads must be a positive int, got {n!r}")
    SWITCHES.num_threads = n  # every kernel call reads it (threads.fan_out)
    from .blas import limit_blas_threads

    limit_blas_threads(n)


if HAVE_NUMBA and SWITCHES.num_threads is not None:
    numba.set_num_threads(min(SWITCHES.num_threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]

if HAVE_NUMBA:
    from . import compile_notice  # noqa: F401  (registers the listener before any kernel compiles)

if HAVE_NUMBA and SWITCHES.keep_heap:  # the compiled steps allocate a prompt's activations per layer: heap.py
    from .heap import keep_freed_memory

    keep_freed_memory()

__all__ = ["CPU_FEATURES", "CPU_NAME", "FEATURES", "HAVE_NUMBA", "ISA", "SWITCHES", "Switches", "set_threads"]
