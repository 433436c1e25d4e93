"""GGUF files of the types Qwen3 users download (Q4_K_M, Q5_K_M and Q6_K files hold Q4_K, Q5_K, Q6_K tensors;
older ones Q4_1, Q5_0, Q5_1): they load, each tensor repacked as MLX affine codes that are exactly the `gguf`
package's own dequantization of its blocks (Q4_K and Q4_1 as 4-bit groups of 32, Q5_* as 8-bit groups of 32,
Q6_K as 8-bit groups of 16), so the model's logits equal - bit for bit - those of a safetensors checkpoint holding
those dequantized values, and the quantized kernels run the codes."""

import json

import numpy as np
import pytest

from fs_model import load_model
from fs_weights import preset, write_random_checkpoint
from fs_weights.gguf_export import gguf_name

gguf = pytest.importorskip("gguf", reason="gguf is a dependency of fs-weights[gguf], which fs-generate requires")
T = gguf.GGMLQuantizationType
# K-quant rows are super-blocks of 256: every matrix's columns must be a multiple of it
SHAPES = dict(vocab_size=512, hidden_size=256, intermediate_size=512, head_dim=64, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, bos_token_id=None, eos_token_id=None)  # fmt: skip
KINDS = [T.Q4_K, T.Q5_K, T.Q6_K, T.Q4_1, T.Q5_0, T.Q5_1]
SCALE_AT = {T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}  # byte offsets of each block's float16 d (and dmin)


