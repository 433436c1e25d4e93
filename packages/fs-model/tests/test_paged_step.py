"""The engine's forward pass (``forward_paged``): many sequences packed in one call, K/V in a block pool.

Contract: each sequence's logits are what ``model(...)`` gives it alone over a dense cache - bit for bit on the
kept-weight (fused, batch-invariant) paths, within float32 rounding on the float32 reference - for every block size
and odd context lengths, with sequences mid-prefill beside sequences decoding, and their K/V left in the pool where
their block tables say. A kernel that reads the wrong slot (block arithmetic off by one row), forgets a block
boundary or lets one sequence see another's keys fails these by orders of magnitude.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fs_kvcache import BlockPool, BlockTable, PagedBatch
from fs_model import cpu, load_model
from fs_weights import write_random_checkpoint
from model_helpers import config, rel_err

V = 512


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = write_random_checkpoint(tmp_path_factory.mktemp("paged") / "m", config(), seed=9, dtype="bfloat16")
    out = {"float32": load_model(d, dtype="float32")}
    if cpu.HAVE_NUMBA:
        out.update(bf16=load_model(d), int4=load_model(d, quantize="int4"))
    return out


def solo_logits(model, seq):
    """Last-position logits of ``seq`` fed in two calls (a prefix, then the rest) over a dense cache."""
    caches = model.make_cache()
    cut = max(1, len(seq) // 2)
    if cut < len(seq):
        model(np.array([seq[:cut]]), 0, caches, logits_to_keep=1)
        return model(np.array([seq[cut:]]), cut, caches, logits_to_keep=1)[0, -1]
    return model(np.array([seq]), 0, caches, logits_to_keep=1)[0, -1]


def run_paged(model, seqs, splits, block_size, num_blocks=256, kv=()):
    """Every sequence's first ``splits[i]`` tokens in one packed step, the rest in a second (a decode step where one
    token remains). Returns the second step's logits [n, V], the pool, the tables, the store. ``kv``: (bits, group
    size) for a pool of codes."""
    pool = BlockPool(num_blocks, block_size)
    store = model.make_kv_store(pool, *kv)
    tables = [BlockTable(pool) for _ in seqs]
    for part in (lambda s, c: s[:c], lambda s, c: s[c:]):
        runs = [(t, part(s, c)) for t, s, c in zip(tables, seqs, splits, strict=True)]
        runs = [(t, toks) for t, toks in runs if toks]
        for t, toks in runs:
            t.reserve(len(toks), store.copy)
        logits = model.forward_paged(PagedBatch.pack(runs), store)
        for t, toks in runs:
            t.advance(len(toks))
    return logits, pool, tables, store


def dense_attention(q, K, V, scale):
    """float64 causal attention of queries q [s, nh, D] at the last s positions of K/V [nkv, T, D]."""
    s, nh, _ = q.shape
    nkv, T, _ = K.shape
    G = nh // nkv
    out = np.empty(q.shape)
    for h in range(nh):
        sc = q[:, h].astype(np.float64) @ K[h // G].astype(np.float64).T * scale  # [s, T]
        sc = np.where(np.arange(T) <= T - s + np.arange(s)[:, None], sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        out[:, h] = (p / p.sum(-1, keepdims=True)) @ V[h // G]
    return out


SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
seqs = st.lists(st.lists(st.integers(0, V - 1), min_size=2, max_size=70), min_size=1, max_size=5)


@pytest.mark.parametrize("fmt", ["float32", "bf16", "int4"])
@SETTINGS
@given(batch=seqs, block_size=st.sampled_from([1, 3, 16, 64]), data=st.data())
def test_each_packed_sequence_gets_its_solo_logits(models, fmt, batch, block_size, data):
    if fmt not in models:
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    model = models[fmt]
    splits = [data.draw(st.integers(1, len(s) - 1)) for s in batch]
    splits = [len(s) - 1 if data.draw(st.booleans()) else c for s, c in zip(batch, splits, strict=True)]  # decoding
    got, _, _, _ = run_paged(model, batch, splits, block_size)
    for i, s in enumerate(batch):
        want = solo_logits(model, s)
        if fmt == "float32":
            assert rel_err(got[i], want) <= 1e-5
        else:
            assert np.array_equal(got[i], want), f"sequence {i} of {len(batch)} (block size {block_size})"


@pytest.mark.kernels
@pytest.mark.parametrize(("fmt", "bits"), [("bf16", 8), ("bf16", 4), ("int4", 4)])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=seqs, block_size=st.sampled_from([1, 3, 16]), data=st.data())
def test_a_pool_of_codes_gives_each_sequence_its_solo_logits_over_a_quantized_cache(
    models, fmt, bits, batch, block_size, data
):
    """``make_kv_store(pool, bits, group_size)`` (the engine's kv_bits): codes written before attention reads them,
    read in place from scattered blocks; each sequence's logits are those of ``model(...)`` alone over a quantized
    dense cache that was quantized from its first position, bit for bit."""
    if fmt not in models:
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    model = models[fmt]
    splits = [data.draw(st.integers(1, len(s) - 1)) for s in batch]
    got, _, _, store = run_paged(model, batch, splits, block_size, kv=(bits, 32))
    assert store.bits == bits and len(store.k[0]) == 3  # codes, scales, biases
    for i, s in enumerate(batch):
        caches = model.make_cache("quantized", bits=bits, group_size=32)
        model(np.array([s[: splits[i]]]), 0, caches, logits_to_keep=1)
        want = model(np.array([s[splits[i] :]]), splits[i], caches, logits_to_keep=1)[0, -1]
        assert np.array_equal(got[i], want), f"sequence {i} of {len(batch)} (block size {block_size})"


def test_the_pool_holds_each_sequences_keys_where_its_table_says(models):
    model = models["float32"]
    rng = np.random.default_rng(0)
    seqs_ = [rng.integers(0, V, n).tolist() for n in (5, 19, 33)]
    _, pool, tables, store = run_paged(model, seqs_, [3, 10, 32], block_size=8)
    for s, t in zip(seqs_, tables, strict=True):
        caches = model.make_cache()
        model(np.array([s]), 0, caches)
        for layer, c in enumerate(caches):
            K, _ = store.gather(layer, np.asarray(t.blocks), len(s))
            assert rel_err(K, c.key_values[0]) <= 1e-5
    assert pool.free_blocks == pool.num_blocks - sum(len(t.blocks) for t in tables)


@pytest.mark.kernels
@pytest.mark.parametrize("block_size", [1, 2, 5, 16, 100])
def test_the_paged_kernel_equals_the_dense_reference_for_odd_contexts(block_size):
    """The fused kernel over scattered blocks (a shuffled table) against the numpy reference over dense K/V."""
    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the fused kernels are tested by `nox -s kernels`")
    from fs_model.cpu import attention

    rng = np.random.default_rng(block_size)
    nh, nkv, D = 4, 2, 32
    ctx = [1, 7, 37, 101]
    news = [1, 3, 1, 20]
    nblocks = sum(-(-c // block_size) for c in ctx)
    order = rng.permutation(nblocks)
    tables = np.full((len(ctx), max(-(-c // block_size) for c in ctx)), -1, np.int64)
    at = 0
    for i, c in enumerate(ctx):
        n = -(-c // block_size)
        tables[i, :n] = order[at : at + n]
        at += n
    K = rng.standard_normal((1, nkv, nblocks * block_size, D)).astype(np.float32)
    Vv = rng.standard_normal((1, nkv, nblocks * block_size, D)).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(news)]).astype(np.int64)
    q = rng.standard_normal((int(starts[-1]), nh, D)).astype(np.float32)
    scale = np.float32(D**-0.5)
    got = attention.attend_rows(q, K, Vv, np.zeros(4, np.int64), tables, block_size, starts, np.array(ctx), scale)
    for i, c in enumerate(ctx):
        p = np.arange(c)
        slots = tables[i, p // block_size] * block_size + p % block_size
        a, b = starts[i], starts[i + 1]
        want = dense_attention(q[a:b], K[0][:, slots], Vv[0][:, slots], scale)
        assert rel_err(got[a:b], want) < 1e-5


@pytest.mark.kernels
@pytest.mark.parametrize("kv", ["float32", "bf16", "8-bit"])
def test_where_the_blocks_lie_moves_no_bit(kv):
    """attention.py reads a run of blocks that lie side by side in memory as one tile (a pool hands out free blocks
    in increasing order); scattered they are read block by block. Each key's arithmetic must be the same either way:
    the same K/V in blocks laid out in order, reversed and in runs of two give the same bits, for decode steps and a
    prefill chunk, over float32, bf16 bits and codes."""
    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the fused kernels are tested by `nox -s kernels`")
    from fs_model.cpu import attention, fused
    from fs_model.numpy.kv_quant import quantize_kv

    rng = np.random.default_rng(5)
    nh, nkv, D, bs = 4, 2, 64, 4
    ctx, news = [150, 37, 9], [1, 20, 1]
    n = [-(-c // bs) for c in ctx]
    logical = [rng.standard_normal((nkv, b * bs, D)).astype(np.float32) for b in n for _ in "kv"]
    starts = np.concatenate([[0], np.cumsum(news)]).astype(np.int64)
    q = rng.standard_normal((int(starts[-1]), nh, D)).astype(np.float32)

    def pool(order: np.ndarray) -> tuple[object, object, np.ndarray]:
        """Every sequence's blocks at the physical ids ``order`` (sequence after sequence), and their tables."""
        tables = np.full((len(ctx), max(n)), -1, np.int64)
        K, Vv = (np.zeros((1, nkv, sum(n) * bs, D), np.float32) for _ in "kv")
        at = 0
        for i in range(len(ctx)):
            tables[i, : n[i]] = order[at : at + n[i]]
            for j, b in enumerate(tables[i, : n[i]]):
                K[0, :, b * bs : (b + 1) * bs] = logical[2 * i][:, j * bs : (j + 1) * bs]
                Vv[0, :, b * bs : (b + 1) * bs] = logical[2 * i + 1][:, j * bs : (j + 1) * bs]
            at += n[i]
        if kv == "bf16":
            return fused.to_bf16(K), fused.to_bf16(Vv), tables
        if kv == "8-bit":
            return quantize_kv(K, 8, 32, False), quantize_kv(Vv, 8, 32, False), tables
        return K, Vv, tables

    total = sum(n)
    layouts = [np.arange(total), np.arange(total)[::-1].copy(), np.arange(total).reshape(-1, 1)]
    pairs = np.arange(total - total % 2).reshape(-1, 2)[::-1].reshape(-1)  # runs of two, the runs reversed
    layouts[2] = np.concatenate([pairs, np.arange(total - total % 2, total)])
    got = []
    for order in layouts:
        K, Vv, tables = pool(order)
        rows = np.zeros(len(ctx), np.int64)
        got.append(attention.attend_rows(q, K, Vv, rows, tables, bs, starts, np.array(ctx), np.float32(D**-0.5)))
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])


