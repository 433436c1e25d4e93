"""K/V for a quantized cache (``--kv-bits``): each new position's keys and values as MLX affine codes, and back.

``quantize_kv(x [B, kv_heads, S, D], bits, group_size, bf16)`` -> (codes uint32 [B, kv_heads, S, D*bits/32],
scales, biases float32 [B, kv_heads, S, D/group_size]): fs_weights' rule, which is ``mx.quantize``'s bit for bit,
applied per position to groups of ``group_size`` consecutive dims. ``bf16``: the model's K/V are bf16 (``x`` holds
bf16 bits or bf16 values), so scales and biases are rounded to bf16 as mlx-lm's bf16 models keep them.
``dequantize_kv(triple)`` -> float32 ``scale * code + bias`` [B, kv_heads, S, D].

Worked example (bits=4, group_size=32, one group): values spanning [-0.3, 1.2] give step 1.5/15 = 0.1, the edge of
larger magnitude (1.2) becomes the bias with scale -0.1, so 1.2 -> code 0 exactly and -0.3 -> code 15.
"""

import numpy as np

from fs_weights import bf16_to_f32, dequantize, f32_to_bf16, quantize

Triple = tuple[np.ndarray, np.ndarray, np.ndarray]


def quantize_kv(x: np.ndarray, bits: int, group_size: int, bf16: bool) -> Triple:
    x = bf16_to_f32(x) if x.dtype == np.uint16 else np.asarray(x, dtype=np.float32)
    B, H, S, D = x.shape
    codes, scales, biases = quantize(x.reshape(B * H * S, D), bits=bits, group_size=group_size)
    if bf16:
        scales, biases = bf16_to_f32(f32_to_bf16(scales)), bf16_to_f32(f32_to_bf16(biases))
    return codes.reshape(B, H, S, -1), scales.reshape(B, H, S, -1), biases.reshape(B, H, S, -1)


def dequantize_kv(triple: Triple, bits: int, group_size: int) -> np.ndarray:
    codes, scales, biases = triple
    return dequantize(codes, scales, biases, bits=bits, group_size=group_size)
