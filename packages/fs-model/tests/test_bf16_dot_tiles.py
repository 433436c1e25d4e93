"""The bf16-activation tiles (cpu/bf16_dot_tiles.py, kind ``bf16d``): every element is the written-down chain, bit for
bit, whatever tile computed it; within bf16 rounding of the float64 product; and where the CPU lacks AVX512-BF16 (or
``FS_BF16_GEMM=0``) bf16 weights keep float32 activations."""

import numpy as np
import pytest

from fs_model import cpu
from fs_model.cpu import tiles
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.fused import to_bf16
from fs_model.cpu.tile_loops import FETCHING_ROWS
from fs_weights import bf16_to_f32, f32_to_bf16
from model_helpers import cpu_name, need_tiles, rel_err

pytestmark = pytest.mark.kernels

TINY = 2.0**-126  # float32's smallest normal: the instruction counts anything below it as zero


@pytest.fixture
def bf16d(reference):
    reference("numba")
    need_tiles("bf16 weights run the row kernels (test_kernels.py)")
    if tiles.kernels("bf16d") is None:
        assert tiles.widest("bf16", 1024) != "bf16d"
        pytest.skip(f"{cpu_name()} has no AVX512-BF16: bf16 weights run the float32-activation tiles (test_tiles.py)")


def flush(v: np.ndarray) -> np.ndarray:
    return np.where(np.abs(v) < TINY, 0, v)


