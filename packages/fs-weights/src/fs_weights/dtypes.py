"""safetensors dtype codes, their numpy storage types, and exact bf16 <-> f32 conversion.

numpy has no bfloat16, so BF16 tensors are stored and handed around as their raw uint16 bit patterns;
``bf16_to_f32`` widens them exactly (a bf16 is the top half of an f32).
"""

import numpy as np

# code -> numpy dtype used to view the stored bytes (little-endian, as safetensors requires)
STORAGE: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
FLOATS = frozenset({"F64", "F32", "F16", "BF16"})

# user-facing names (config.json `torch_dtype`, CLI flags) -> safetensors code
NAMES = {
    "float32": "F32",
    "f32": "F32",
    "float16": "F16",
    "f16": "F16",
    "bfloat16": "BF16",
    "bf16": "BF16",
    "float64": "F64",
}


def itemsize(code: str) -> int:
    return STORAGE[code].itemsize


def code_for(name: str) -> str:
    """``"bfloat16"`` -> ``"BF16"``; raises KeyError for names we cannot store."""
    return NAMES[name]


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even, as torch and mlx do; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def to_float32(raw: np.ndarray, code: str) -> np.ndarray:
    """Stored array -> float32 (exact for BF16/F16; F32 is returned as is, without a copy)."""
    if code == "BF16":
        return bf16_to_f32(raw)
    if code == "F32":
        return raw
    return raw.astype(np.float32)


def from_float32(x: np.ndarray, code: str) -> np.ndarray:
    """float32 array -> the storage array for ``code`` (BF16 as uint16 bits)."""
    if code == "BF16":
        return f32_to_bf16(x)
    return np.asarray(x, dtype=STORAGE[code])
