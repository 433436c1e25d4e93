"""A decoder block's step in two compiled calls (cpu/compiled_block.py) gives the bits of the same block run one
kernel call at a time from Python (``InvariantBlock``): every logit of prefills, decode steps, a chunked prompt, a
left-padded batch and a cache-less call, on every kept format and both K/V dtypes. A mistake anywhere in the
compiled halves (a column offset of q | k | v, K/V written to the wrong slot, the residual added twice, RoPE tables
of another row) changes logits by far more than a bit. Steps it does not cover (a cache gathered from blocks, a
rotating cache's chunk) take the Python path, and give its bits; a quantized cache or pool (``--kv-bits``) runs
compiled, its codes written between the halves."""

import numba
import numpy as np
import pytest

from fs_model import load_model
from fs_model.cpu import compiled_block, tiles
from fs_weights import preset, write_random_checkpoint
from model_helpers import BASE, cpu_name, need_tiles

pytestmark = pytest.mark.kernels

# the tiles need k a multiple of 128 for 4-bit groups of 64 (tiles.applies): hidden 256, MLP 512, heads of 64
SHAPES = dict(hidden_size=256, intermediate_size=512, head_dim=64, num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("cb") / "m", preset("tiny", **{**BASE, **SHAPES}), seed=3)


@pytest.fixture(autouse=True)
def _tiles(reference):
    reference("numba")
    need_tiles("the blocks keep the Python path")
    if not tiles.applies("bf16", 256):
        pytest.skip(f"{cpu_name()} has no AVX2 + FMA: no tiles, so the blocks keep the Python path")


def run(model, compiled, **cache_kw):
    """Every logit of a scripted session: a prefill, decode steps, a chunk, a padded batch, a cache-less call."""
    for block in model.blocks:
        block.plan = block.compiled_plan if compiled else None
    ids = [(37 * i + 11) % 512 for i in range(40)]
    c = model.make_cache(**cache_kw)
    got = [model(np.array([ids[:21]]), 0, c)]
    got += [model(np.array([[ids[21 + i]]]), 21 + i, c) for i in range(4)]
    got.append(model(np.array([ids[25:31]]), 25, c))  # a chunk of 6 after the cached 25
    if cache_kw.get("kind") == "paged":  # a paged cache holds one sequence
        return got
    b = model.make_cache(**cache_kw)
    got.append(model(np.array([ids[:9], [0, 0, 0, *ids[:6]]]), 0, b, pad=[0, 3]))
    got.append(model(np.array([[ids[9]], [ids[6]]]), 9, b))
    got.append(model(np.array([ids[:7]]), 0, None))
    return got


