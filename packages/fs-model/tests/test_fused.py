"""The fused decode-step kernels (numba) against the readable numpy path they replace."""

import numpy as np
import pytest

from fs_kvcache import DenseKVCache
from fs_model import cpu, load_model
from fs_model.cpu import attention, blas, fused
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.decode_step import FusedAttention, FusedBlock
from fs_model.numpy.attention import MASKED, Attention
from fs_model.numpy.norm import rms_norm
from fs_model.numpy.rope import RoPE
from fs_weights import bf16_to_f32, f32_to_bf16, write_random_checkpoint
from model_helpers import KNOBS, config, rel_err

pytestmark = pytest.mark.kernels  # the kernels session installs numba; its absence there is a failure


@pytest.fixture(autouse=True)
def _numba(reference):
    reference("numba")
    assert cpu.HAVE_NUMBA, "numba is not installed: the kernels session installs fs-model[fast]"
    assert cpu.SWITCHES.fused_decode, "the fused decode path is off (FS_REFERENCE_PATH set?)"


def reference_attend(q, K, V, scale, pad):
    """attention.py's arithmetic for one query per row, in float64."""
    G = q.shape[1] // K.shape[1]
    Kr, Vr = np.repeat(K, G, axis=1).astype(np.float64), np.repeat(V, G, axis=1).astype(np.float64)
    s = np.einsum("bhd,bhtd->bht", q.astype(np.float64), Kr) * scale
    s = np.where(np.arange(K.shape[2])[None, None] >= pad[:, None, None], s, MASKED)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bht,bhtd->bhd", p / p.sum(-1, keepdims=True), Vr)


@pytest.mark.parametrize("nh,nkv", [(16, 8), (4, 4), (6, 1)])
def test_attend_matches_the_reference_on_cache_buffers(nh, nkv):
    rng = np.random.default_rng(nh + nkv)
    B, T, D = 3, 37, 64
    cache = DenseKVCache()
    k, v = (rng.standard_normal((B, nkv, T, D), dtype=np.float32) for _ in "kv")
    kbuf, vbuf, n = cache.update_and_fetch_buffers(k, v)  # the cache's own storage, with spare capacity
    assert n == T and kbuf.shape[2] > T and kbuf.flags.c_contiguous
    K, V = cache.key_values
    assert np.shares_memory(kbuf, K)  # the kernel reads the history in place, no copy
    q = rng.standard_normal((B, nh, D), dtype=np.float32)
    pad = np.array([0, 5, T])  # no padding, some, and a row that sees nothing (uniform average)
    want = reference_attend(q, K, V, np.float32(D**-0.5), pad)
    assert rel_err(attention.attend(q, kbuf, vbuf, T, np.float32(D**-0.5), pad), want) < 1e-5
    Kc, Vc = np.ascontiguousarray(K), np.ascontiguousarray(V)  # a paged cache's gathered arrays
    assert rel_err(attention.attend(q, Kc, Vc, T, np.float32(D**-0.5), pad), want) < 1e-5


def test_attend_reads_bf16_bits():
    """A bf16 KV cache holds uint16 bit patterns; the kernel widens each row exactly."""
    rng = np.random.default_rng(5)
    B, nh, nkv, T, D = 2, 16, 8, 300, 128
    Kb, Vb = (f32_to_bf16(rng.standard_normal((B, nkv, T + 20, D), dtype=np.float32)) for _ in "kv")
    q = rng.standard_normal((B, nh, D), dtype=np.float32)
    pad = np.array([0, 7])
    want = reference_attend(q, bf16_to_f32(Kb[:, :, :T]), bf16_to_f32(Vb[:, :, :T]), np.float32(D**-0.5), pad)
    assert rel_err(attention.attend(q, Kb, Vb, T, np.float32(D**-0.5), pad), want) < 1e-5


