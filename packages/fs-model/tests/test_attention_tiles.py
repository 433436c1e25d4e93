"""attention_tiles.py's IR kernels: a key's score and a weight do not depend on the call they come in, the
exponential is exp to 2 ulp, and attention reading bf16 bits in the IR equals attention over the widened floats."""

import ctypes

import numpy as np
import pytest

from fs_model import cpu
from fs_model.cpu import attention, attention_calls, softmax_tiles
from fs_model.cpu.threads import pinned
from model_helpers import need_tiles

pytestmark = pytest.mark.kernels

I64 = ctypes.c_int64


@pytest.fixture(autouse=True)
def _numba(reference):
    reference("numba")
    assert cpu.HAVE_NUMBA, "numba is not installed: the kernels session installs fs-model[fast]"


def ir(D: int) -> np.ndarray:
    need_tiles("attention runs its numba loops (test_fused.py, test_paged_step.py)")
    fns = attention_calls.kernels(D)
    if not cpu.FEATURES.issuperset(("avx2", "fma")):  # pragma: no cover - every CI host has AVX2
        pytest.skip("this CPU has no AVX2 + FMA: attention runs its numba loops (tested by test_fused.py)")
    assert attention_calls.lanes(D) in (8, 16) and fns[0] != 0, "the IR kernels did not compile on an AVX2 CPU"
    return fns


def call(address: int, *args: int) -> None:
    ctypes.CFUNCTYPE(None, *[I64] * len(args))(int(address))(*map(int, args))


def bits(x: float) -> int:
    return int(np.array([x], np.float32).view(np.int32)[0])


@pytest.mark.parametrize("D", [128, 64])
def test_a_keys_score_is_the_same_whatever_group_or_call_it_comes_in(D):
    """The transposing tree must add every slot's lanes in hsum's order: a key scored alone, first or last of a
    group, or in a call that starts elsewhere gets the same bits (the decode/prefill equality rests on it)."""
    fns = ir(D)
    rng = np.random.default_rng(D)
    n = 29  # several groups and a partial one on both widths
    q = rng.standard_normal((2, D), dtype=np.float32)
    k = rng.standard_normal((n, D), dtype=np.float32)
    scale = np.float32(D**-0.5)

    def scores(R: int, first: int, count: int) -> np.ndarray:
        s = np.full((R, n + 16), np.nan, np.float32)
        at = s.ctypes.data + 4 * first
        call(
            fns[2 - R], q.ctypes.data, 4 * D, k.ctypes.data + 4 * D * first, 4 * D, count, at, s.strides[0], bits(scale)
        )
        return s[:, first : first + count]

    whole = scores(2, 0, n)
    want = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    assert np.abs(whole - want).max() < 1e-5 * np.abs(want).max()
    for first in range(n):  # each key alone, and every suffix: a key in every slot of a group
        assert np.array_equal(scores(2, first, 1), whole[:, first : first + 1])
        assert np.array_equal(scores(2, first, n - first), whole[:, first:])
    assert np.array_equal(scores(1, 3, 11)[0], whole[0, 3:14])  # one head a call: the same chain


