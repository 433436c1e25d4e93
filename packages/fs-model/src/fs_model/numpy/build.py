"""Build the numpy backend from a checkpoint: each matrix becomes the linear layer for its format, once.

This is where the CPU path's decisions are made, in order:
1. the format each matrix is kept in (``dtype`` / ``quantize``): float32 copies, bf16 bits, or affine codes;
2. its layer: ``DenseLinear`` (BLAS), ``Bf16Linear`` or ``AffineLinear`` (fs_model.cpu kernels);
3. whether every step runs the fused glue (``InvariantAttention`` / ``InvariantBlock``: batch-invariant, the
   default), decode steps only (``FusedAttention`` / ``FusedBlock``, ``FS_BATCH_INVARIANT=0``), or neither;
   with the invariant glue a Qwen3-MoE layer's chosen experts run in two tile calls (``GroupedMoE``);
4. whether a prefill keeps OpenBLAS to one thread (when the matrices run on numba's pool).
"""

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from fs_weights import Checkpoint, Qwen3Config, f32_to_bf16

from ..cpu import HAVE_NUMBA, compile_notice, packed_codes
from ..cpu.affine import AffineLinear, AffineWeight, from_mlx, quantize_affine
from ..cpu.bf16 import Bf16Linear
from ..cpu.blas import SMALL, one_blas_thread
from ..cpu.compiled_block import CompiledBlock
from ..cpu.decode_step import (
    FusedAttention,
    FusedBlock,
    InvariantAttention,
    fused_decode_applies,
    invariant_applies,
)
from ..cpu.experts import GroupedMoE
from ..errors import ModelError
from .attention import Attention
from .block import Block
from .linear import DenseLinear, Linear
from .model import NumpyModel
from .moe import SparseMoE

DTYPES = ("float32", "bfloat16", "native")
QUANTIZE = ("int8", "int4")


