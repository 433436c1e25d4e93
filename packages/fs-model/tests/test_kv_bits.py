"""A quantized KV cache (``--kv-bits``) on every backend: the MLX backend against mlx-lm's QuantizedKVCache bit for
bit, the numpy reference within float32 rounding of it, the fused CPU kernels against the reference and equal to
themselves however the prompt is chunked or batched."""

import numpy as np
import pytest

from fs_kvcache import DenseKVCache, QuantizedKVCache
from fs_model import ModelError, load_model
from fs_model.numpy.kv_quant import dequantize_kv, quantize_kv
from fs_weights import write_random_checkpoint
from model_helpers import config, rel_err

IDS = [3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 338, 327]
P = 8  # prompt positions prefilled exact, then the caches are quantized and the rest decoded one by one


def test_the_worked_example_of_kv_quant():
    x = np.zeros((1, 1, 1, 32), np.float32)
    x[..., 0], x[..., 1] = -0.3, 1.2  # the rest 0: one group spanning [-0.3, 1.2]
    codes, scales, biases = quantize_kv(x, 4, 32, bf16=False)
    assert codes.shape == (1, 1, 1, 4) and scales.shape == biases.shape == (1, 1, 1, 1)
    assert np.isclose(scales.item(), -0.1) and np.isclose(biases.item(), 1.2)
    assert int(codes[0, 0, 0, 0]) & 0xFF == 15 | (0 << 4)  # -0.3 -> 15, 1.2 -> 0: the two low nibbles
    np.testing.assert_allclose(dequantize_kv((codes, scales, biases), 4, 32), x, atol=0.05)


def run(model, bits, gs, ids=IDS, prompt=P):
    """Logits [len(ids) - prompt + 1, V]: the prompt exact, then the caches quantized and the rest decoded."""
    caches = model.make_cache()
    out = [model.to_numpy(model(model.tokens_array(ids[:prompt]), 0, caches)[0, -1])]
    caches = [model.quantize_cache(c, bits, gs) for c in caches]
    assert all(isinstance(c, QuantizedKVCache) and c.offset == prompt for c in caches)
    for i, t in enumerate(ids[prompt:]):
        out.append(model.to_numpy(model(model.tokens_array([t]), prompt + i, caches)[0, -1]))
    return np.asarray(out, np.float32)


def mlx_lm_run(path, bits, gs, reference, ids=IDS, prompt=P):
    mx = reference("mlx.core")
    ref, _ = reference("mlx_lm.utils").load_model(path)
    cache = reference("mlx_lm.models.cache").make_prompt_cache(ref)
    out = [ref(mx.array([ids[:prompt]]), cache=cache)[0, -1]]
    cache = [c.to_quantized(group_size=gs, bits=bits) for c in cache]
    out += [ref(mx.array([[t]]), cache=cache)[0, -1] for t in ids[prompt:]]
    return np.asarray([np.array(o.astype(mx.float32)) for o in out])


@pytest.fixture(scope="module")
def f32(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("kvb") / "f32", config(), seed=3, dtype="float32")


@pytest.fixture(scope="module")
def bf16(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("kvb") / "bf16", config(), seed=4, dtype="bfloat16")


@pytest.mark.parity
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_mlx_backend_is_mlx_lms_quantized_cache_bit_for_bit(f32, bf16, reference, bits, dtype):
    path = f32 if dtype == "float32" else bf16
    want = mlx_lm_run(path, bits, 32, reference)
    assert np.array_equal(run(load_model(path, backend="mlx"), bits, 32), want)


@pytest.mark.parity
@pytest.mark.parametrize("bits", [4, 8])
def test_the_numpy_reference_matches_mlx_lm_within_float32_rounding(f32, reference, bits, monkeypatch):
    from fs_model import cpu

    monkeypatch.setattr(cpu.SWITCHES, "fused_decode", False)  # the readable path
    want = mlx_lm_run(f32, bits, 32, reference)
    got = run(load_model(f32, backend="numpy"), bits, 32)
    assert rel_err(got, want) <= 1e-5
    exact = np.asarray(load_model(f32, backend="numpy")(np.array([IDS]), 0, None))[0, P - 1 :]
    assert rel_err(exact, want) > 1e-3  # and the codes did change the answer: this is not the exact cache


def test_a_group_size_that_does_not_divide_head_dim_is_refused(tmp_path):
    d = write_random_checkpoint(tmp_path / "h48", config("head_dim-odd-ratio"), dtype="float32")
    m = load_model(d, backend="numpy")
    with pytest.raises(ModelError, match="must divide head_dim 48"):
        m.make_cache("quantized", bits=4, group_size=32)
    with pytest.raises(ModelError, match="must divide head_dim 48"):
        m.quantize_cache(DenseKVCache(), 8, 64)


KEPT = {"bf16": {"dtype": "native"}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}


