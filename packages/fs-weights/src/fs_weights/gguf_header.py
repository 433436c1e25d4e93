"""A GGUF file's header, parsed and checked by fs before one tensor byte is used.

Why not the ``gguf`` package's ``GGUFReader``: it trusts every count and offset it reads. An array length of
2^64-1 loops forever past the end of the file, a tensor offset of 2^64-1 wraps to bytes before the data section,
and a tensor relabelled from F32 to F16 loads half its bytes as garbage. Its errors name nothing ("index 0 is out
of bounds"). This parser walks the same layout with every count checked against the bytes left, and every
refusal names the section (header, key N, tensor info N, data), the key or tensor, and the byte offset. The
``gguf`` package still supplies the tensor type table (``GGML_QUANT_SIZES``), and writes files (gguf_export).

Layout (little-endian; version 2 and 3)::

    "GGUF" | u32 version | u64 tensor_count | u64 kv_count
    kv_count x   (string key, u32 value type, value)          string = u64 length + UTF-8 bytes
    tensor_count x (string name, u32 n_dims, u64 dims[n_dims] fastest-first, u32 ggml type, u64 offset)
    padding to general.alignment (default 32), then the data section

The data section is packed as llama.cpp writes and requires it: tensors in tensor-info order, each at an aligned
offset equal to the end of the previous one rounded up to the alignment. So a type or shape that does not match
the bytes present shows up as a gap or an overlap, and the file may end only in the last tensor's padding.
"""

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import WeightsError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32
STRING, ARRAY = 8, 9
SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
           12: "<f8"}  # fmt: skip # value type -> numpy dtype (7 is bool, one byte)
BOOL = 7
U64 = struct.Struct("<Q")


class GGUFFormatError(WeightsError):
    """A GGUF file whose header or data section is malformed (section, key or tensor, and byte offset named)."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    ggml_type: str  # llama.cpp's name: "F32", "BF16", "Q8_0", ...
    dims: tuple[int, ...]  # GGUF order, fastest-varying first
    begin: int  # absolute byte offsets in the file
    end: int


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Any]
    tensors: list[GGUFTensor]
    alignment: int
    data_start: int


def type_sizes() -> tuple[dict[int, str], dict[str, tuple[int, int]]]:
    """(type code -> name, name -> (values per block, bytes per block)) from llama.cpp's own table."""
    try:
        from gguf.constants import GGML_QUANT_SIZES
    except ImportError:
        raise WeightsError("reading a GGUF file needs the gguf package: pip install 'fs-weights[gguf]'") from None
    return {t.value: t.name for t in GGML_QUANT_SIZES}, {t.name: s for t, s in GGML_QUANT_SIZES.items()}


class _Cursor:
    """Bounded reads from the file's bytes; ``where`` names the section being read, for every refusal."""

    def __init__(self, buf: Any, size: int, source: str):
        self.buf, self.size, self.source, self.pos, self.where = buf, size, source, 0, "header"

    def fail(self, msg: str, at: int | None = None) -> GGUFFormatError:
        at = self.pos if at is None else at
        return GGUFFormatError(f"{self.source}: GGUF {self.where}: {msg} (byte offset {at})")

    def need(self, n: int, what: str) -> int:
        if n > self.size - self.pos:
            raise self.fail(f"{what} needs {n} bytes but the {self.size}-byte file ends {self.size - self.pos} later")
        start, self.pos = self.pos, self.pos + n
        return start

    def scalar(self, code: int, what: str) -> Any:
        dt = np.dtype(SCALARS[code])
        value = np.frombuffer(self.buf, dt, 1, self.need(dt.itemsize, what))[0].item()
        return bool(value) if code == BOOL else value

    def u32(self, what: str) -> int:
        return int(self.scalar(4, what))

    def u64(self, what: str) -> int:
        return int(self.scalar(10, what))

    def string(self, what: str) -> str:
        n = self.u64(f"the length of {what}")
        start = self.need(n, f"{what} ({n} bytes)")
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what} is not valid UTF-8", start + e.start) from None

    def strings(self, count: int, what: str) -> list[str]:
        """``count`` strings, inlined: a Qwen3 vocabulary and its merges are 300,000 of them."""
        buf, pos, size, out = self.buf, self.pos, self.size, []
        for i in range(count):
            if size - pos < 8:
                self.pos = pos
                raise self.fail(f"{what}[{i}]: the file ends inside its length")
            (n,) = U64.unpack_from(buf, pos)
            if n > size - pos - 8:
                self.pos = pos
                raise self.fail(f"{what}[{i}]: a {n}-byte string runs past the end of the {size}-byte file")
            try:
                out.append(str(buf[pos + 8 : pos + 8 + n], "utf-8"))
            except UnicodeDecodeError as e:
                self.pos = pos
                raise self.fail(f"{what}[{i}] is not valid UTF-8", pos + 8 + e.start) from None
            pos += 8 + n
        self.pos = pos
        return out

    def value(self, code: int, what: str) -> Any:
        if code in SCALARS:
            return self.scalar(code, what)
        if code == STRING:
            return self.string(what)
        if code != ARRAY:
            raise self.fail(f"{what} has value type {code}, not a GGUF type (0-12)")
        item = self.u32(f"the element type of {what}")
        count = self.u64(f"the length of {what}")
        least = np.dtype(SCALARS[item]).itemsize if item in SCALARS else 8
        if item == ARRAY:
            raise self.fail(f"{what} is an array of arrays, which GGUF readers (llama.cpp's too) do not accept")
        if item not in SCALARS and item != STRING:
            raise self.fail(f"{what} is an array of value type {item}, not a GGUF type")
        if count * least > self.size - self.pos:
            raise self.fail(f"{what} claims {count} elements; at {least} bytes each they run past the end of the file")
        if item == STRING:
            return self.strings(count, what)
        dt = np.dtype(SCALARS[item])
        values = np.frombuffer(self.buf, dt, count, self.need(count * dt.itemsize, what)).tolist()
        return [bool(v) for v in values] if item == BOOL else values