def from_checkpoint(
    config: Qwen3Config,
    ckpt: Checkpoint,
    path: str,
    *,
    dtype: str | None = None,
    quantize: str | None = None,
    kv_dtype: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> NumpyModel:
    """See ``fs_model.load_model`` for what ``dtype``, ``quantize`` and ``kv_dtype`` mean on this backend."""
    if dtype not in (None, *DTYPES):
        raise ModelError(f"numpy backend weights: dtype must be float32, bfloat16 or native, not {dtype!r}")
    if quantize not in (None, *QUANTIZE):
        raise ModelError(f"quantize must be int8 or int4, not {quantize!r}")
    if dtype is None:  # the checkpoint's own storage, as mlx-lm keeps it: bf16 stays bf16, 4/8-bit stays quantized
        dtype = "native"
    names = [n for n in ckpt.names() if not n.endswith((".scales", ".biases"))]
    weights: dict[str, Any] = {}
    done, total = 0, sum(map(ckpt.weight_nbytes, names))
    for n in names:
        weights[n] = _layer(ckpt, n, dtype, quantize)
        if progress is not None:
            done += ckpt.weight_nbytes(n)
            progress(done, total)
    gate: Linear = weights["model.layers.0.self_attn.q_proj.weight"]  # every layer's format (dense or MoE)
    kept = not isinstance(gate, DenseLinear)
    if kv_dtype is None:  # as mlx-lm's caches follow the model's dtype
        kv_dtype = "bfloat16" if kept else "float32"
    if kept and not HAVE_NUMBA:
        warnings.warn(  # shown once per process: the result is right, only slow
            f"{path}: bf16 / quantized weights are running on the pure-numpy fallback (correct, but many times "
            "slower): install numba (pip install 'fs-model[fast]'), or compute on float32 copies (dtype='float32', "
            "--dtype float32)",
            RuntimeWarning,
            stacklevel=2,
        )
    if kept and HAVE_NUMBA:  # named in the line printed if its kernels compile (a first run)
        compile_notice.expect(f"{gate.w.bits}-bit weights" if isinstance(gate, AffineLinear) else "bf16 weights")
    fused, invariant = fused_decode_applies(gate), invariant_applies(gate)
    on_numba_threads = bool(getattr(gate, "uses_numba_threads", False))

    def context(S: int) -> contextlib.AbstractContextManager[Any]:
        # a prefill on the bf16 GEMM runs on numba's threads: OpenBLAS's must keep off the cores meanwhile
        return one_blas_thread() if S > SMALL and on_numba_threads else contextlib.nullcontext()

    return NumpyModel(
        config,
        weights,
        path,
        kv_dtype=kv_dtype,
        attention=InvariantAttention if invariant else FusedAttention if fused else Attention,
        block=CompiledBlock if invariant else FusedBlock if fused else Block,
        moe=GroupedMoE if invariant else SparseMoE,
        context=context,
    )


def _layer(ckpt: Checkpoint, name: str, dtype: str | None, quantize: str | None) -> Any:
    if len(ckpt.info(name).shape) != 2:  # norms: tiny, always float32
        return _float32(ckpt, name)
    w = _kept(ckpt, name, dtype, quantize)
    if not ckpt.is_view(name, getattr(w, "codes", w)):
        ckpt.release(name)  # a converted copy is kept: the stored pages need not stay resident (peak RSS)
    if isinstance(w, AffineWeight):
        layer = AffineLinear(w)  # it may widen bf16 scales (the paths other than the tiles read float32)
        base = name.removesuffix(".weight")  # scales / biases kept as copies: their stored pages go too
        for part, kept in _parts(layer.w):
            if base + part in ckpt and not ckpt.is_view(base + part, kept):
                ckpt.release(base + part)
        return layer
    # A Qwen3-MoE router keeps float32 activations where bf16 matrices round theirs (cpu/bf16_dot_tiles.py): its
    # logits pick experts, a discrete choice that one bf16 rounding of a near-tie flips, and it is too small a
    # matrix (E × hidden) for the speed to matter
    router = name.endswith(".mlp.gate.weight")
    if w.dtype != np.uint16:
        return DenseLinear(w)
    bf16_layer = Bf16Linear(w, bf16_activations=not router)
    if bf16_layer.w is not w and ckpt.is_view(name, w):
        ckpt.release(name)  # kept interleaved (cpu/bf16_dot_tiles.py): the stored pages need not stay resident
    return bf16_layer


def _kept(ckpt: Checkpoint, name: str, dtype: str | None, quantize: str | None) -> Any:
    """The matrix in the format it is kept in: AffineWeight codes, bf16 bits (uint16) or float32."""
    if ckpt.is_quantized(name) and (dtype == "native" or quantize is not None):
        bits, group = ckpt.quant_params(name)
        base = name.removesuffix(".weight")
        if bits in (4, 8):
            scales, biases = (_scales(ckpt, base + part) for part in (".scales", ".biases"))
            codes = from_mlx(ckpt.raw(name), scales, biases, bits, group).narrowed()  # GGUF's float16 factors
            if not ckpt.is_view(name, codes.codes):  # scales follow their codes into memory (_scales says why)
                held = [np.array(a) if ckpt.is_view(base + p, a) else a for p, a in _parts(codes)]
                codes = replace(codes, scales=held[0], biases=held[1])
            records = ckpt.superblocks(name)  # a GGUF K-quant: the tiles read these in place of scales / biases
            codes = codes if records is None else replace(codes, records=records)
            return packed_codes.keep_packed(codes, ckpt.code_bits(name))  # GGUF's 5- and 6-bit codes
    if quantize is not None:
        stored = ckpt.raw(name) if ckpt.info(name).dtype in ("BF16", "F32") and not ckpt.is_quantized(name) else None
        w = stored if stored is not None else ckpt.get(name, np.float32, dequantize=True)
        return quantize_affine(w, bits=8 if quantize == "int8" else 4)
    if dtype == "bfloat16" or (dtype == "native" and ckpt.info(name).dtype == "BF16"):
        return _bf16(ckpt, name)
    return _float32(ckpt, name)


def _parts(w: AffineWeight) -> list[tuple[str, np.ndarray]]:
    return [(".scales", w.scales), (".biases", w.biases)]


def _scales(ckpt: Checkpoint, name: str) -> np.ndarray:
    """A quantized matrix's scales or biases: bf16 or float16 ones (an MLX conversion of a bf16 or float16 model) as
    stored, the mapped file itself, which the tiles read as they are (cpu/half_scales.py: as float32 copies they were
    1/9 of a 4-bit model's bytes, in memory and in every decode step); any other dtype as float32.

    ``_kept`` copies them (the same 16 bits) where the codes are copied (4-bit codes repacked as planar nibbles, GGUF
    blocks): a mapped page is clean and the kernel may drop it whenever memory runs short, to read it again from disk
    when touched. Qwen3-30B-A3B at 4 bits (17.19 GB here, 24 GiB of RAM) lost its mapped scales that way during the
    load and decoded at 6-10 tok/s instead of 14, faulting them back; 8-bit codes, read in place, keep theirs mapped
    beside them."""
    return ckpt.raw(name) if ckpt.info(name).dtype in ("BF16", "F16") else ckpt.get(name)


def _bf16(ckpt: Checkpoint, name: str) -> np.ndarray:
    """Matrices as bf16 bit patterns: a BF16 tensor is the read-only mmap view itself (no copy, 2 bytes/param)."""
    if ckpt.info(name).dtype == "BF16":
        return ckpt.raw(name)
    return f32_to_bf16(ckpt.get(name, np.float32, dequantize=True))


def _float32(ckpt: Checkpoint, name: str) -> np.ndarray:
    """Weights as contiguous float32 in memory (quantized ones dequantized once, at load), read-only whether they
    are the file's own pages or a converted copy: numba types a read-only array apart from a writable one, so a
    kernel taking norms compiled twice, once per kind of checkpoint (cpu/compiled_block.py: seconds each)."""
    w = np.ascontiguousarray(ckpt.get(name, np.float32, dequantize=True))
    w.flags.writeable = False
    return w
