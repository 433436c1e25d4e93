"""A sequence's logits must not depend on what it is computed with: the batch size, its row, the other rows'
lengths and contents (left padding), the prefill chunking, or whether its prefix came from a cache.

float32 (the OpenBLAS reference path) holds this within 1e-5 relative to the largest logit (BLAS may reduce in
another order for another M; the [kernels] issue makes the kept-weight paths bitwise). A kernel that lets padding
leak into a row (a mask off by one, a softmax over padded keys) or mixes rows fails it by orders of magnitude.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fs_model import load_model
from fs_weights import write_random_checkpoint
from model_helpers import config, rel_err

V, TOL = 512, 1e-5


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = write_random_checkpoint(tmp_path_factory.mktemp("inv") / "m", config(), seed=5, dtype="float32")
    return load_model(d, dtype="float32")


def last_logits(model, rows, offset=0, caches=None):
    """Left-padded batch of ``rows``; the last position's logits of every row."""
    L = max(map(len, rows))
    pad = [L - len(r) for r in rows]
    tokens = np.array([[0] * p + r for p, r in zip(pad, rows, strict=True)])
    return model(tokens, offset, caches or model.make_cache(), logits_to_keep=1, pad=pad)[:, -1]


tokens = st.lists(st.integers(0, V - 1), min_size=1, max_size=40)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(seq=tokens, others=st.lists(tokens, max_size=5), where=st.integers(0, 5))
def test_batch_size_row_and_neighbours_do_not_change_a_row(model, seq, others, where):
    solo = last_logits(model, [seq])[0]
    rows = list(others)
    rows.insert(min(where, len(rows)), seq)
    got = last_logits(model, rows)[rows.index(seq)]
    assert rel_err(got, solo) <= TOL


@SETTINGS
@given(seq=st.lists(st.integers(0, V - 1), min_size=2, max_size=40), data=st.data())
def test_prefill_chunking_and_a_cached_prefix_do_not_change_the_logits(model, seq, data):
    solo = last_logits(model, [seq])[0]
    cut = data.draw(st.integers(1, len(seq) - 1))
    caches = model.make_cache()
    last_logits(model, [seq[:cut]], 0, caches)  # the prefix, as a cache hit would have left it
    forked = [c.fork() for c in caches]  # the same prefix shared by a second continuation
    chunked = model(np.array([seq[cut:]]), cut, caches, logits_to_keep=1)[0, -1]
    assert rel_err(chunked, solo) <= TOL
    again = model(np.array([seq[cut:]]), cut, forked, logits_to_keep=1)[0, -1]
    assert np.array_equal(again, chunked)


def test_decode_in_a_batch_equals_decode_alone(model):
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, V, n).tolist() for n in (9, 23, 4, 17, 31, 12, 6, 20, 27, 3, 15, 11)]
    alone = []
    for p in prompts:
        c = model.make_cache()
        last_logits(model, [p], 0, c)
        alone.append(model(np.array([[7]]), len(p), c, logits_to_keep=1)[0, -1])
    for B in (2, 8, 12):  # below, at and above the rows a decode kernel pass takes at once
        c = model.make_cache()
        last_logits(model, prompts[:B], 0, c)
        L = max(map(len, prompts[:B]))
        pad = [L - len(p) for p in prompts[:B]]
        out = model(np.array([[7]] * B), L, c, logits_to_keep=1, pad=pad)[:, -1]
        assert max(rel_err(out[b], alone[b]) for b in range(B)) <= TOL


KEPT = {"bf16": {"dtype": "native"}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """One bf16 checkpoint, loaded in every kept-weight format (the fast paths users run)."""
    from fs_model import cpu

    if not cpu.HAVE_NUMBA:  # the `kernels` session installs fs-model[fast]: there this must not skip
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    d = write_random_checkpoint(tmp_path_factory.mktemp("inv") / "bf16", config(), seed=6, dtype="bfloat16")
    return {name: load_model(d, **kw) for name, kw in KEPT.items()}


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(KEPT))
@SETTINGS
@given(
    seq=st.lists(st.integers(0, V - 1), min_size=2, max_size=40), others=st.lists(tokens, max_size=11), data=st.data()
)
def test_kept_weights_are_bitwise_batch_invariant(kept, fmt, seq, others, data):
    """Bit for bit (the [kernels] issue's contract): batch of up to 12 at any row, neighbours of any length, a prefix
    from a cache then the rest in one call, then a decode step alone and inside the batch."""
    model = kept[fmt]
    solo = last_logits(model, [seq])[0]
    rows = list(others)
    where = data.draw(st.integers(0, len(rows)))
    rows.insert(where, seq)
    assert np.array_equal(last_logits(model, rows)[where], solo)
    cut = data.draw(st.integers(1, len(seq) - 1))
    caches = model.make_cache()
    last_logits(model, [seq[:cut]], 0, caches)
    assert np.array_equal(model(np.array([seq[cut:]]), cut, caches, logits_to_keep=1)[0, -1], solo)
    alone = model(np.array([[3]]), len(seq), caches, logits_to_keep=1)[0, -1]
    batch = model.make_cache()
    last_logits(model, rows, 0, batch)
    L = max(map(len, rows))
    step = model(np.array([[3]] * len(rows)), L, batch, logits_to_keep=1, pad=[L - len(r) for r in rows])
    assert np.array_equal(step[where, -1], alone)


@pytest.mark.kernels
def test_the_fast_non_invariant_path_is_opt_in(kept):
    from fs_model.cpu import SWITCHES

    assert SWITCHES.batch_invariant  # the default: FS_BATCH_INVARIANT=0 opts out
    assert all(type(m.blocks[0].attn).__name__ == "InvariantAttention" for m in kept.values())


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(KEPT))
def test_kept_weights_are_bitwise_batch_invariant_at_qwen3_06b_shapes(tmp_path_factory, fmt):
    """The same contract on the real block shapes (1024 hidden, 16/8 heads of 128, 3072 MLP, 28 layers), where the
    row kernels split into many blocks and threads: a batch of 3 (the prompt in the middle), a 20 + 1 split, and a
    decode step alone vs beside the other two rows."""
    from fs_model import cpu
    from fs_weights import preset

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: `nox -s slow` installs every extra")
    d = tmp_path_factory.getbasetemp() / "qwen3-0.6b-bf16"
    if not d.exists():
        write_random_checkpoint(d, preset("qwen3-0.6b", vocab_size=4096), dtype="bfloat16", seed=2)
    model = load_model(d, **KEPT[fmt])
    rng = np.random.default_rng(3)
    seq, a, b = (rng.integers(0, 4096, n).tolist() for n in (21, 9, 30))
    solo = last_logits(model, [seq])[0]
    assert np.array_equal(last_logits(model, [a, seq, b])[1], solo)
    caches = model.make_cache()
    last_logits(model, [seq[:20]], 0, caches)
    assert np.array_equal(model(np.array([seq[20:]]), 20, caches, logits_to_keep=1)[0, -1], solo)
    alone = model(np.array([[5]]), 21, caches, logits_to_keep=1)[0, -1]
    batch = model.make_cache()
    last_logits(model, [a, seq, b], 0, batch)
    step = model(np.array([[5]] * 3), 30, batch, logits_to_keep=1, pad=[21, 9, 0])
    assert np.array_equal(step[1, -1], alone)