def chain(wb: np.ndarray, xb: np.ndarray, odd_first: bool = True) -> np.ndarray:
    """The contract in numpy: per lane j, acc = (acc + odd product) + even product over chunks of 32, each sum
    rounded to float32, then float_tiles.hsum's tree over the 16 lanes."""
    W, X = flush(bf16_to_f32(wb).astype(np.float64)), flush(bf16_to_f32(xb).astype(np.float64))
    n, k = W.shape
    out = np.empty((X.shape[0], n), np.float32)
    for r in range(X.shape[0]):
        P = flush(W * X[r]).reshape(n, k // 32, 16, 2)  # exact: two 8-bit significands
        acc = np.zeros((n, 16), np.float32)
        for c in range(k // 32):
            for half in (1, 0) if odd_first else (0, 1):
                acc = flush((acc.astype(np.float64) + P[:, c, :, half]).astype(np.float32))
        a = acc[:, :8] + acc[:, 8:]
        a = a[:, :4] + a[:, 4:]
        a = a[:, :2] + a[:, 2:]
        out[r] = a[:, 0] + a[:, 1]
    return out


def test_each_element_is_the_written_chain(bf16d):
    rng = np.random.default_rng(0)
    n, k = 45, 512  # full 4-row tiles and one-row edges; 16 chunks
    # a wide dynamic range, so that the order of the additions shows in the bits
    w = f32_to_bf16(rng.standard_normal((n, k), dtype=np.float32) * np.exp2(rng.integers(-12, 12, (n, k))))
    m = FETCHING_ROWS + 5  # a call whose later 4-row panels take the quiet tile (tiles.QUIET), and calls that do not
    x = rng.standard_normal((m, k), dtype=np.float32) * np.exp2(rng.integers(-12, 12, (m, k))).astype(np.float32)
    got = tiles.Tiled("bf16d", w)(x)
    want = chain(w, to_bf16(x))
    assert np.array_equal(got, want)
    assert not np.array_equal(chain(w, to_bf16(x), odd_first=False), want)  # the data can tell the orders apart
    for lo, hi in ((0, 6), (5, 8), (12, 13), (3, 7), (1, 17)):  # any panel, any neighbours: the same bits
        assert np.array_equal(tiles.Tiled("bf16d", w)(x[lo:hi]), got[lo:hi])


def test_rows_interleaved_per_4_give_the_row_major_tiles_bits(bf16d, monkeypatch):
    """A layer on bf16d tiles keeps its weights interleaved per 4 rows (one stream a 4-row tile): every call - one
    row, a decode batch, a prefill with quiet panels - gives the row-major tiles' bits, and ``rows`` (an embedding's
    lookup) the stored rows. A row count 4 does not divide keeps the row-major layout; so does FS_BATCH_INVARIANT=0
    (its other paths read rows)."""
    rng = np.random.default_rng(5)
    w = f32_to_bf16(rng.standard_normal((48, 256), dtype=np.float32) * np.exp2(rng.integers(-8, 8, (48, 256))))
    layer = Bf16Linear(w)
    assert layer.interleaved and layer.tiles.kind == "bf16di" and not np.array_equal(layer.w, w)  # type: ignore[union-attr]
    x = rng.standard_normal((FETCHING_ROWS + 5, 256), dtype=np.float32)
    row_major = tiles.Tiled("bf16d", w)
    for m in (1, 2, 3, 4, 7, 8, FETCHING_ROWS + 5):
        assert np.array_equal(layer.matmul(x[:m]).view(np.uint32), row_major(x[:m]).view(np.uint32)), m
    ids = np.array([[0, 5, 47], [46, 1, 3]])
    assert np.array_equal(layer.rows(ids), bf16_to_f32(w[ids]))
    assert not Bf16Linear(w[:46]).interleaved
    monkeypatch.setattr(cpu.SWITCHES, "batch_invariant", False)
    assert not Bf16Linear(w).interleaved


def test_subnormal_values_count_as_zero(bf16d):
    w = np.zeros((1, 32), np.float32)
    x = np.zeros((1, 32), np.float32)
    w[0, :3] = [1.0, 2.0**-70, 2.0**-130]
    x[0, :3] = [2.0**-130, 2.0**-70, 1.0]  # a subnormal activation, a product below float32's range, a subnormal weight
    assert tiles.Tiled("bf16d", f32_to_bf16(w))(x)[0, 0] == 0


def test_the_products_are_the_bf16_rounded_activations_times_the_weights(bf16d):
    rng = np.random.default_rng(1)
    for n, k in ((2048, 1024), (1024, 3072), (37, 256), (1, 32)):
        w = f32_to_bf16(rng.standard_normal((n, k), dtype=np.float32))
        x = rng.standard_normal((5, k), dtype=np.float32)
        got = Bf16Linear(w).matmul(x)
        exact = x.astype(np.float64) @ bf16_to_f32(w).astype(np.float64).T
        assert rel_err(got, bf16_to_f32(to_bf16(x)).astype(np.float64) @ bf16_to_f32(w).astype(np.float64).T) < 1e-5
        assert 1e-5 < rel_err(got, exact) < 1e-2  # bf16 activations: bf16's tolerance, not float32's


def test_the_switch_keeps_float32_activations(bf16d, monkeypatch):
    w = f32_to_bf16(np.random.default_rng(2).standard_normal((64, 1024), dtype=np.float32))
    assert Bf16Linear(w).tiles.kind == "bf16di"  # type: ignore[union-attr]
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", False)  # FS_BF16_GEMM=0
    assert Bf16Linear(w).tiles.kind == "bf16w"  # type: ignore[union-attr]


def test_a_moe_router_keeps_float32_activations(bf16d, tmp_path):
    """Its logits choose experts: a bf16 rounding of its input would flip near-ties (build.py). The experts round."""
    from fs_model import load_model
    from fs_weights import write_random_checkpoint
    from model_helpers import config

    moe = dict(model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
               hidden_size=128, num_hidden_layers=1)  # fmt: skip
    d = write_random_checkpoint(tmp_path / "m", config(**moe), dtype="bfloat16")
    mlp = load_model(d, dtype="bfloat16").blocks[0].mlp
    assert mlp.router.tiles.kind == "bf16w"
    assert mlp.experts[0].gate.tiles.kind == "bf16di"
    assert not Bf16Linear(mlp.router.w, bf16_activations=False).gemm  # nor the bf16 GEMM (FS_BATCH_INVARIANT=0)