def attention_over(q, K, V, T, pad):
    """float64 softmax(q·Kᵀ/√D)·V for q [B, nh, S, D] at positions T-S .. T-1 over K/V [B, nkv, >=T, D], keys before
    each row's pad invisible: what the fused kernel must compute from the values it reads."""
    _, nh, S, D = q.shape
    G = nh // K.shape[1]
    k = np.repeat(K[:, :, :T].astype(np.float64), G, axis=1)
    v = np.repeat(V[:, :, :T].astype(np.float64), G, axis=1)
    s = np.einsum("bhsd,bhtd->bhst", q.astype(np.float64), k) / np.sqrt(D)
    pos, key = np.arange(T - S, T)[:, None], np.arange(T)[None, :]
    visible = (key <= pos)[None, None] & (key[None, None] >= np.asarray(pad)[:, None, None, None])
    s = np.where(visible, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhst,bhtd->bhsd", p / p.sum(-1, keepdims=True), v)


@pytest.mark.kernels
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("S", [1, 5])
def test_the_fused_kernels_read_the_codes_as_the_reference_does(bits, bf16, S):
    """One quantized cache (the reference's codes), read by both: the fused attention must equal float64 attention
    over ``dequantize_kv`` of the same codes within float32 summation order. Given equal codes the two agree on
    every host; comparing whole models instead would also compare the codes each path writes, and a K/V value one
    rounding from a code boundary flips a code on one CPU and not another (2e-4 on an AVX2 host, 0 on AVX-512)."""
    from fs_model.cpu import HAVE_NUMBA, attention

    assert HAVE_NUMBA, "numba is not installed: the kernels session installs fs-model[fast]"
    rng = np.random.default_rng(bits + 10 * S + 100 * bf16)
    B, nh, nkv, D, slots, T, gs = 2, 4, 2, 64, 48, 37, 32
    K, V = (quantize_kv(rng.standard_normal((B, nkv, slots, D), np.float32), bits, gs, bf16) for _ in "kv")
    q = rng.standard_normal((B, nh, S, D), np.float32)
    pad = np.array([0, 3])
    got = attention.attend(q, K, V, T, np.float32(1 / np.sqrt(D)), pad)
    want = attention_over(q, dequantize_kv(K, bits, gs), dequantize_kv(V, bits, gs), T, pad)
    assert rel_err(got, want) <= 1e-5


@pytest.mark.kernels
@pytest.mark.parametrize("bits", [4, 8])
def test_the_fused_path_runs_a_quantized_cache_as_the_reference_does(bf16, bits, monkeypatch):
    """A whole bf16 model, fused against the readable path, the prompt exact and the rest decoded on the codes. The
    two paths compute K/V in different summation orders, so a value one float32 rounding from a code boundary
    takes the neighbouring code: a few codes may differ by one step (an 8-bit step is 1/255 of a group's range,
    a 4-bit one 1/15), which moves logits by ~1e-4 relative. Reading the codes wrongly (a nibble order, a group's
    scale, a position's slot) moves them by O(1): the tolerance sits between the two."""
    from fs_model import cpu

    assert cpu.HAVE_NUMBA, "numba is not installed: the kernels session installs fs-model[fast]"
    fast = run(load_model(bf16, dtype="native"), bits, 32)
    monkeypatch.setattr(cpu.SWITCHES, "fused_decode", False)
    assert rel_err(fast, run(load_model(bf16, dtype="native"), bits, 32)) <= 1e-2


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(KEPT))
def test_a_quantized_cache_keeps_the_fused_paths_bit_for_bit_contracts(bf16, fmt):
    """Quantized from the first position: one prefill == two chunks == a decode step, alone or in a batch."""
    model = load_model(bf16, **KEPT[fmt])

    def last(rows, caches, offset=0, pad=None):
        return np.asarray(model(np.array(rows), offset, caches, logits_to_keep=1, pad=pad))[:, -1]

    q = dict(bits=4, group_size=32)
    whole = last([IDS], model.make_cache("quantized", **q))[0]
    caches = model.make_cache("quantized", **q)
    last([IDS[:5]], caches)
    assert np.array_equal(last([IDS[5:]], caches, 5)[0], whole)
    caches = model.make_cache("quantized", **q)
    last([IDS[:-1]], caches)
    assert np.array_equal(last([IDS[-1:]], caches, len(IDS) - 1)[0], whole)
    other = [7, 8, 9]
    pad = [0, len(IDS) - len(other)]
    batch = last([IDS, [0] * pad[1] + other], model.make_cache("quantized", **q), pad=pad)
    assert np.array_equal(batch[0], whole)


@pytest.mark.kernels
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("bf16", [False, True])
def test_the_compiled_quantizer_gives_the_references_bits(bits, gs, bf16):
    """The decode step quantizes its new K/V in one compiled call; its codes, scales and biases must be the
    reference's (fs_weights' rule = mx.quantize's), edge cases included: an all-zero group, a constant one, a
    group whose edge of larger magnitude is its minimum, integers, tiny and large magnitudes."""
    from fs_model.cpu import fused

    rng = np.random.default_rng(bits * gs + bf16)
    x = rng.standard_normal((2, 8, 5, 128), dtype=np.float32)
    x *= rng.choice([1e-3, 1.0, 100.0], (2, 8, 5, 1)).astype(np.float32)
    x[0, 0, 0], x[0, 1, 0], x[0, 2, 0, :64], x[1, 0, 1] = 0.0, 3.0, -1.0, rng.integers(-3, 4, 128)
    for got, want in zip(fused.quantize_kv(x, bits, gs, bf16), quantize_kv(x, bits, gs, bf16), strict=True):
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
