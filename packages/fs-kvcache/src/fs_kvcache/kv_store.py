"""The engine's K/V: one ``BlockPool`` for every layer, and the description of one ragged forward pass over it.

Why one pool per model: a sequence's block table then names the same blocks in every layer, so admitting,
sharing, copying and freeing a sequence is one table operation, not one per layer.

Layout: ``k[l]``, ``v[l]`` are layer l's ``[kv_heads, num_blocks * block_size, D]`` arrays (numpy in the cache dtype -
float32, or bf16 bits as uint16 - or MLX arrays for the MLX backend). Slot ``s = block * bs + row`` is one position;
``k[l][h, s]`` its key in layer l, head h. A block's rows are contiguous per head, so attention reads a block's keys
in place - and a dense cache ``[B, kv_heads, capacity, D]`` is the same layout with one block per row (the fused
kernel serves both).

Quantized (``bits``: the engine's ``kv_bits``): each of ``k[l]``, ``v[l]`` is the triple a ``QuantizedKVCache``
keeps, slot for slot - codes uint32 ``[kv_heads, slots, D*bits/32]``, scales and biases ``[kv_heads, slots,
D/group_size]`` in ``dtype`` - and every operation below applies to the three parts alike. A position is written
as codes before anything reads it, so its K/V are the same codes whichever pass, chunk or prefix-cache hit wrote
them (docs/engine.md). Bytes per position and layer, K and V, for 8 kv heads of 128 dims with float32 scales:
8-bit, group 64: 2 x (1024 codes + 128 scales and biases) = 2304; 4-bit: 2 x (512 + 128) = 1280; bf16: 4096.

A step (``PagedBatch``) packs the new tokens of n sequences one after another:

    tokens    [N]      sequence i's new tokens are tokens[starts[i]:starts[i+1]]
    positions [N]      their positions (sequence i's run ends at context[i] - 1)
    slots     [N]      where their K/V are written before attention reads them
    context   [n]      keys sequence i sees: every earlier position and its own new ones
    tables    [n, M]   sequence i's block ids (-1 past its end)

For example two sequences, one decoding its 6th token and one prefilling 3 tokens after 16 cached ones (bs = 16):
``starts = [0, 1, 4]``, ``positions = [5, 16, 17, 18]``, ``context = [6, 19]``.

Memory: numpy's arrays are zeros mapped lazily in 4 KiB pages (``pool_zeros``: an anonymous mapping with huge pages
declined), so a generous budget costs memory only as blocks are first written. numpy would ask for 2 MiB pages
(``madvise(MADV_HUGEPAGE)``), and a block touches one page per head and layer side, scattered over the pool: on this
project's Linux VM those first touches stalled in the kernel's compaction, 10,118 faults costing 3.7 s of a 21 s
engine run (16 requests of 64 tokens over a 512-token shared prompt, 0.6B bf16, 2026-12-07) against 0.43 s for
96,715 small-page faults. Reading 4 KiB pages costs attention at long context about a tenth (4,096 positions: 505
against 453 µs a layer), less than the stalls it avoids (docs/decisions.md).
"""

import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .arrays import index, is_mlx
from .block_table import BlockTable
from .errors import KVCacheError
from .paged import BlockPool
from .quantized import KV_BITS


