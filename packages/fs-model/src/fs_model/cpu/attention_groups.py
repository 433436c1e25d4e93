"""Decode steps of sequences that share a prefix's blocks attend over those blocks together: each tile of the
shared keys and values is read once for all of them (cascade attention, as vLLM and FlashInfer call it).

Why: an engine step decodes up to ``max_batch`` sequences, and requests over one system prompt share its blocks
(the prefix cache: ``fs_kvcache.BlockPrefixCache``). Walked sequence by sequence, each re-reads the prefix: 8
sequences of 704 positions that share 512 spent 11.3-15.6 ms a step in attention (0.6B, 28 layers, two threads;
the same arithmetic from cache takes 6.9).

    _groups(rows, tables, bs, starts, context, pads) -> (lead [n], shared [n])
        lead[i]: the first sequence of i's group (i itself alone); shared[lead]: positions its members share
    _group_head(q, K, V, r, g, G, tables, members, bs, P, starts, context, raw, fns, scale, sbits, out)

A group is two or more sequences decoding one token each (no left padding) whose block tables begin with the
same full blocks of the same pool row; the shared positions are whole blocks, fewer than any member's context.

Contract: a query's bits are ``attention._one_head``'s. Its scores are one call per key of the same kernels, its
max, weights and sum the same row operations (attention_reads.py), and its weighted sum one chain per output lane
over its keys in increasing order - the shared tiles first, then its own - and where tiles end moves no bit
(test_attention_groups.py compares each output bit for bit with the same cache laid out without sharing).
"""

import numpy as np

from . import HAVE_NUMBA