def test_norm_and_rope_match_the_reference():
    rng = np.random.default_rng(1)
    rope = RoPE(128, 1e6)
    x = rng.standard_normal((2, 8, 128), dtype=np.float32) * 3
    w = rng.standard_normal(128, dtype=np.float32)
    shared = rope.tables(np.array([4097]))  # one position for every row
    per_row = rope.tables(np.array([[[9]], [[4097]]]))  # left-padded batch: each row its own position
    for (cos, sin), pos in ((shared, [4097, 4097]), (per_row, [9, 4097])):
        want = np.stack(
            [rope(rms_norm(x[b][:, None], w, 1e-6), *rope.tables(np.array([p])))[:, 0] for b, p in enumerate(pos)]
        )
        assert rel_err(fused.norm_rope(x, w, 1e-6, cos, sin), want) < 1e-5
    h = rng.standard_normal((2, 1, 1024), dtype=np.float32)
    assert rel_err(fused.rms_norm(h, w.repeat(8), 1e-6), rms_norm(h, w.repeat(8), 1e-6)) < 1e-6


@pytest.mark.parametrize("name", list(KNOBS))
def test_decode_steps_equal_the_reference_path(tmp_path, monkeypatch, name):
    d = write_random_checkpoint(tmp_path / name, config(name), dtype="bfloat16")
    # the fused path runs with the numba matrix kernels; a float32 cache keeps the comparison exact (with a bf16
    # cache, a 1-ulp float32 difference can round K to the neighbouring bf16 value: test_attend_reads_bf16_bits)
    # and float32 activations: on AVX512-BF16 the bf16 tiles round them to bf16 (test_bf16_dot_tiles.py), a 1e-3 move
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", False)
    rows = np.array([[0, 0, 5, 6, 9], [1, 2, 3, 4, 8]])
    got: dict = {}
    for enabled in (False, True):
        monkeypatch.setattr(cpu.SWITCHES, "fused_decode", enabled)  # decided when the model is built
        model = load_model(d, dtype="bfloat16", kv_dtype="float32")
        assert isinstance(model.blocks[0].attn, FusedAttention) == enabled
        assert isinstance(model.blocks[0], FusedBlock) == enabled and isinstance(model.blocks[0].attn, Attention)
        caches = model.make_cache()  # a left-padded batch on dense caches
        model(rows, 0, caches, pad=[2, 0])
        got[enabled] = [model(np.array([[7], [300]]), 5 + i, caches, pad=[2, 0]) for i in range(4)]
        caches = model.make_cache("paged")  # one sequence on paged caches
        model(rows[1:], 0, caches)
        got[enabled] += [model(np.array([[11 * i]]), 5 + i, caches) for i in range(4)]
    for a, b in zip(got[False], got[True], strict=True):
        assert rel_err(b, a) < 1e-5


@pytest.mark.parametrize("bits", [4, 8])
def test_prefill_chunks_the_stored_weights(monkeypatch, bits):
    """A matrix bigger than the scratch buffer (an lm_head) is expanded and multiplied in row chunks."""
    monkeypatch.setattr(blas, "SCRATCH_FLOATS", 5 * 192)  # 5 rows of 192
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", False)  # the float32 path (test_bf16_gemm.py: the bf16 GEMM)
    rng = np.random.default_rng(bits)
    w = rng.standard_normal((23, 192), dtype=np.float32)
    x = rng.standard_normal((blas.SMALL + 3, 192), dtype=np.float32)
    q = quantize_affine(w, bits=bits, group=64)
    assert rel_err(AffineLinear(q)(x), x.astype(np.float64) @ q.dequantize().T) < 1e-5
    b = f32_to_bf16(w)
    assert rel_err(Bf16Linear(b)(x), x.astype(np.float64) @ bf16_to_f32(b).T) < 1e-5


