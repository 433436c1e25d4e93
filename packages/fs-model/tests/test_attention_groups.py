"""Decode steps over a shared prefix's blocks (cpu/attention_groups.py) give each query the bits it gets alone.

The plausible mistakes: a member's weighted sum started on its own keys before the shared ones (another order of
one chain), a group sharing a block one member does not hold (another sequence's keys), the shared length counted
past a member's context, a buffer of dequantized codes reused by the wrong member."""

import numpy as np
import pytest

from fs_model import cpu

pytestmark = pytest.mark.kernels

nh, nkv, D, bs = 4, 2, 64, 4


def _kernels():  # type: ignore[no-untyped-def]
    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the fused kernels are tested by `nox -s kernels`")
    from fs_model.cpu import attention, attention_groups, fused
    from fs_model.numpy.kv_quant import quantize_kv

    return attention, attention_groups, fused, quantize_kv


def _stored(kv: str, K: np.ndarray, V: np.ndarray):  # type: ignore[no-untyped-def]
    _, _, fused, quantize_kv = _kernels()
    if kv == "bf16":
        return fused.to_bf16(K), fused.to_bf16(V)
    if kv in ("8-bit", "4-bit"):
        bits = int(kv[0])
        return quantize_kv(K, bits, 32, False), quantize_kv(V, bits, 32, False)
    return K, V


def _case(members: int, shared_blocks: int, seed: int):  # type: ignore[no-untyped-def]
    """Sequences whose tables begin with the same ``shared_blocks`` blocks (their own blocks after them, one
    sequence's interleaved with the next's), and the same keys and values laid out with no block shared."""
    rng = np.random.default_rng(seed)
    ctx = [shared_blocks * bs + int(rng.integers(1, 5 * bs)) for _ in range(members)]
    n = [-(-c // bs) for c in ctx]
    own = [b - shared_blocks for b in n]
    total = shared_blocks + sum(own)
    K, V = (rng.standard_normal((1, nkv, total * bs, D)).astype(np.float32) for _ in "kv")
    tables = np.full((members, max(n)), -1, np.int64)
    nxt = shared_blocks
    for j in range(max(own)):  # the members' own blocks handed out in turn, as lockstep decoding does
        for i in range(members):
            if j < own[i]:
                tables[i, shared_blocks + j] = nxt
                nxt += 1
    tables[:, :shared_blocks] = np.arange(shared_blocks)
    # the same per-sequence data, every block its own copy
    alone = np.full_like(tables, -1)
    K2, V2 = (np.zeros((1, nkv, sum(n) * bs, D), np.float32) for _ in "kv")
    at = 0
    for i in range(members):
        for j in range(n[i]):
            src = slice(tables[i, j] * bs, (tables[i, j] + 1) * bs)
            K2[0, :, at * bs : (at + 1) * bs], V2[0, :, at * bs : (at + 1) * bs] = K[0, :, src], V[0, :, src]
            alone[i, j] = at
            at += 1
    q = rng.standard_normal((members, nh, D)).astype(np.float32)
    return q, (K, V, tables), (K2, V2, alone), np.array(ctx, np.int64)


@pytest.mark.parametrize("kv", ["float32", "bf16", "8-bit", "4-bit"])
@pytest.mark.parametrize("members", [2, 5])  # codes: up to 2 read in the IR, more through one dequantized tile
def test_a_shared_prefix_read_once_gives_each_query_its_own_bits(kv, members):
    attention, groups, _, _ = _kernels()
    q, shared, alone, ctx = _case(members, shared_blocks=37, seed=members)
    rows, starts, scale = np.zeros(members, np.int64), np.arange(members + 1, dtype=np.int64), np.float32(D**-0.5)
    lead, P = groups._groups(rows, shared[2], bs, starts, ctx, np.zeros(members, np.int64))
    assert list(lead) == [0] * members and P[0] == 37 * bs  # one group: the test reads the grouped path
    got = attention.attend_rows(q, *_stored(kv, *shared[:2]), rows, shared[2], bs, starts, ctx, scale)
    want = attention.attend_rows(q, *_stored(kv, *alone[:2]), rows, alone[2], bs, starts, ctx, scale)
    lead, P = groups._groups(rows, alone[2], bs, starts, ctx, np.zeros(members, np.int64))
    assert list(lead) == list(range(members)) and not P.any()  # ... and the reference the one sequence by one
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_groups_share_only_what_every_member_holds():
    """Who joins a group, and how much it shares: whole blocks held by all its members before each one's newest
    position; a prefill chunk, a padded row or a sequence of another pool row walks alone."""
    _, groups, _, _ = _kernels()
    tables = np.array(
        [
            [0, 1, 2, 3, 9],  # the leader
            [0, 1, 2, 7, 8],  # shares 3 blocks
            [0, 1, 5, 6, -1],  # shares 2: the group shares 2
            [0, 1, 2, 3, 4],  # a prefill chunk of 2 queries: alone
            [4, 1, 2, 3, 5],  # another first block: alone
        ],
        np.int64,
    )
    ctx = np.array([18, 20, 15, 20, 20], np.int64)
    starts = np.array([0, 1, 2, 3, 5, 6], np.int64)
    rows, pads = np.zeros(5, np.int64), np.zeros(5, np.int64)
    lead, P = groups._groups(rows, tables, bs, starts, ctx, pads)
    assert list(lead) == [0, 0, 0, 3, 4] and list(P) == [2 * bs, 0, 0, 0, 0]
    # the newest position's block is never shared: a context of 9 holds 2 full blocks before it
    lead, P = groups._groups(rows[:2], tables[:2], bs, starts[:3], np.array([9, 20], np.int64), pads[:2])
    assert list(lead) == [0, 0] and P[0] == 2 * bs
    lead, _ = groups._groups(rows[:2], tables[:2], bs, starts[:3], ctx[:2], np.array([0, 1], np.int64))
    assert list(lead) == [0, 1]  # left padding: a dense cache's row, alone
    lead, _ = groups._groups(np.array([0, 1], np.int64), tables[:2], bs, starts[:3], ctx[:2], pads[:2])
    assert list(lead) == [0, 1]  # another row of K/V: nothing shared