@pytest.mark.parametrize("n", [1, 7, 16, 33, 150])
def test_a_rows_max_and_sum_follow_their_written_order(n):
    """row_reduce: the max exactly np.max; the sum W lanes (lane l: x[l], x[W + l], ...), the lanes by halves, then
    the tail one by one, in float32 - emulated here; a sum reordered by a compiler differs in the last bits."""
    fns = ir(128)
    W = attention_calls.lanes(128)
    x = np.random.default_rng(n).standard_normal(n + 16, dtype=np.float32) * 3  # + padding the kernel must not read
    out = np.zeros(2, np.float32)
    call(fns[10], x.ctypes.data, n, out.ctypes.data)
    call(fns[11], x.ctypes.data, n, out.ctypes.data + 4)
    assert out[0] == np.max(x[:n])
    full = n // W * W
    lanes = np.zeros(W, np.float32)
    for t in range(0, full, W):
        lanes = lanes + x[t : t + W]
    while lanes.size > 1:
        lanes = lanes[: lanes.size // 2] + lanes[lanes.size // 2 :]
    want = lanes[0]
    for t in range(full, n):
        want = np.float32(want + x[t])
    assert out[1] == want


def test_exp_is_within_2_ulp_and_zero_below_the_floor():
    fns = ir(128)
    x = np.concatenate([np.linspace(-87.0, 0.0, 100_003, dtype=np.float32), np.float32([0.0, -1e-30, -88.0, -200.0])])
    n = len(x)
    s = np.zeros(n + 16, np.float32)
    s[:n] = x + np.float32(3.0)
    p = np.full(n + 16, np.nan, np.float32)
    call(fns[4], s.ctypes.data, n, bits(3.0), p.ctypes.data)
    want = np.exp((s[:n] - np.float32(3.0)).astype(np.float64))
    normal = want > 1.2e-38
    ulp = np.abs(p[:n][normal] - want[normal]) / np.spacing(want[normal].astype(np.float32)).astype(np.float64)
    assert ulp.max() <= 2.0, f"exp is {ulp.max():.2f} ulp off"
    assert np.all(p[:n][x < softmax_tiles.EXP_FLOOR] == 0.0)


@pytest.mark.parametrize("S", [1, 5, 40])
def test_bf16_bits_read_in_the_ir_equal_the_widened_floats(S):
    """The IR widens a bf16 cache's rows as it loads them; the result must be the very bits of attention over the
    same values stored as float32 (the widening is exact), for a decode step, a verify pass and a long chunk."""
    ir(128)
    rng = np.random.default_rng(S)
    nh, nkv, T, D = 16, 8, 150, 128
    q = rng.standard_normal((2, nh, S, D), dtype=np.float32)
    f = rng.standard_normal((2, 2, nkv, T + 9, D), dtype=np.float32)
    Kb, Vb = ((x.view(np.uint32) >> 16).astype(np.uint16) for x in f)
    Kf, Vf = ((b.astype(np.uint32) << 16).view(np.float32) for b in (Kb, Vb))
    pad = np.array([0, 7])
    got = attention.attend(q, Kb, Vb, T, np.float32(D**-0.5), pad)
    assert np.array_equal(got, attention.attend(q, Kf, Vf, T, np.float32(D**-0.5), pad))


def test_queries_walking_the_keys_together_equal_each_query_alone():
    """Up to QUERIES queries of a sequence share each tile; each must get the bits it gets as a decode step."""
    ir(128)
    rng = np.random.default_rng(3)
    nh, nkv, T, D, S = 16, 8, 200, 128, 21  # more queries than one group walks together
    q = rng.standard_normal((1, nh, S, D), dtype=np.float32)
    K, V = (
        (rng.standard_normal((1, nkv, T, D), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16) for _ in "kv"
    )
    scale = np.float32(D**-0.5)
    with pinned(2):
        chunk = attention.attend(q, K, V, T, scale, None)
    for i in (0, 15, 16, S - 1):
        with pinned(1):
            alone = attention.attend(q[:, :, i], K, V, T - S + i + 1, scale, None)
        assert np.array_equal(chunk[:, :, i], alone), f"query {i}"


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("S", [1, 5, 40])
def test_codes_read_in_the_ir_equal_the_dequantized_floats(bits, gs, S):
    """A quantized cache's codes go from memory to the FMAs (attention_codes.py): every value must be the float32
    ``scale · code + bias`` a dequantized copy holds - a nibble taken in the wrong order, a group's scale from the
    wrong slot or a fused multiply-add moves the bits - for a decode step, a verify pass and a long chunk."""
    from fs_model.numpy.kv_quant import quantize_kv

    D = 128
    ir(D)
    assert attention_calls.kernels(D, bits, gs)[attention_calls.CODED] != 0, "the kernels over codes did not compile"
    rng = np.random.default_rng(bits * gs + S)
    nh, nkv, T = 16, 8, 150
    q = rng.standard_normal((2, nh, S, D), dtype=np.float32)
    K, V = (quantize_kv(rng.standard_normal((2, nkv, T + 9, D), dtype=np.float32), bits, gs, False) for _ in "kv")

    def floats(c: tuple[np.ndarray, ...]) -> np.ndarray:  # the codes, unpacked in numpy: code d is bits d·bits ..
        codes, scales, biases = c
        per = 32 // bits
        shifts = (np.arange(per, dtype=np.uint32) * bits)[None]
        unpacked = (codes[..., None] >> shifts) & np.uint32((1 << bits) - 1)
        values = unpacked.reshape(*codes.shape[:-1], D).astype(np.float32)
        return np.repeat(scales, gs, -1) * values + np.repeat(biases, gs, -1)  # two float32 roundings

    pad = np.array([0, 7])
    got = attention.attend(q, K, V, T, np.float32(D**-0.5), pad)
    assert np.array_equal(got, attention.attend(q, floats(K), floats(V), T, np.float32(D**-0.5), pad))


@pytest.mark.parametrize("kv", ["f32", "bf16", "q8g32", "q4g64"])
def test_every_line_of_every_row_read_is_hinted_ahead(kv):
    """A decode step reads its cache as many short runs, one per sequence and KV head, faster than the hardware
    prefetcher follows them (attention_tiles.AHEAD says by how much): each step of the scores and weighted loops
    hints each line of each row it reads, AHEAD bytes on. A hint of the row itself, or of one line a row, would
    change no bit: only this catches it."""
    from fs_model.cpu import attention_tiles as at

    D, W, NK, C = 128, 16, 8, 8
    stored = {"f32": 4 * D, "bf16": 2 * D, "q8g32": D, "q4g64": D // 2}[kv]
    for text, rows in ((at.scores(2, D, W, NK, kv), NK), (at.weighted(2, C, W, kv), 1)):
        hints = [line for line in text.splitlines() if "@llvm.prefetch" in line]
        offsets = [int(line.rsplit(", ", 1)[1]) for line in text.splitlines() if line.strip().startswith("%p")
                   and ".a = add i64" in line and ("%pk" in line or "%pv" in line)]  # fmt: skip
        assert len(hints) == rows * max(1, stored // 64), (kv, len(hints))
        assert sorted(set(offsets)) == [at.AHEAD + 64 * j for j in range(max(1, stored // 64))]
