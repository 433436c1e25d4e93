"""The bf16 prefill GEMM (AVX512-BF16, LLVM IR) against its contract: bf16(x) · wᵀ in float64."""

import numpy as np
import pytest

from fs_model import cpu, load_model
from fs_model.cpu import bf16_gemm
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.blas import SMALL
from fs_weights import bf16_to_f32, f32_to_bf16, write_random_checkpoint
from model_helpers import config, cpu_name, rel_err

pytestmark = pytest.mark.kernels  # needs numba (the kernels session installs fs-model[fast])


@pytest.fixture(autouse=True)
def _bf16(reference, monkeypatch):
    reference("numba")
    if not bf16_gemm.AVAILABLE:
        pytest.skip(f"{cpu_name()} has no AVX512-BF16: prefill widens to float32 and uses BLAS (test_fused.py)")
    # the GEMM serves the M-dependent path (FS_BATCH_INVARIANT=0); the default runs the row kernels for every M,
    # so with it on these layers would never reach the GEMM (found on an AVX512-BF16 host: AMD CI hosts skip here)
    monkeypatch.setattr(cpu.SWITCHES, "batch_invariant", False)


def bf16_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return bf16_to_f32(f32_to_bf16(x)).astype(np.float64) @ bf16_to_f32(w).T.astype(np.float64)


@pytest.mark.parametrize(
    "n,k,m", [(2048, 1024, 128), (1024, 2048, 37), (3072, 1024, 9), (1024, 3072, 130), (8, 32, 13), (4, 64, 1)]
)
def test_gemm_equals_its_contract(n, k, m):
    rng = np.random.default_rng(n + m)
    w = f32_to_bf16(rng.standard_normal((n, k), dtype=np.float32))
    x = rng.standard_normal((m, k), dtype=np.float32)
    assert bf16_gemm.applies(w)
    got = bf16_gemm.matmul(x, w)
    assert got.shape == (m, n) and got.dtype == np.float32
    assert rel_err(got, bf16_reference(x, w)) < 1e-5
    # rounding the prompt's activations to bf16 is the one approximation: bf16's 2^-9 per element
    assert rel_err(got, x.astype(np.float64) @ bf16_to_f32(w).T.astype(np.float64)) < 1e-2


def test_prefill_routes_and_fallbacks():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SMALL + 5, 64), dtype=np.float32)
    w = f32_to_bf16(rng.standard_normal((12, 64), dtype=np.float32))
    assert rel_err(Bf16Linear(w)(x), bf16_reference(x, w)) < 1e-5  # prefill takes the GEMM
    odd = f32_to_bf16(rng.standard_normal((10, 64), dtype=np.float32))  # 10 rows: not a multiple of 4
    assert not bf16_gemm.applies(odd)
    exact = x.astype(np.float64) @ bf16_to_f32(odd).T.astype(np.float64)
    assert rel_err(Bf16Linear(odd)(x), exact) < 1e-5  # float32 activations on the fallback
    q8 = quantize_affine(rng.standard_normal((12, 64), dtype=np.float32), bits=8, group=64)
    assert not bf16_gemm.applies(q8)  # 8-bit codes keep float32 products


def test_4bit_prefill_dequantizes_to_bf16_in_chunks():
    rng = np.random.default_rng(1)
    w = quantize_affine(rng.standard_normal((4100, 128), dtype=np.float32), bits=4, group=64)
    x = rng.standard_normal((SMALL + 7, 128), dtype=np.float32)
    assert bf16_gemm.applies(w)
    got = AffineLinear(w)(x)  # 4100 rows: two chunks of the 4096-row bf16 buffer
    want = bf16_to_f32(f32_to_bf16(x)).astype(np.float64) @ bf16_to_f32(f32_to_bf16(w.dequantize())).T
    # the kernel's dequantization (an FMA) and fs_weights' can differ in the last float32 bit, which now and then
    # rounds a weight to the neighbouring bf16 value (2^-8 relative): hence 1e-3, not 1e-5
    assert rel_err(got, want) < 1e-3


def test_a_bf16_model_prefill_is_close_to_float32_activations(tmp_path, monkeypatch):
    d = write_random_checkpoint(tmp_path / "m", config("untied-gqa2", hidden_size=128), dtype="bfloat16")
    ids = list(range(3, 40))
    got = load_model(d, dtype="bfloat16", kv_dtype="float32").forward(ids)
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", False)  # decided when a layer is built: load again
    want = load_model(d, dtype="bfloat16", kv_dtype="float32").forward(ids)
    assert rel_err(got, want) < 2e-2 and (got.argmax(-1) == want.argmax(-1)).mean() > 0.9