@pytest.mark.kernels
def test_codes_of_a_head_no_lanes_divide_are_read_through_the_loops():
    """A head of 12 values takes no IR kernel (neither 8 nor 16 lanes divide it), nor does any head under FS_TILES=0
    or on a CPU without AVX2 + FMA: a quantized cache is then dequantized a tile at a time for the numba loops, and
    gives the bits of its float32 copy. Building that kernel table divided by the zero lanes (a ZeroDivisionError
    from every step over codes: found 2026-12-07 running the attention tests under FS_TILES=0)."""
    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the fused kernels are tested by `nox -s kernels`")
    from fs_model.cpu import attention, attention_calls
    from fs_model.numpy.kv_quant import dequantize_kv, quantize_kv

    D, bits, gs = 12, 8, 4
    table = attention_calls.kernels(D, bits, gs)
    assert not table[attention_calls.CODED :].any()  # no kernels over codes: the loops read them
    rng = np.random.default_rng(12)
    K, V = (rng.standard_normal((2, 2, 9, D)).astype(np.float32) for _ in "kv")
    Kq, Vq = quantize_kv(K, bits, gs, False), quantize_kv(V, bits, gs, False)
    q = rng.standard_normal((2, 4, D)).astype(np.float32)
    scale = np.float32(D**-0.5)
    got = attention.attend(q, Kq, Vq, 9, scale, None)
    want = attention.attend(q, dequantize_kv(Kq, bits, gs), dequantize_kv(Vq, bits, gs), 9, scale, None)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
