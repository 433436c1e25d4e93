import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fs_kvcache import KVCacheError, RadixPrefixCache, identity_string, load_prompt_cache, save_prompt_cache

BS = 4


def state_for(tokens, layers=2):
    """K encodes the token at each position, so a wrong slice or a wrong entry shows."""
    k = np.asarray(tokens, np.float32)[None, None, :, None] * np.ones((1, 1, 1, 2), np.float32)
    return [(k + i, -k - i) for i in range(layers)]


def brute_force(entries, tokens):
    best = 0
    for e in entries:
        n = 0
        while n < min(len(e), len(tokens)) and e[n] == tokens[n]:
            n += 1
        best = max(best, n // BS * BS)
    return best


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "match"]), st.lists(st.integers(0, 3), min_size=0, max_size=14)),
        max_size=25,
    )
)
def test_longest_prefix_equals_brute_force(ops):
    cache = RadixPrefixCache("m", block_size=BS, max_bytes=1 << 40)
    inserted = []
    for op, tokens in ops:
        if op == "insert":
            cache.insert(tokens, state_for(tokens))
            if len(tokens) >= BS:
                inserted.append(tokens[: len(tokens) // BS * BS])
        else:
            n, state = cache.match(tokens)
            assert n == brute_force(inserted, tokens)
            if n:
                for i, (k, v) in enumerate(state):
                    assert k[0, 0, :, 0].tolist() == [t + i for t in tokens[:n]]
                    np.testing.assert_array_equal(v, -k)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "pin", "unpin", "match"]), st.lists(st.integers(0, 5), min_size=BS, max_size=16)
        ),
        max_size=30,
    )
)
def test_eviction_keeps_pinned_entries_and_the_budget(ops):
    one = sum(int(k.nbytes + v.nbytes) for k, v in state_for([0] * BS))  # bytes per block of state
    cache = RadixPrefixCache("m", block_size=BS, max_bytes=6 * one)
    pinned = {}
    for op, tokens in ops:
        if op == "insert":
            cache.insert(tokens, state_for(tokens))
        elif op == "pin" and cache.match(tokens)[0]:
            pinned.setdefault(cache.pin(tokens), tokens)
        elif op == "unpin" and pinned:
            cache.unpin(next(iter(pinned)))
            pinned.pop(next(iter(pinned)))
        for key in pinned:
            assert key in cache.entries  # never evicted while pinned
        unpinned_bytes = sum(e.nbytes for e in cache.entries.values() if e.pins == 0)
        assert cache.nbytes == sum(e.nbytes for e in cache.entries.values())
        assert unpinned_bytes <= cache.max_bytes or cache.nbytes - unpinned_bytes > cache.max_bytes


def test_lru_order_and_identity():
    cache = RadixPrefixCache(("qwen3", "tok", "f32"), block_size=2, max_bytes=2 * 64)
    a, b, c = [1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]
    cache.insert(a, state_for(a, 1))  # 2 blocks of 16 bytes x2 (K and V) = 64 bytes
    cache.insert(b, state_for(b, 1))
    assert cache.match(a)[0] == 4  # touch a: b is now least recently used
    cache.insert(c, state_for(c, 1))
    assert cache.match(b)[0] == 0 and cache.match(a)[0] == 4 and cache.match(c)[0] == 4
    with pytest.raises(KVCacheError, match="belongs to"):
        cache.match(a, identity=("other-model", "tok", "f32"))
    with pytest.raises(KVCacheError, match="fewer than"):
        cache.insert([1, 2, 3, 4, 5, 6], state_for([1, 2]))


def test_prompt_cache_file_roundtrip_and_identity(tmp_path):
    tokens = [5, 6, 7]
    state = state_for(tokens, 3)
    ident = identity_string(model="tiny", tokenizer="abc", dtype="float32")
    save_prompt_cache(tmp_path / "p.safetensors", tokens, state, ident)
    got_tokens, got, dtype = load_prompt_cache(tmp_path / "p.safetensors", ident)
    assert dtype == "float32"
    assert got_tokens == tokens and len(got) == 3
    for (k, v), (gk, gv) in zip(state, got, strict=True):
        np.testing.assert_array_equal(k, gk)
        np.testing.assert_array_equal(v, gv)
    with pytest.raises(KVCacheError, match=r"made with model tiny \(this run: other\); refusing"):
        load_prompt_cache(tmp_path / "p.safetensors", identity_string(model="other", tokenizer="abc", dtype="float32"))
    with pytest.raises(
        KVCacheError, match=r"made with dtype float32 \(this run: bfloat16\), other tokenizer; refusing"
    ):
        load_prompt_cache(
            tmp_path / "p.safetensors", identity_string(model="tiny", tokenizer="a" * 64, dtype="bfloat16")
        )
    with pytest.raises(KVCacheError, match="exactly the 4 positions"):
        save_prompt_cache(tmp_path / "q.safetensors", [1, 2, 3, 4], state, ident)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.safetensors"]
    (tmp_path / "bad.safetensors").write_bytes(b"garbage")
    with pytest.raises(KVCacheError, match="not a readable prompt-cache file"):
        load_prompt_cache(tmp_path / "bad.safetensors", ident)


def test_prompt_cache_keeps_a_bf16_cache_as_bits(tmp_path):
    """A numpy bf16 cache holds uint16 bit patterns; the file says bfloat16 and gives the same bits back."""
    tokens = [5, 6]
    state = [(k.view(np.uint32).astype(np.uint16), v.view(np.uint32).astype(np.uint16)) for k, v in state_for(tokens)]
    ident = identity_string(model="tiny", dtype="bfloat16")
    save_prompt_cache(tmp_path / "b.safetensors", tokens, state, ident)
    got_tokens, got, dtype = load_prompt_cache(tmp_path / "b.safetensors", ident)
    assert dtype == "bfloat16" and got_tokens == tokens
    for (k, v), (gk, gv) in zip(state, got, strict=True):
        assert gk.dtype == np.uint16
        np.testing.assert_array_equal(k, gk)
        np.testing.assert_array_equal(v, gv)
