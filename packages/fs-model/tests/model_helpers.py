"""Shared by fs-model's tests (imported by name: conftest puts this folder on sys.path)."""

import os
from pathlib import Path

from fs_weights import Qwen3Config, preset

os.environ.setdefault("HF_HUB_OFFLINE", "1")
GOLDEN = Path(__file__).parent / "golden"

# Tiny configs that vary every knob the forward pass depends on.
KNOBS = {
    "untied-gqa2": dict(tie_word_embeddings=False),
    "tied": dict(tie_word_embeddings=True),
    "mha": dict(num_key_value_heads=4),
    "mqa": dict(num_key_value_heads=1),
    "head_dim-odd-ratio": dict(head_dim=48, rope_theta=10_000.0, rms_norm_eps=1e-5),
}
# the library's tiny preset (hidden 64, 2 layers, 4 heads of 32) with a 512-id vocabulary and no special ids
BASE = dict(
    vocab_size=512,
    intermediate_size=128,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    bos_token_id=None,
    eos_token_id=None,
)


def cpu_name() -> str:
    """How a skip names the CPU the kernels target: the host's, or the AVX2 set FS_ISA=avx2 restricts them to."""
    from fs_model.cpu import ISA

    return "this CPU" if ISA == "native" else f"this CPU under FS_ISA={ISA}"


def need_tiles(instead: str) -> None:
    """Skip a test of the IR tiles where ``FS_TILES=0`` turned them off on purpose (``instead``: what runs then, and
    which tests cover it). A CPU that has AVX2 + FMA and no ``FS_TILES=0`` gets no skip: tiles that fail to compile
    there fail the test."""
    import pytest

    from fs_model.cpu import SWITCHES

    if not SWITCHES.tiles:
        pytest.skip(f"FS_TILES=0 turns the tiles off: {instead}")


def config(name: str = "untied-gqa2", **kw) -> Qwen3Config:
    return preset("tiny", **{**BASE, **KNOBS[name], **kw})


def rel_err(got, want) -> float:
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / np.abs(want).max())


def int8_activation_contract(w, x):
    """integer_tiles.py's (and vnni.py's) formula in exact arithmetic: Σ_g s_g·sx_g·(q_g · xq_g) + b_g·x̂s_g, with the
    activations quantized per group (the weights' G) by the library's own quantizer (tested on its own in
    test_tiles.py); 4-bit codes are unpacked from the planar layout, 8-bit ones used as they are."""
    import numpy as np

    from fs_model.cpu import affine
    from fs_model.cpu.integer_tiles import quantize_rows, scales_and_sums

    n, G = w.shape[0], w.group_size
    xq, side = quantize_rows(x, G)
    sx, xs = scales_and_sums(side)
    from fs_model.cpu import packed_codes

    codes = affine._unplanar(w.codes, G) if w.bits == 4 else w.codes
    codes = packed_codes.unpack(w.codes, w.bits) if w.bits in (5, 6) else codes
    codes = codes.astype(np.int64).reshape(n, -1, G)
    dots = np.einsum("ngj,mgj->mng", codes, xq.astype(np.int64).reshape(x.shape[0], -1, G))
    s, b = w.scales.astype(np.float64)[None], w.biases.astype(np.float64)[None]
    return (s * sx[:, None].astype(np.float64) * dots).sum(-1) + (b * xs[:, None].astype(np.float64)).sum(-1)