class KVStore:
    def __init__(
        self,
        pool: BlockPool,
        layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: Any,
        like: Any = None,
        bits: int | None = None,
        group_size: int = 64,
    ):
        """``like``: an array of the kind to store in (an MLX array makes MLX storage of ``dtype``, an mx.Dtype).
        ``bits``: keep K/V as affine codes of ``group_size`` dims a scale (``dtype``: the scales' and biases')."""
        self.pool, self.block_size = pool, pool.block_size
        self.bits, self.group_size = bits, group_size
        parts = self.parts(kv_heads, pool.num_blocks * pool.block_size, head_dim, dtype, bits, group_size)
        self.k: list[Any]
        self.v: list[Any]
        if like is not None and is_mlx(like):
            import mlx.core as mx

            def make() -> Any:
                got = tuple(mx.zeros(shape, mx.uint32 if code else dtype) for shape, code in parts)
                return got if bits else got[0]

            self.k, self.v = [make() for _ in range(layers)], [make() for _ in range(layers)]
            # made now, not lazily: MLX evaluates a lazy array only on the thread that made it, and the engine
            # may run its steps on another (Engine.start's thread) - "There is no Stream(cpu, 0) in current thread"
            mx.eval(*self.arrays())
        else:  # zeros mapped lazily, in small pages (the module docstring)

            def make() -> Any:
                got = tuple(pool_zeros(shape, np.uint32 if code else dtype) for shape, code in parts)
                return got if bits else got[0]

            self.k, self.v = [make() for _ in range(layers)], [make() for _ in range(layers)]
        self._nbytes = sum(int(a.nbytes) for a in self.arrays())

    @staticmethod
    def parts(
        kv_heads: int, slots: int, head_dim: int, dtype: Any, bits: int | None, group_size: int
    ) -> list[tuple[tuple[int, int, int], bool]]:
        """Each stored array of one side of one layer: (shape, holds codes). One array ``[kv_heads, slots, D]``,
        or codes, scales and biases."""
        if not bits:
            return [((kv_heads, slots, head_dim), False)]
        if bits not in KV_BITS or type(group_size) is not int or group_size < 1 or head_dim % group_size:
            raise KVCacheError(f"kv bits {bits!r} / group size {group_size!r} do not fit heads of {head_dim} dims")
        groups = (kv_heads, slots, head_dim // group_size)
        return [((kv_heads, slots, head_dim * bits // 32), True), (groups, False), (groups, False)]

    @staticmethod
    def block_bytes(
        layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: Any,
        block_size: int,
        bits: int | None = None,
        group_size: int = 64,
    ) -> int:
        """Bytes one block takes: K and V, every layer (``dtype`` a numpy dtype, or anything with ``size``)."""
        try:
            size = np.dtype(dtype).itemsize
        except TypeError:  # an mx.Dtype
            size = dtype.size
        one = sum(
            int(np.prod(shape)) * (4 if code else size)
            for shape, code in KVStore.parts(kv_heads, block_size, head_dim, dtype, bits, group_size)
        )
        return 2 * layers * one

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def arrays(self) -> list[Any]:
        """Every stored array, K then V, layer by layer (each part of a quantized side)."""
        return [a for side in (self.k, self.v) for layer in side for a in _parts(layer)]

    def copy(self, src: int, dst: int) -> None:
        """Block ``src``'s numbers into block ``dst``, every layer (a ``BlockTable.reserve`` copy-on-write)."""
        a, b = src * self.block_size, dst * self.block_size
        for part in self.arrays():
            part[:, b : b + self.block_size] = part[:, a : a + self.block_size]

    def prefault(self, blocks: int) -> None:
        """Write zeros over blocks 0 .. ``blocks``-1 of every layer, so the OS maps their pages now: a fresh pool's
        first writes page-fault (measured: 2 s of a 0.6B model's first 18-token prefill on this VM), and the pool
        hands out low blocks first (``BlockPool``), so a server's first requests then write into mapped memory."""
        if self.pool.free_blocks != self.pool.num_blocks:
            raise KVCacheError("prefault writes zeros: only a pool with no block in use may be prefaulted")
        if not isinstance(self.arrays()[0], np.ndarray):
            return  # MLX made its arrays whole (see __init__)
        end = min(blocks, self.pool.num_blocks) * self.block_size
        for part in self.arrays():
            part[:, :end] = 0

    def write(self, layer: int, slots: np.ndarray, k: Any, v: Any) -> None:
        """New K/V ``[kv_heads, N, D]`` of one layer into their slots (quantized: triples ``[kv_heads, N, *]``)."""
        like = _parts(self.k[layer])[0]
        at = index(like, slots.tolist()) if is_mlx(like) else slots
        for side, new in ((self.k[layer], k), (self.v[layer], v)):
            got = _parts(new)
            if len(got) != len(_parts(side)):
                raise KVCacheError(f"this store keeps {len(_parts(side))} array(s) per side; got {len(got)}")
            for part, x in zip(_parts(side), got, strict=True):
                part[:, at] = x

    def slots(self, table: np.ndarray, T: int) -> np.ndarray:
        """Slots of positions 0 .. T-1 of the sequence with block ids ``table``."""
        p = np.arange(T)
        return table[p // self.block_size] * self.block_size + p % self.block_size

    def gather(self, layer: int, table: np.ndarray, T: int) -> tuple[Any, Any]:
        """The first ``T`` positions of the sequence with block ids ``table`` as dense ``[1, kv_heads, T, D]`` copies
        (quantized: triples ``[1, kv_heads, T, *]``; the reference path's and MLX's view; the fused kernel reads
        the blocks in place)."""
        s = self.slots(table, T)
        like = _parts(self.k[layer])[0]
        at = index(like, s.tolist()) if is_mlx(like) else s

        def take(side: Any) -> Any:
            got = tuple(part[:, at][None] for part in _parts(side))
            return got if self.bits else got[0]

        return take(self.k[layer]), take(self.v[layer])


def pool_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Zeros of ``shape`` mapped page by page as they are first written, in 4 KiB pages where the OS lets a mapping
    decline huge ones (Linux: ``MADV_NOHUGEPAGE``; elsewhere ``np.zeros``). The array keeps its mapping alive."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dt.itemsize
    if not nbytes or not hasattr(mmap, "MADV_NOHUGEPAGE"):
        return np.zeros(shape, dt)
    pages = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)  # fileno -1: anonymous, zero-filled on first touch
    pages.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(pages, dt).reshape(shape)


def _parts(side: Any) -> tuple[Any, ...]:
    return side if isinstance(side, tuple) else (side,)


@dataclass(frozen=True)
class PagedBatch:
    tokens: np.ndarray
    positions: np.ndarray
    slots: np.ndarray
    starts: np.ndarray
    context: np.ndarray
    tables: np.ndarray
    keep: np.ndarray  # [n]: how many of each sequence's last new tokens get logits (1, or 1 + drafts to verify)

    @classmethod
    def pack(cls, runs: Sequence[tuple[BlockTable, Sequence[int]]], keep: Sequence[int] | None = None) -> "PagedBatch":
        """One entry per sequence: its table (reserved for the new tokens, ``length`` = positions already held)
        and its new tokens; ``keep[i]``: logits for sequence i's last ``keep[i]`` new tokens (default 1 each).
        Nothing is advanced; the caller does that after the forward pass."""
        if not runs or any(len(t) == 0 for _, t in runs):
            raise KVCacheError("a paged batch needs at least one sequence and one new token per sequence")
        lens = [len(t) for _, t in runs]
        kept = np.ones(len(runs), np.int64) if keep is None else np.asarray(keep, np.int64)
        if kept.shape != (len(runs),) or (kept < 1).any() or (kept > np.asarray(lens)).any():
            raise KVCacheError(f"keep must give 1..len(tokens) logits per sequence, got {list(kept)} for {lens}")
        starts = np.zeros(len(runs) + 1, np.int64)
        starts[1:] = np.cumsum(lens)
        width = max(len(tb.blocks) for tb, _ in runs)
        tables = np.full((len(runs), width), -1, np.int64)
        for i, (tb, _) in enumerate(runs):
            tables[i, : len(tb.blocks)] = tb.blocks
        return cls(
            tokens=np.concatenate([np.asarray(t, np.int64) for _, t in runs]),
            positions=np.concatenate(
                [np.arange(tb.length, tb.length + n, dtype=np.int64) for (tb, _), n in zip(runs, lens, strict=True)]
            ),
            slots=np.concatenate([tb.slots(tb.length, n) for (tb, _), n in zip(runs, lens, strict=True)]),
            starts=starts,
            context=np.asarray([tb.length + n for (tb, _), n in zip(runs, lens, strict=True)], np.int64),
            tables=tables,
            keep=kept,
        )

    @property
    def last(self) -> np.ndarray:
        """Index in ``tokens`` of each sequence's last new token."""
        return self.starts[1:] - 1

    @property
    def logit_rows(self) -> np.ndarray:
        """Indices in ``tokens`` whose logits the step returns, sequence by sequence: each one's last ``keep``."""
        if (self.keep == 1).all():
            return self.last
        return np.concatenate([np.arange(e - k, e) for e, k in zip(self.starts[1:], self.keep, strict=True)])


@dataclass(frozen=True)
class PagedLayer:
    """What one layer's attention gets as its cache during a paged step: where to write and what to read."""

    store: KVStore
    layer: int
    batch: PagedBatch
