"""Our own safetensors reader and writer: validated header, lazy mmap access, atomic writes.

Layout: 8-byte little-endian header length N, N bytes of JSON, then the data buffer. Every check below
turns a malformed file into a ``SafetensorsError`` that names the file, the tensor and the byte offset.
"""

import json
import math
import mmap
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

from .atomic import atomic_output
from .dtypes import STORAGE
from .errors import SafetensorsError
from .jsonfile import parse_json

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors code: "BF16", "F32", "U32", ...
    shape: tuple[int, ...]
    begin: int  # absolute byte offsets in `file`
    end: int
    file: Path

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _fail(path: Path, msg: str) -> SafetensorsError:
    return SafetensorsError(f"{path}: {msg}")


def parse_header(path: Path, head: bytes, file_size: int) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Validate the header bytes of ``path`` (a file of ``file_size`` bytes) and locate every tensor."""
    if file_size < 8 or len(head) < 8:
        raise _fail(path, f"file is {file_size} bytes; a safetensors file starts with an 8-byte header length")
    n = int.from_bytes(head[:8], "little")
    if n > file_size - 8:
        raise _fail(path, f"header length {n} (bytes 0-8) runs past the end of the {file_size}-byte file")
    if n > MAX_HEADER_BYTES:
        raise _fail(path, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if len(head) < 8 + n:
        raise _fail(path, f"header is truncated: {len(head) - 8} of {n} bytes")
    header = parse_json(head[8 : 8 + n], f"{path}: header (bytes 8-{8 + n})", SafetensorsError)
    if not isinstance(header, dict):
        raise _fail(path, f"header is a JSON {type(header).__name__}, expected an object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:  # mlx writes an explicit null
        metadata = {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _fail(path, "__metadata__ must be an object of string to string")
    base, buffer = 8 + n, file_size - 8 - n
    tensors = {name: _entry(path, name, spec, base, buffer) for name, spec in header.items()}
    spans = sorted(tensors.values(), key=lambda t: (t.begin, t.end))
    for prev, cur in pairwise(spans):
        if cur.begin < prev.end:
            raise _fail(
                path,
                f"tensors {prev.name!r} and {cur.name!r} overlap at byte offset {cur.begin - base} of the data"
                f" buffer ({prev.name!r} ends at {prev.end - base})",
            )
    return tensors, metadata


def _entry(path: Path, name: str, spec: object, base: int, buffer: int) -> TensorInfo:
    where = f"tensor {name!r}"
    if not isinstance(spec, dict):
        raise _fail(path, f"{where}: entry is not an object")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in STORAGE:
        raise _fail(path, f"{where}: unknown dtype {dtype!r} (supported: {', '.join(STORAGE)})")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise _fail(path, f"{where}: shape {shape!r} is not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise _fail(path, f"{where}: data_offsets {offsets!r} is not [begin, end] with 0 <= begin <= end")
    begin, end = offsets
    expected = math.prod(shape) * STORAGE[dtype].itemsize
    if end - begin != expected:
        raise _fail(
            path,
            f"{where}: shape {shape} x {dtype} is {expected} bytes but data_offsets [{begin}, {end}]"
            f" span {end - begin} bytes",
        )
    if end > buffer:
        raise _fail(
            path,
            f"{where}: data_offsets end {end} (file offset {base + end}) is past the {buffer}-byte data buffer"
            " (truncated file?)",
        )
    return TensorInfo(name, dtype, tuple(shape), base + begin, base + end, path)


class SafetensorsFile:
    """One .safetensors file: header parsed at open, tensor bytes mapped lazily on first access."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                head = f.read(8)
                if len(head) == 8:
                    n = int.from_bytes(head, "little")
                    if n <= min(size - 8, MAX_HEADER_BYTES):
                        head += f.read(n)
        except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
            raise _fail(self.path, f"cannot read: {getattr(e, 'strerror', None) or e}") from None
        self.tensors, self.metadata = parse_header(self.path, head, size)
        self._map: mmap.mmap | None = None
        self._fd: int | None = None

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def raw(self, name: str) -> np.ndarray:
        """The stored array, read-only, backed by the mmap (BF16 as uint16 bit patterns)."""
        t = self.tensors[name]
        try:
            if self._map is None:
                self._fd = os.open(self.path, os.O_RDONLY)
                self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ) if t.end else None
            # Re-checked on every access: a page past the end of a file truncated under a live mapping raises
            # SIGBUS when touched, and the tail of the last page reads as zeros. Neither must reach the caller.
            assert self._fd is not None
            size = os.fstat(self._fd).st_size
        except (OSError, ValueError) as e:
            raise _fail(self.path, f"tensor {name!r}: cannot map: {getattr(e, 'strerror', None) or e}") from None
        if size < t.end or (self._map is not None and len(self._map) < t.end):
            raise _fail(
                self.path,
                f"tensor {name!r}: the file is now {size} bytes but the tensor ends at byte {t.end}"
                " (truncated after it was opened)",
            )
        dt = STORAGE[t.dtype]
        if self._map is None:  # only zero-byte tensors before any mapping exists
            return np.zeros(t.shape, dtype=dt)
        return np.frombuffer(self._map, dtype=dt, count=t.numel, offset=t.begin).reshape(t.shape)

    def close(self) -> None:
        """Drop the mapping; arrays already handed out keep it alive until they are freed."""
        self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def stored_bytes(self, name: str) -> np.ndarray:
        """Tensor ``name``'s bytes in the file, flat (what a checkpoint digest samples)."""
        return self.raw(name).reshape(-1).view(np.uint8)

    def release(self, name: str, expert: int | None = None) -> None:
        """Drop tensor ``name``'s pages from this process's resident memory (``MADV_DONTNEED``); they stay in the
        file, and a later access reads them back. For loaders that convert a tensor and keep only the result.
        ``expert``: only that slice of a stacked [E, ...] tensor (its other experts may still be read)."""
        t = self.tensors[name]
        drop_pages(self._map, *slice_bytes(t.begin, t.end, t.shape[0] if expert is not None else 1, expert or 0))


