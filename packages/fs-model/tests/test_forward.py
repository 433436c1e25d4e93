import json

import numpy as np
import pytest

from fs_model import ModelError, load_model
from fs_weights import write_random_checkpoint
from model_helpers import KNOBS, config, rel_err


@pytest.fixture(scope="module")
def model(checkpoints):
    return load_model(checkpoints["untied-gqa2"])


IDS = [5, 17, 300, 2, 499, 64, 64, 1, 8, 250]


def test_shapes_and_trace(model):
    logits = model.forward(IDS)
    assert logits.shape == (10, 512) and logits.dtype == np.float32
    t = model.trace(IDS)
    assert list(t) == ["embedding", "block.0", "block.1", "final_norm", "logits"]
    assert t["embedding"].shape == t["block.1"].shape == t["final_norm"].shape == (10, 64)
    np.testing.assert_array_equal(t["logits"], logits)


@pytest.mark.parametrize("kind", ["dense", "paged"])
@pytest.mark.parametrize("name", list(KNOBS))
def test_cached_equals_uncached(checkpoints, name, kind):
    m = load_model(checkpoints[name])
    full = m.forward(IDS)
    cache = m.make_cache(kind, block_size=4)
    steps = [m.forward(IDS[:4], cache)] + [m.forward([t], cache) for t in IDS[4:]]
    assert cache[0].offset == len(IDS)
    assert rel_err(np.concatenate(steps), full) < 1e-5


@pytest.mark.parametrize("kind", ["dense", "paged"])
def test_cached_after_trim_and_fork(model, kind):
    full = model.forward(IDS)
    cache = model.make_cache(kind, block_size=4)
    model.forward(IDS[:7], cache)
    for c in cache:
        c.trim(2)
    assert rel_err(model.forward(IDS[5:], cache), full[5:]) < 1e-5
    base = model.make_cache(kind, block_size=4)
    model.forward(IDS[:6], base)
    a, b = [c.fork() for c in base], [c.fork() for c in base]
    alt = [9, 9, 9]
    out_a = model.forward(alt, a)
    out_b = model.forward(IDS[6:], b)
    assert rel_err(out_a, model.forward(IDS[:6] + alt)[6:]) < 1e-5
    assert rel_err(out_b, full[6:]) < 1e-5


def test_call_contract_batch_and_logits_to_keep(model):
    tokens = np.array([IDS, IDS[::-1]])
    out = model(tokens, 0, None)
    assert out.shape == (2, 10, 512)
    np.testing.assert_allclose(out[1], model.forward(IDS[::-1]), rtol=1e-5, atol=1e-5)
    last = model(tokens, 0, None, logits_to_keep=1)
    assert last.shape == (2, 1, 512)
    np.testing.assert_allclose(last[:, 0], out[:, -1], rtol=1e-5, atol=1e-5)
    caches = model.make_cache()
    model(np.array([IDS[:5]]), 0, caches, logits_to_keep=1)
    nxt = model(np.array([[IDS[5]]]), 5, caches, logits_to_keep=1)
    np.testing.assert_allclose(nxt[0, 0], out[0, 5], rtol=1e-4, atol=1e-4)


def test_quantized_checkpoint_runs_dequantized(tmp_path):
    c = config()
    q = load_model(write_random_checkpoint(tmp_path / "q", c, quantize=8, group_size=32), dtype="float32")
    f = load_model(write_random_checkpoint(tmp_path / "f", c, dtype="float32"))
    # 8-bit codes of the same random weights: logits close, and the argmax mostly agrees
    assert rel_err(q.forward(IDS), f.forward(IDS)) < 0.05


@pytest.mark.parametrize(
    "bad,words",
    [
        ([], "empty input"),
        ([1, 512], "token id 512 at position 1"),
        ([-1], "token id -1"),
        ([1.5], "must be integers"),
        ("hello", "tokenize first"),
        ([[1, 2]], "1-D sequence"),
    ],
)
def test_bad_ids(model, bad, words):
    with pytest.raises(ModelError, match=words):
        model.forward(bad)


def test_positions_past_the_context_and_cache_mismatch(model):
    with pytest.raises(ModelError, match="exceed max_position_embeddings 512"):
        model(np.array([[1, 2]]), 511, None)
    caches = model.make_cache()
    model.forward([1, 2, 3], caches)
    with pytest.raises(ModelError, match="does not match the caches' offsets"):
        model(np.array([[1]]), 0, caches)
    with pytest.raises(ModelError, match="got 1 caches for 2 layers"):
        model(np.array([[1]]), 3, caches[:1])
    with pytest.raises(ModelError, match="logits_to_keep"):
        model(np.array([[1]]), 0, None, logits_to_keep=0)


@pytest.mark.parametrize(
    "change,words",
    [
        ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "rope_scaling"),
        ({"use_sliding_window": True, "sliding_window": 64}, "use_sliding_window"),
        ({"num_experts": 8}, "num_experts is 8 \\(a Qwen3-MoE config says 'qwen3_moe'\\)"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_unsupported_configs_fail_before_compute(tmp_path, change, words):
    d = write_random_checkpoint(tmp_path / "m", config())
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | change))
    with pytest.raises(ModelError, match=words):
        load_model(d)


def test_checkpoint_failing_cross_check_is_refused(tmp_path):
    d = write_random_checkpoint(tmp_path / "m", config())
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": 3}))
    with pytest.raises(ModelError, match="missing model.layers.2"):
        load_model(d)
    with pytest.raises(ModelError, match="not a model directory"):
        load_model(tmp_path / "nope")
    with pytest.raises(ModelError, match="unknown backend"):
        load_model(d, backend="torch")


@pytest.mark.parametrize("name", ["untied-gqa2", "mqa"])
def test_long_prompt_attention_in_query_chunks_equals_one_pass(checkpoints, monkeypatch, name):
    """A long prompt's scores are computed a chunk of queries at a time (bounded memory); the chunk edges must
    keep the causal mask, the cache offset and left padding exactly as one pass does."""
    from fs_model.numpy import attention

    model = load_model(checkpoints[name])
    rows = np.array([[0, 0, 0, *range(5, 22)], list(range(30, 50))])
    want_caches, got_caches = model.make_cache(), model.make_cache()
    want = [model(rows[:, :7], 0, want_caches, pad=[3, 0]), model(rows[:, 7:], 7, want_caches, pad=[3, 0])]
    monkeypatch.setattr(attention, "SCORES_BUDGET", 3 * 4 * 2 * model.config.num_attention_heads * 20)  # 3 queries
    got = [model(rows[:, :7], 0, got_caches, pad=[3, 0]), model(rows[:, 7:], 7, got_caches, pad=[3, 0])]
    for a, b in zip(got, want, strict=True):
        assert rel_err(a, b) < 1e-5


def test_the_numpy_fallback_for_kept_weights_says_so(tmp_path):
    """Without numba a bf16 model still runs (widened by numpy), and the user is told once why it is slow."""
    import warnings

    from fs_model.cpu import HAVE_NUMBA

    d = write_random_checkpoint(tmp_path / "m", config(), dtype="bfloat16")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        load_model(d, dtype="native")
        load_model(d)  # float32 copies: BLAS, nothing to say
    said = [w for w in seen if "pure-numpy fallback" in str(w.message)]
    assert len(said) == (0 if HAVE_NUMBA else 1)
    assert not said or "pip install 'fs-model[fast]'" in str(said[0].message)