def test_kv_rounding_to_bf16_gives_the_reference_bits():
    """The compiled K/V rounding is fs_weights.f32_to_bf16 bit for bit: ties to even, NaN, infinities, subnormals,
    and a strided [B, heads, S, D] view like the one attention hands it."""
    rng = np.random.default_rng(0)
    u = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x00000001, 0x80000000,
                        0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF], np.uint32)  # fmt: skip
    x = np.concatenate([u, special]).view(np.float32)
    assert np.array_equal(fused.to_bf16(x), f32_to_bf16(x))
    k = rng.standard_normal((2, 5, 8, 16), dtype=np.float32).transpose(0, 2, 1, 3)  # not contiguous
    got = fused.to_bf16(k)
    assert got.shape == k.shape and got.flags.c_contiguous and np.array_equal(got, f32_to_bf16(k))


def test_a_prompts_elementwise_work_over_the_pool_gives_the_bits_of_one_thread():
    """From ``threads.PARALLEL_FLOATS`` floats (a prompt) the norms, RoPE, SiLU and the activations' rounding or
    quantization split their rows over the pool; a decode step's few rows run on one thread. A token must get the
    same bits either way (else a prompt's K/V would differ from the same tokens decoded one by one), so each pair of
    compiled twins is run on the same rows; the dispatcher picks the pool at that size (checked on its outputs
    too)."""
    from fs_model.cpu import integer_tiles, silu_tiles, threads

    rng = np.random.default_rng(3)
    m, H, D = 80, 1024, 128
    assert m * H >= threads.PARALLEL_FLOATS > 8 * H  # a prompt's rows over the pool, a decode batch's not
    x = (rng.standard_normal((m, H)) * 2.0 ** rng.integers(-8, 8, (m, H))).astype(np.float32)
    w = rng.standard_normal(H).astype(np.float32)
    heads = x.reshape(m, H // D, D)
    cos, sin = rng.standard_normal((2, m, D // 2)).astype(np.float32)
    eps = np.float32(1e-6)
    u = rng.standard_normal((m, H)).astype(np.float32)
    G = integer_tiles.GROUP
    runs = {
        "rms": (fused._rms_serial, fused._rms_parallel, fused._rms_rows, (x, w, eps), (np.float32, (m, H))),
        "norm+rope": (fused._norm_rope_serial, fused._norm_rope_parallel, fused._norm_rope,
                      (heads, w[:D], eps, cos, sin), (np.float32, heads.shape)),
        "bf16": (fused._to_bf16_serial, fused._to_bf16_parallel, fused._to_bf16, (x.reshape(-1).view(np.uint32),),
                 (np.uint16, (m * H,))),
        "silu": (silu_tiles._silu_serial, silu_tiles._silu_parallel, silu_tiles._silu_mul,
                 (silu_tiles.kernel(H), x, u), (np.float32, (m, H))),
        "silu (no IR)": (silu_tiles._silu_serial, silu_tiles._silu_parallel, silu_tiles._silu_mul, (0, x, u),
                         (np.float32, (m, H))),
    }  # fmt: skip
    with threads.pinned(2):
        for name, (serial, parallel, pick, args, (dtype, shape)) in runs.items():
            outs = [np.full(shape, 7, dtype) for _ in range(3)]
            for f, out in zip((serial, parallel, pick), outs, strict=True):
                f(*args, out)
            for out in outs[1:]:
                np.testing.assert_array_equal(out, outs[0], err_msg=name)
        q = [(np.empty((m, H), np.int8), np.empty((m, H // G), np.float32), np.empty((m, H // G), np.float32))
             for _ in range(3)]  # fmt: skip
        for f, out in zip((integer_tiles._quantize_serial, integer_tiles._quantize_parallel,
                           integer_tiles._quantize_rows), q, strict=True):  # fmt: skip
            f(x, G, *out)
        for got in q[1:]:
            for a, b in zip(got, q[0], strict=True):
                np.testing.assert_array_equal(a, b, err_msg="int8 activations")