def slice_bytes(begin: int, end: int, E: int, e: int) -> tuple[int, int]:
    """Bytes [begin, end) of a tensor stored as E equal slices along its first axis -> slice e's range."""
    per = (end - begin) // E
    return begin + e * per, begin + (e + 1) * per


def drop_pages(m: mmap.mmap | None, begin: int, end: int) -> None:
    """``MADV_DONTNEED`` over the pages holding bytes [begin, end) of a read-only file mapping: they leave resident
    memory and are read from the file again if touched (a shared edge page only costs its neighbour a re-read)."""
    if m is None or not hasattr(mmap, "MADV_DONTNEED") or end <= begin:
        return
    start = begin // mmap.PAGESIZE * mmap.PAGESIZE
    m.madvise(mmap.MADV_DONTNEED, start, end - start)


def save_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    dtypes: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` atomically (temp file + rename). ``dtypes[name]`` gives the code when the numpy
    dtype is ambiguous (a uint16 array holding BF16 bits); otherwise it is inferred."""
    write_safetensors(
        path,
        {k: (v.shape, (dtypes or {}).get(k) or _code(k, v)) for k, v in tensors.items()},
        lambda name: tensors[name],
        metadata,
    )


def write_safetensors(
    path: str | os.PathLike[str],
    layout: Mapping[str, tuple[tuple[int, ...], str]],
    produce,  # name -> np.ndarray in the storage dtype; called once per tensor, in layout order
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Streaming writer: the header is computed from ``layout`` first, then each tensor is produced and
    written in turn, so a multi-GB file never has to be in memory at once."""
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, (shape, code) in layout.items():
        nbytes = math.prod(shape) * STORAGE[code].itemsize
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keep the data buffer 8-byte aligned, as the reference writer does
    path = Path(path)
    with atomic_output(path, error=SafetensorsError) as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for name, (shape, code) in layout.items():
            arr = np.ascontiguousarray(produce(name), dtype=STORAGE[code])
            if arr.shape != tuple(shape):
                raise SafetensorsError(f"{path}: tensor {name!r} produced shape {arr.shape}, expected {shape}")
            arr.tofile(f)


def _code(name: str, arr: np.ndarray) -> str:
    for code, dt in STORAGE.items():
        if code != "BF16" and arr.dtype == dt:
            return code
    raise SafetensorsError(f"tensor {name!r}: numpy dtype {arr.dtype} has no safetensors code")