def blocks(kind, x, rng):
    """Row bytes of ``kind`` for matrix ``x``: gguf's quantizer where it has one; else (K-quants, which gguf-py
    cannot quantize) random codes and scales with small finite float16 super-scales - every bit pattern a file may
    hold, not only what a quantizer would choose."""
    if kind not in SCALE_AT:
        return gguf.quants.quantize(x, kind)
    size, per = gguf.GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, size=(x.shape[0], x.shape[1] // size, per), dtype=np.uint8)
    for at in SCALE_AT[kind]:
        raw[..., at : at + 2] = rng.uniform(-2e-3, 2e-3, raw.shape[:2]).astype(np.float16)[..., None].view(np.uint8)
    return raw.reshape(x.shape[0], -1)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(the K-quant GGUF, a safetensors directory of the very values gguf dequantizes its tensors to)."""
    from safetensors.numpy import load_file, save_file

    root = tmp_path_factory.mktemp("kq")
    src = write_random_checkpoint(root / "src", preset("tiny", **SHAPES), dtype="float32")
    c = json.loads((src / "config.json").read_text())
    tensors = {k: v for f in src.glob("*.safetensors") for k, v in load_file(f).items()}
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(root / "kq.gguf"), "qwen3")
    for add, v in [(w.add_context_length, c["max_position_embeddings"]), (w.add_embedding_length, c["hidden_size"]),
                   (w.add_feed_forward_length, c["intermediate_size"]), (w.add_block_count, c["num_hidden_layers"]),
                   (w.add_head_count, c["num_attention_heads"]), (w.add_head_count_kv, c["num_key_value_heads"]),
                   (w.add_key_length, c["head_dim"]), (w.add_value_length, c["head_dim"]),
                   (w.add_rope_freq_base, c["rope_theta"]), (w.add_layer_norm_rms_eps, c["rms_norm_eps"])]:  # fmt: skip
        add(v)
    plain, used = {}, set()
    for i, (name, x) in enumerate(sorted(tensors.items())):
        if x.ndim == 1:
            w.add_tensor(gguf_name(name), x)
            plain[name] = x
            continue
        kind = KINDS[i % len(KINDS)]
        raw = blocks(kind, x, rng)
        w.add_tensor(gguf_name(name), raw, raw_dtype=kind)
        plain[name] = gguf.quants.dequantize(raw, kind).astype(np.float32)
        used.add(kind)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    ref = root / "dequantized"
    ref.mkdir()
    save_file(plain, ref / "model.safetensors")
    (ref / "config.json").write_text(json.dumps(c))
    assert used == set(KINDS)  # every type is in the file
    return root / "kq.gguf", ref


def adversarial(kind, rows, rng):
    """Blocks at the edges: zero and negative super-scales, float16 subnormals and the largest finite value,
    every code and 6-bit scale at its maximum or zero."""
    per = gguf.GGML_QUANT_SIZES[kind][1]
    raw = rng.integers(0, 256, size=(rows, 2, per), dtype=np.uint8)
    raw[0, :] = 0xFF if kind not in (T.Q4_1, T.Q5_1) else 0x0F  # all codes and 6-bit scales at their maximum
    raw[1, :] = 0
    heads = np.array([0.0, -0.0, 6.0e-8, -65504.0, 1e-3, -2.5], np.float16)  # incl. a subnormal and -max
    for r in range(rows):
        for at in SCALE_AT.get(kind, (0, 2) if kind in (T.Q4_1, T.Q5_1) else (0,)):
            raw[r, :, at : at + 2] = heads[(r + at) % len(heads)].reshape(1).view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("kind", [T.Q4_K, T.Q4_1, T.Q4_0, T.Q8_0, T.Q6_K, T.Q5_K, T.Q5_0, T.Q5_1])
def test_each_tensor_is_ggufs_own_dequantization_even_at_the_edges(tmp_path, kind):
    from fs_weights import Checkpoint

    rng = np.random.default_rng(int(kind))
    raw = adversarial(kind, 8, rng)
    w = gguf.GGUFWriter(str(tmp_path / "edge.gguf"), "qwen3")
    w.add_tensor("token_embd.weight", raw, raw_dtype=kind)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    want = gguf.quants.dequantize(raw, kind).astype(np.float32)
    from fs_weights.gguf_blocks import quantization
    from fs_weights.gguf_file import GGUFFile

    f = GGUFFile(tmp_path / "edge.gguf")
    with Checkpoint([f], tmp_path / "edge.gguf", quantization(f.quant)) as ck:
        assert ck.is_quantized("model.embed_tokens.weight")  # codes, scales and biases: nothing dequantized
        got = ck.get("model.embed_tokens.weight", dequantize=True)
    assert got.shape == want.shape and np.array_equal(got, want)  # every value the same float32
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not np.any(differ & (want != 0))  # bit differences only in a zero's sign: s*q + b cannot make -0.0


def test_k_quant_files_give_the_logits_of_their_dequantized_values_bit_for_bit(files):
    gguf_file, ref = files
    ids = [3, 141, 59, 265, 358, 97, 93, 238]
    got = np.asarray(load_model(gguf_file, dtype="float32").forward(ids))
    want = np.asarray(load_model(ref, dtype="float32").forward(ids))
    assert np.isfinite(want).all() and np.array_equal(got, want)


@pytest.mark.parity
def test_the_mlx_backend_loads_the_same_file(files, reference):
    reference("mlx.core")
    gguf_file, ref = files
    ids = [3, 141, 59, 265]
    got = np.asarray(load_model(gguf_file, backend="mlx", dtype="float32").forward(ids))
    want = np.asarray(load_model(ref, dtype="float32").forward(ids))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # float32 on two backends


@pytest.mark.kernels
def test_the_quantized_kernels_run_every_repacked_tensor(files, monkeypatch):
    from fs_model import cpu
    from fs_model.cpu import tiles
    from fs_model.cpu.affine import AffineLinear

    if not cpu.HAVE_NUMBA:
        pytest.fail("the kernels session installs numba")
    gguf_file, ref = files
    ids = [3, 141, 59, 265, 358, 97]
    from fs_weights import Checkpoint

    with Checkpoint.open(gguf_file) as ck:  # every matrix arrives as codes, not floats
        matrices = [n for n in ck.names() if n.endswith(".weight") and len(ck.info(n).shape) == 2]
        assert all(ck.is_quantized(n) for n in matrices)
        assert {ck.quant_params(n) for n in matrices} == {(4, 32), (8, 32), (8, 16)}
        # which 8-bit codes the file holds in fewer bits: Q5_0 / Q5_1 / Q5_K 5, Q6_K 6, the rest none
        assert {(ck.quant_params(n), ck.code_bits(n)) for n in matrices} == {
            ((4, 32), None), ((8, 32), 5), ((8, 16), 6)}  # fmt: skip

    def linears(model):
        parts = [vars(p).values() for b in model.blocks for p in (b.attn, b.mlp)]
        return [v for part in parts for v in part if isinstance(v, AffineLinear)]

    if tiles.applies("q4i", 512, 32):  # by default Q4_K's groups of 32 take int8 activations, as llama.cpp's do
        assert {x.kind for x in linears(load_model(gguf_file)) if x.w.bits == 4} == {"q4i"}
    if tiles.applies("q6i", 512, 16):  # and Q5_* / Q6_K keep their 5 / 6 bits, on integer tiles (packed_codes.py)
        kept = {(x.w.bits, x.w.group_size, x.kind) for x in linears(load_model(gguf_file))}
        assert kept == {(4, 32, "q4i"), (5, 32, "q5i"), (6, 16, "q6i")}
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)  # float activations: the repack alone is measured
    model = load_model(gguf_file)  # native: those codes on the quantized kernels
    assert {(x.w.bits, x.w.group_size) for x in linears(model)} == {(4, 32), (8, 32), (8, 16)}
    got = np.asarray(model.forward(ids))
    want = np.asarray(load_model(ref, dtype="float32").forward(ids))
    # the same weights; bf16 K/V, so bf16's tolerance, not f32's
    assert float(np.linalg.norm(got - want) / np.linalg.norm(want)) <= 1e-2


@pytest.mark.kernels
def test_k_quant_matrices_read_their_super_block_records_with_the_same_bits(files, monkeypatch):
    """Q4_K / Q5_K / Q6_K matrices on the tiles read the file's per-256-weight factors instead of float32 scales
    and biases (fs_model/cpu/superblock_scales.py): fewer bytes per step, and the logits - prefill and a cached
    decode step - bit for bit those of the same file with FS_SUPERBLOCK_SCALES=0."""
    from fs_model import cpu
    from fs_model.cpu import tiles
    from fs_model.cpu.affine import AffineLinear

    if not tiles.applies("bf16", 512):
        pytest.skip("no tiles (no AVX2 + FMA, or FS_TILES=0): the row kernels run, which read the expanded scales")
    gguf_file, _ = files
    ids = [3, 141, 59, 265, 358, 97]

    def run():
        model = load_model(gguf_file)
        layers = [v for b in model.blocks for p in (b.attn, b.mlp) for v in vars(p).values()]
        layouts = {x.tiles.layout for x in layers if isinstance(x, AffineLinear) and x.tiles is not None}
        cache = model.make_cache()
        first = np.asarray(model.forward(ids[:-1], cache=cache))
        return layouts, first, np.asarray(model.forward(ids[-1:], cache=cache))

    layouts, *logits = run()
    assert {"k4", "k6"} <= layouts  # Q4_K and Q5_K (k4), Q6_K (k6) all read records
    monkeypatch.setattr(cpu.SWITCHES, "superblock_scales", False)
    plain, *want = run()
    assert plain == {None}
    for got, ref in zip(logits, want, strict=True):
        assert np.isfinite(ref).all() and np.array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.kernels
def test_k_quant_files_keep_the_equality_contracts(files):
    """On the K-quant kernels (Q4_K and Q4_1 on the groups-of-32 integer tiles, Q6_K packed in 6 bits, Q5_* as
    8-bit groups of 32), as on every kept format: a sequence's logits are the same bits prefilled in one call or
    token by token from its cache, and alone or in a batch beside another sequence."""
    gguf_file, _ = files
    model = load_model(gguf_file)
    a, b = [3, 141, 59, 265, 358, 97], [93, 238, 7, 11, 400, 5]
    whole = np.asarray(model(model.tokens_array([a]), 0, model.make_cache()))[0]
    cache = model.make_cache()
    steps = [np.asarray(model(model.tokens_array([[t]]), i, cache))[0, -1] for i, t in enumerate(a)]
    assert np.isfinite(whole).all() and np.array_equal(np.stack(steps).view(np.uint32), whole.view(np.uint32))
    batch = np.asarray(model(model.tokens_array([a, b]), 0, model.make_cache()))
    alone = np.asarray(model(model.tokens_array([b]), 0, model.make_cache()))[0]
    assert np.array_equal(batch[0].view(np.uint32), whole.view(np.uint32))
    assert np.array_equal(batch[1].view(np.uint32), alone.view(np.uint32))


@pytest.mark.kernels
def test_k_quant_layers_of_mixed_types_run_compiled_with_the_same_bits(files):
    """A K-quant file mixes types within a layer (here q and k of one type, v of another; Q4_K_M files keep v in
    Q6_K): each block's two compiled halves (fs_model/cpu/compiled_block.py) call each matrix on its own tiles and
    give the bits of the block run call by call from Python - a prefill and the decode steps after it, one
    record-reading tile for one-row calls and another for the prefill."""
    from fs_model.cpu import tiles

    if not tiles.applies("bf16", 256):
        pytest.skip("no tiles (no AVX2 + FMA, or FS_TILES=0): the blocks keep the Python path")
    gguf_file, _ = files
    model = load_model(gguf_file)
    plans = [b.plan for b in model.blocks]
    assert all(p is not None for p in plans)  # every block compiled
    for b, p in zip(model.blocks, plans, strict=True):  # q | k | v in one call where they tile alike, else one by one
        a = b.attn
        alike = len({(t.kind, t.fns) for t in (a.wq.tiles, a.wk.tiles, a.wv.tiles)}) == 1  # type: ignore[attr-defined]
        assert len(p.qkv) == (1 if alike else 3)  # (which layers tile alike depends on the host's scale storage)
    ids = [3, 141, 59, 265, 358, 97]

    def run(compiled):
        for b, p in zip(model.blocks, plans, strict=True):
            b.plan = p if compiled else None
        cache = model.make_cache()
        first = [np.asarray(model(model.tokens_array([ids[:3]]), 0, cache))]
        return first + [np.asarray(model(model.tokens_array([[t]]), 3 + i, cache)) for i, t in enumerate(ids[3:])]

    for got, want in zip(run(True), run(False), strict=True):
        assert np.isfinite(want).all() and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_damaged_k_quant_files_are_one_named_error(files, tmp_path):
    """A row that is not whole super-blocks, and a file cut inside a K-quant tensor: refused by name and offset,
    never a wrong array or a crash."""
    import struct

    from fs_model import ModelError

    w = gguf.GGUFWriter(str(tmp_path / "rows.gguf"), "qwen3")
    w.add_tensor("token_embd.weight", np.zeros((4, 144), np.uint8), raw_dtype=T.Q4_K)  # rows of one super-block
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    data = bytearray((tmp_path / "rows.gguf").read_bytes())
    at = data.index(b"token_embd.weight") + len(b"token_embd.weight") + 4  # past the name and n_dims
    assert struct.unpack_from("<Q", data, at)[0] == 256
    struct.pack_into("<Q", data, at, 384)  # the row now claims 1.5 super-blocks
    (tmp_path / "rows.gguf").write_bytes(bytes(data))
    with pytest.raises(ModelError, match="Q4_K stores blocks of 256 values but its first dimension is 384"):
        load_model(tmp_path / "rows.gguf")
    gguf_file, _ = files
    data = gguf_file.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) - 1000])
    with pytest.raises(ModelError, match="cut.gguf"):
        load_model(tmp_path / "cut.gguf")