def parse_header(buf: Any, size: int, source: str) -> GGUFHeader:
    """Every count, type, offset and size in ``buf`` (the ``size`` bytes of GGUF file ``source``) checked."""
    codes, sizes = type_sizes()
    c = _Cursor(buf, size, source)
    if size < 4 or bytes(buf[:4]) != MAGIC:
        raise c.fail(f"the file does not start with {MAGIC!r}: not a GGUF file")
    c.pos = 4
    version = c.u32("the version")
    if version & 0xFFFF == 0 and version:
        raise c.fail("the file is big-endian; only little-endian GGUF files are supported", 4)
    if version not in VERSIONS:
        raise c.fail(f"GGUF version {version} is not supported (only {', '.join(map(str, VERSIONS))})", 4)
    n_tensors, n_kv = c.u64("the tensor count"), c.u64("the key count")
    if n_kv * 12 > size - c.pos:  # the smallest key/value: an empty key (8), a type (4), no value
        raise c.fail(f"a key count of {n_kv} cannot fit in the {size}-byte file", 16)
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        c.where = f"key {i}"
        start = c.pos
        key = c.string("the key")
        c.where = f"key {i} ({key!r})"
        if key in metadata:
            raise c.fail("the key appears twice", start)
        metadata[key] = c.value(c.u32("the value type"), "the value")
    c.where = "tensor infos"
    if n_tensors * 24 > size - c.pos:  # the smallest tensor info: empty name, no dims, type, offset
        raise c.fail(f"a tensor count of {n_tensors} cannot fit in the {size}-byte file", 8)
    infos = []
    for i in range(n_tensors):
        c.where = f"tensor info {i}"
        name = c.string("the tensor name")
        c.where = f"tensor info {i} ({name!r})"
        n_dims = c.u32("the dimension count")
        if not 1 <= n_dims <= MAX_DIMS:
            raise c.fail(f"{n_dims} dimensions; GGUF tensors have 1 to {MAX_DIMS}", c.pos - 4)
        dims = tuple(c.u64(f"dimension {d}") for d in range(n_dims))
        code = c.u32("the tensor type")
        if code not in codes:
            raise c.fail(f"tensor type {code} is not a ggml type", c.pos - 4)
        infos.append((name, codes[code], dims, c.u64("the data offset"), c.pos - 8))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    c.where = "key 'general.alignment'"
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise c.fail(f"general.alignment {alignment!r} is not a positive power of two", 0)
    data_start = -(-c.pos // alignment) * alignment
    return GGUFHeader(version, metadata, _place(c, infos, sizes, alignment, data_start), alignment, data_start)


def _place(c: _Cursor, infos: list[Any], sizes: dict[str, Any], alignment: int, data_start: int) -> list[GGUFTensor]:
    """The tensors' byte ranges, checked: aligned, packed in order (no gap, no overlap), inside the file."""
    tensors: list[GGUFTensor] = []
    seen: set[str] = set()
    expected = 0  # where the next tensor must start, relative to the data section
    for i, (name, kind, dims, offset, at) in enumerate(infos):
        c.where = f"tensor info {i} ({name!r})"
        if name in seen:
            raise c.fail("a second tensor of this name", at)
        seen.add(name)
        block, nbytes = sizes[kind]
        if dims[0] % block:
            raise c.fail(f"{kind} stores blocks of {block} values but its first dimension is {dims[0]}", at)
        numel = 1
        for d in dims:
            numel *= d
        nbytes = numel // block * nbytes
        if offset % alignment:
            raise c.fail(f"data offset {offset} is not a multiple of general.alignment {alignment}", at)
        if offset != expected:
            prev = tensors[-1] if tensors else None
            said = f"{prev.name!r} ({prev.ggml_type} {list(prev.dims)}) ends at {prev.end - data_start}" if prev else ""
            how = "overlaps" if offset < expected else "leaves a gap after"
            raise c.fail(
                f"data offset {offset} {how} the previous tensor: {said or 'the data section starts at 0'}, padded to "
                f"{expected}; a type or shape does not match the bytes stored",
                at,
            )
        begin = data_start + offset
        if nbytes > c.size - begin:
            c.where = f"data (tensor {name!r})"
            raise c.fail(
                f"{kind} {list(dims)} is {nbytes} bytes, bytes {begin}-{begin + nbytes} of the file, but the file "
                f"is {c.size} bytes (truncated?)",
                begin,
            )
        tensors.append(GGUFTensor(name, kind, dims, begin, begin + nbytes))
        expected = -(-(offset + nbytes) // alignment) * alignment
    end = data_start + expected
    if tensors and c.size > end:
        c.where = "data"
        raise c.fail(
            f"{c.size - tensors[-1].end} bytes follow the last tensor {tensors[-1].name!r}, which ends at byte "
            f"{tensors[-1].end}; its type or shape does not match the bytes stored",
            tensors[-1].end,
        )
    return tensors