@pytest.mark.parametrize("fmt", ["bfloat16", "int8", "int4"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float32"])
def test_the_compiled_block_gives_the_python_blocks_bits(checkpoint, monkeypatch, fmt, kv_dtype):
    kw = {"dtype": "bfloat16"} if fmt == "bfloat16" else {"quantize": fmt}
    model = load_model(checkpoint, kv_dtype=kv_dtype, **kw)
    for block in model.blocks:
        block.compiled_plan = block.plan
        assert block.plan is not None, "every layer's matrices run on the tiles: the compiled block applies"
    calls = []
    inner = compiled_block._attention_in
    monkeypatch.setattr(compiled_block, "_attention_in", lambda *a: calls.append(1) or inner(*a))
    fast = run(model, compiled=True)
    assert len(calls) == 9 * len(model.blocks)  # every step above took the compiled halves
    slow = run(model, compiled=False)
    for i, (a, b) in enumerate(zip(fast, slow, strict=True)):
        assert a.shape == b.shape and np.array_equal(a, b), (fmt, kv_dtype, i, float(np.abs(a - b).max()))


def test_one_compiled_variant_of_each_half_whatever_the_batch_or_the_stored_dtype(checkpoint, tmp_path, monkeypatch):
    """numba compiles a function once per argument types, and a read-only array is another type than a writable
    one: RoPE rows that are the tables' own view for one row and a copy for two, or norms that are a float32 file's
    pages and a bf16 file's converted copy, made a batch of two (or the other file) compile each half again, seconds
    in the middle of a session. One model of each stored dtype, one- and two-row steps: one type of each half."""
    f32 = write_random_checkpoint(tmp_path / "f32", preset("tiny", **{**BASE, **SHAPES}), seed=3, dtype="float32")
    seen: dict[str, set[tuple[object, ...]]] = {"in": set(), "out": set()}
    for half, name in (("in", "_attention_in"), ("out", "_attention_out")):
        inner = getattr(compiled_block, name)

        def spy(*a, _inner=inner, _half=half):  # type: ignore[no-untyped-def]
            seen[_half].add(tuple(numba.typeof(x) for x in a))
            return _inner(*a)

        monkeypatch.setattr(compiled_block, name, spy)
    for path in (checkpoint, f32):
        model = load_model(path, dtype="bfloat16", kv_dtype="bfloat16")
        for block in model.blocks:
            block.compiled_plan = block.plan
        run(model, compiled=True)
    assert len(seen["in"]) == 1 and len(seen["out"]) == 1, seen


QUANTIZED = [{"kind": "quantized", "bits": b, "group_size": 32} for b in (8, 4)]


@pytest.mark.parametrize("cache_kw", [*QUANTIZED, {"kind": "paged"}, {"kind": "rotating", "max_size": 12}])
def test_caches_it_covers_in_part_or_not_at_all_give_the_python_paths_bits(checkpoint, monkeypatch, cache_kw):
    """quantized caches: every step compiled (their codes read in the attention tiles); paged (gathered) caches:
    never compiled; rotating: its decode steps (its chunks see a sliding window)."""
    model = load_model(checkpoint, quantize="int4")
    for block in model.blocks:
        block.compiled_plan = block.plan
    calls = []
    inner = compiled_block._attention_in
    monkeypatch.setattr(compiled_block, "_attention_in", lambda *a: calls.append(1) or inner(*a))
    fast = run(model, compiled=True, **cache_kw)
    if cache_kw["kind"] == "quantized":
        assert len(calls) == 9 * len(model.blocks)
    slow = run(model, compiled=False, **cache_kw)
    for a, b in zip(fast, slow, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize(("fmt", "kv"), [("bfloat16", ()), ("int4", ()), ("bfloat16", (8, 32)), ("int4", (4, 32))])
def test_the_engines_packed_steps_run_compiled_with_the_same_bits(checkpoint, monkeypatch, fmt, kv):
    """forward_paged: sequences mid-prefill beside one decoding, K/V in a block pool of 8-slot blocks (``kv``: a
    pool of codes, the engine's kv_bits); the compiled halves write each token's K/V to its slot and read every
    sequence's blocks as the Python path does."""
    from test_paged_step import run_paged

    model = load_model(checkpoint, **({"dtype": "bfloat16"} if fmt == "bfloat16" else {"quantize": fmt}))
    plans = [b.plan for b in model.blocks]
    assert all(p is not None for p in plans)
    seqs = [[(13 * i + j) % 512 for i in range(n)] for j, n in enumerate((19, 6, 30))]
    calls = []
    inner = compiled_block._attention_out
    monkeypatch.setattr(compiled_block, "_attention_out", lambda *a: calls.append(1) or inner(*a))
    fast, _, _, fast_store = run_paged(model, seqs, [11, 5, 29], block_size=8, kv=kv)
    assert len(calls) == 2 * len(model.blocks)
    for b in model.blocks:
        b.plan = None
    slow, _, _, slow_store = run_paged(model, seqs, [11, 5, 29], block_size=8, kv=kv)
    assert np.array_equal(fast, slow)

    def parts(store):  # every array the pool keeps: K and V of each layer, or their codes, scales and biases
        return [p for side in store.k + store.v for p in (side if isinstance(side, tuple) else (side,))]

    assert all(np.array_equal(a, b) for a, b in zip(parts(fast_store), parts(slow_store), strict=True))


@pytest.mark.parametrize("fmt", ["bfloat16", "int4"])
def test_moe_layers_run_their_attention_compiled_with_the_same_bits(tmp_path, fmt):
    """Qwen3-MoE: each layer's attention, router, routing and chosen experts in the compiled halves (routing.py,
    experts.py) with the bits of the Python path's calls; a dense layer (mlp_only_layers) beside the sparse one."""
    moe = dict(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128)
    c = preset("tiny", **{**BASE, **SHAPES, **moe, "mlp_only_layers": [0]})
    model = load_model(write_random_checkpoint(tmp_path / "moe", c, seed=4), **(
        {"dtype": "bfloat16"} if fmt == "bfloat16" else {"quantize": fmt}))  # fmt: skip
    for block in model.blocks:
        assert block.plan is not None
        block.compiled_plan = block.plan
    assert [b.plan.fused_mlp for b in model.blocks] == [True, False] and model.blocks[1].plan.moe is not None
    for a, b in zip(run(model, compiled=True), run(model, compiled=False), strict=True):
        assert np.array_equal(a, b)