if HAVE_NUMBA:
    from numba import njit

    from .attention_calls import CODED_QUERIES, TILE, _coded, _scores_tile, _weighted_tile
    from .attention_reads import _query_out, _query_weights, _rows, _scratch, _tile, _tile_end

    # No fastmath here, as in attention.py (its comment says why).

    @njit(cache=True)
    def _groups(rows, tables, bs, starts, context, pads):  # pragma: no cover - compiled
        """(lead, shared) as the module docstring says; a sequence in no group leads itself with shared 0."""
        n = context.shape[0]
        lead = np.arange(n)
        shared = np.zeros(n, np.int64)
        for i in range(n):
            if lead[i] != i or starts[i + 1] - starts[i] != 1 or pads[i] != 0 or context[i] <= bs:
                continue
            most = (context[i] - 1) // bs  # full blocks before the block holding i's new position
            for j in range(i + 1, n):
                if lead[j] != j or starts[j + 1] - starts[j] != 1 or pads[j] != 0 or rows[j] != rows[i]:
                    continue
                c = 0
                while c < min(most, (context[j] - 1) // bs) and tables[j, c] == tables[i, c]:
                    c += 1
                if c == 0:
                    continue
                lead[j] = i
                most = c  # the group shares what all its members share
            if most > 0 and np.any(lead[i + 1 :] == i):
                shared[i] = most * bs
        return lead, shared

    @njit(cache=True, inline="always")
    def _scores_of(fns, q, first, g, G, kt, t0, t1, T, s, scale, sbits):  # pragma: no cover - compiled
        """One decoding query's G heads (the rows of s) against keys t0 .. t1-1 (kt); it sees keys 0 .. T-1."""
        _scores_tile(fns, q, first, g, G, kt, t0, t1, 0, 1, 1, T, 0, s, scale, sbits)

    @njit(cache=True, inline="always")
    def _weighted_of(fns, vt, G, t0, t1, T, p, o):  # pragma: no cover - compiled
        """The same query's weighted sums (rows of p and o) over values t0 .. t1-1 (vt)."""
        _weighted_tile(fns, vt, G, t0, t1, 0, 1, 1, T, 0, p, o)

    @njit(cache=True)
    def _own_tiles(values, walk, X, k, i, s, p, o):  # pragma: no cover - compiled
        """Member k's (sequence i's) own positions after the shared ones, tile by tile: its scores over keys X
        (``values`` False, rows of s) or its weighted sums over values X (rows of p and o), read as _one_head reads
        a single query's. ``walk``: the group's fixed arguments (``_group_head`` builds it)."""
        fns, q, r, g, G, tables, starts, context, bs, P, raw, buf, scale, sbits = walk
        trow, T, rows = tables[i], context[i], slice(k * G, (k + 1) * G)
        t0 = P
        while t0 < T:
            t1 = _tile_end(trow, bs, t0, min(T, t0 + TILE))
            at = trow[t0 // bs] * bs + t0 % bs
            if not values and raw:
                _scores_of(fns, q, starts[i], g, G, _rows(X, r, g, at, t1 - t0), t0, t1, T, s[rows], scale, sbits)
            elif not values:
                _scores_of(fns, q, starts[i], g, G, _tile(X, r, g, at, t1 - t0, buf), t0, t1, T, s[rows], scale, sbits)
            elif raw:
                _weighted_of(fns, _rows(X, r, g, at, t1 - t0), G, t0, t1, T, p[rows], o[rows])
            else:
                _weighted_of(fns, _tile(X, r, g, at, t1 - t0, buf), G, t0, t1, T, p[rows], o[rows])
            t0 = t1

    @njit(cache=True)
    def _group_head(
        q, K, V, r, g, G, tables, members, bs, P, starts, context, raw, fns, scale, sbits, out
    ):  # pragma: no cover
        """KV head g for the sequences ``members`` (one query each, at row starts[i] of q): scores over the P shared
        positions tile by tile for all of them, then each one's own keys and its weights; the shared values tile
        by tile for all, then each one's own values and its outputs."""
        n, D = members.shape[0], q.shape[2]
        T = 0
        for i in members:
            T = max(T, context[i])
        s, p, o, buf, mb, lanes = _scratch(n * G, T, D)
        lead = tables[members[0]]
        walk = (fns, q, r, g, G, tables, starts, context, bs, P, raw, buf, scale, sbits)
        # codes: the IR dequantizes per query reading them, buf once for all (attention.py's rule, by members)
        direct = raw and (not _coded(K) or n <= CODED_QUERIES)
        t0 = 0
        while t0 < P:  # the shared keys, each tile read once for every member
            t1 = _tile_end(lead, bs, t0, min(P, t0 + TILE))
            at = lead[t0 // bs] * bs + t0 % bs
            if direct:
                kt = _rows(K, r, g, at, t1 - t0)
                for k in range(n):
                    i, rows = members[k], slice(k * G, (k + 1) * G)
                    _scores_of(fns, q, starts[i], g, G, kt, t0, t1, context[i], s[rows], scale, sbits)
            else:
                kw = _tile(K, r, g, at, t1 - t0, buf)
                for k in range(n):
                    i, rows = members[k], slice(k * G, (k + 1) * G)
                    _scores_of(fns, q, starts[i], g, G, kw, t0, t1, context[i], s[rows], scale, sbits)
            t0 = t1
        for k in range(n):  # each member's own keys (one query: read as _one_head reads them), its weights
            i, Ti = members[k], context[members[k]]
            _own_tiles(False, walk, K, k, i, s, p, o)
            for j in range(k * G, (k + 1) * G):
                _query_weights(fns, s, p, j, 0, Ti, False, mb, lanes)
        t0 = 0
        while t0 < P:  # the shared values, the same way
            t1 = _tile_end(lead, bs, t0, min(P, t0 + TILE))
            at = lead[t0 // bs] * bs + t0 % bs
            if direct:
                vt = _rows(V, r, g, at, t1 - t0)
                for k in range(n):
                    rows = slice(k * G, (k + 1) * G)
                    _weighted_of(fns, vt, G, t0, t1, context[members[k]], p[rows], o[rows])
            else:
                vw = _tile(V, r, g, at, t1 - t0, buf)
                for k in range(n):
                    rows = slice(k * G, (k + 1) * G)
                    _weighted_of(fns, vw, G, t0, t1, context[members[k]], p[rows], o[rows])
            t0 = t1
        for k in range(n):  # each member's own values after the shared ones (one chain a lane), its outputs
            i, Ti = members[k], context[members[k]]
            _own_tiles(True, walk, V, k, i, s, p, o)
            for j in range(G):
                _query_out(fns, p, o, k * G + j, 0, Ti, mb, lanes, out, starts[i], g * G + j)
