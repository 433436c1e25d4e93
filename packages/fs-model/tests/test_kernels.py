"""The bf16 CPU kernels against the float32 reference: every Qwen3-0.6B matrix shape and some odd ones. In the
kernels session (`nox -s kernels`: fs-model[fast], once per ISA), where their compiles are shared with the other
kernel tests - in the package's own quick session they compiled the same kernels a second time (~40 s)."""

import numpy as np
import pytest

from fs_model import cpu, load_model
from fs_model.cpu import bf16
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_weights import bf16_to_f32, f32_to_bf16, write_random_checkpoint
from model_helpers import config, need_tiles, rel_err

pytestmark = pytest.mark.kernels

SHAPES = {
    "q_proj": (2048, 1024),
    "k_proj/v_proj": (1024, 1024),
    "o_proj": (1024, 2048),
    "gate/up": (3072, 1024),
    "down": (1024, 3072),
    "odd": (37, 129),
    "one row": (1, 7),
    "not a block multiple": (17, 1000),
}


def activations(layer: Bf16Linear, x: np.ndarray) -> np.ndarray:
    """x as the layer multiplies it: rounded to bf16 where it runs the bf16d tiles (AVX512-BF16), else as is."""
    bf16d = layer.tiles is not None and layer.tiles.kind in ("bf16d", "bf16di")
    return bf16_to_f32(f32_to_bf16(x)) if bf16d else x


@pytest.mark.parametrize("name", list(SHAPES))
def test_matvec_bf16_equals_widened_float32(name):
    rng = np.random.default_rng(len(name))
    out, inp = SHAPES[name]
    w = f32_to_bf16(rng.standard_normal((out, inp), dtype=np.float32))
    x = rng.standard_normal(inp, dtype=np.float32)
    layer = Bf16Linear(w)
    want = bf16_to_f32(w).astype(np.float64) @ activations(layer, x).astype(np.float64)
    got = layer(x)
    assert got.dtype == np.float32 and got.shape == (out,)
    assert rel_err(got, want) < 1e-5
    xs = rng.standard_normal((2, 3, inp), dtype=np.float32)  # decode-sized and prefill-sized inputs
    for rows in (xs[:1, :1], xs):
        want = activations(layer, rows) @ bf16_to_f32(w).T
        np.testing.assert_allclose(layer(rows), want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_matvec_bf16_lm_head_shape():
    rng = np.random.default_rng(0)
    w = f32_to_bf16(rng.standard_normal((151936, 1024), dtype=np.float32))
    x = rng.standard_normal(1024, dtype=np.float32)
    layer = Bf16Linear(w)
    assert rel_err(layer(x), bf16_to_f32(w) @ activations(layer, x)) < 1e-5


@pytest.mark.parametrize("bf16_activations", [False, True])
def test_bf16_weights_in_memory_give_the_reference_logits(tmp_path, monkeypatch, bf16_activations):
    """float32 activations: the reference's logits within float32 rounding. bf16 ones (AVX512-BF16 CPUs by default,
    docs/model.md): within bf16's tolerance, the same greedy tokens."""
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", bf16_activations)  # FS_BF16_GEMM
    tol = 2e-2 if bf16_activations else 1e-5
    d = write_random_checkpoint(tmp_path / "m", config("tied"), dtype="bfloat16")
    ref, fast = load_model(d, dtype="float32"), load_model(d, dtype="bfloat16", kv_dtype="float32")
    layer = fast.blocks[0].mlp.gate
    # the mmap itself, or where every call takes the bf16d tiles a copy interleaved per 4 rows (bf16_dot_tiles.py)
    assert layer.w.dtype == np.uint16 and layer.w.flags.writeable == layer.interleaved
    ids = [3, 141, 59, 265, 358, 97]
    got, want = fast.forward(ids), ref.forward(ids)
    assert rel_err(got, want) < tol and np.array_equal(got.argmax(-1), want.argmax(-1))
    a, b = ref.make_cache(), fast.make_cache()
    ref.forward(ids, a), fast.forward(ids, b)
    for t in (7, 99, 3):
        got, want = fast.forward([t], b), ref.forward([t], a)
        assert rel_err(got, want) < tol and np.array_equal(got.argmax(-1), want.argmax(-1))


def test_bf16_models_keep_a_bf16_kv_cache(tmp_path):
    """By default a bf16 model's cache holds bf16 bits (half the bytes); the logits move by bf16 rounding of K and
    V only: within bf16 tolerance of the float32 cache, with the same argmax."""
    d = write_random_checkpoint(tmp_path / "m", config("untied-gqa2"), dtype="bfloat16")
    f32kv, bf16kv = load_model(d, dtype="bfloat16", kv_dtype="float32"), load_model(d, dtype="bfloat16")
    assert bf16kv.kv_dtype == "bfloat16" and load_model(d, dtype="float32").kv_dtype == "float32"
    ids = [3, 141, 59, 265, 358, 97]
    a, b = f32kv.make_cache(), bf16kv.make_cache()
    assert rel_err(bf16kv.forward(ids, b), f32kv.forward(ids, a)) < 1e-2
    assert b[0].key_values[0].dtype == np.uint16 and b[0].key_values[0].nbytes * 2 == a[0].key_values[0].nbytes
    for t in (7, 99, 3):
        want, got = f32kv.forward([t], a), bf16kv.forward([t], b)
        assert rel_err(got, want) < 1e-2 and got.argmax() == want.argmax()
    with pytest.raises(Exception, match="kv_dtype must be float32 or bfloat16"):
        load_model(d, kv_dtype="float16")


# the kernels session installs fs-model[fast]; numba's absence there is a failure
@pytest.mark.parametrize("name", list(SHAPES))
def test_numba_kernel_itself(reference, name):
    reference("numba")
    assert cpu.HAVE_NUMBA
    rng = np.random.default_rng(7)
    out, inp = SHAPES[name]
    w = f32_to_bf16(rng.standard_normal((out, inp), dtype=np.float32))
    x = rng.standard_normal(inp, dtype=np.float32)
    got = np.empty(out, np.float32)
    bf16._rows_bf16(w, x[None], got[None])
    assert rel_err(got, bf16_to_f32(w).astype(np.float64) @ x) < 1e-5
    xs = rng.standard_normal((3, inp), dtype=np.float32)  # a batch's decode step: one pass for all rows
    assert rel_err(bf16.rows_kernel(xs, w), xs.astype(np.float64) @ bf16_to_f32(w).T.astype(np.float64)) < 1e-5


QSHAPES = {"q_proj": (2048, 1024), "o_proj": (1024, 2048), "down": (1024, 3072), "odd": (37, 192)}


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("name", list(QSHAPES))
def test_quantized_matvec_equals_the_dequantized_reference(monkeypatch, name, bits):
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)  # float activations: exact (test_vnni.py: int)
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", False)  # float32 prefill products (test_bf16_gemm.py covers bf16)

    rng = np.random.default_rng(bits)
    out, inp = QSHAPES[name]
    w = quantize_affine(rng.standard_normal((out, inp), dtype=np.float32), bits=bits, group=64)
    assert w.shape == (out, inp) and w.codes.dtype == np.uint8
    assert w.codes.nbytes == out * inp * bits // 8  # 1 or 1/2 byte per weight, no float copy
    x = rng.standard_normal(inp, dtype=np.float32)
    ref = w.dequantize().astype(np.float64) @ x
    assert rel_err(AffineLinear(w)(x), ref) < 1e-5
    rows = rng.standard_normal((2, 5, inp), dtype=np.float32)  # against float64: float32 BLAS is no closer
    assert rel_err(AffineLinear(w)(rows), rows.astype(np.float64) @ w.dequantize().T.astype(np.float64)) < 1e-5


@pytest.mark.parametrize("bits", [4, 8])
def test_native_mlx_checkpoints_stay_quantized_and_match_the_reference(tmp_path, monkeypatch, bits):
    from fs_model import cpu

    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)  # float activations: f32's tolerance (the int8
    # ones 4-bit codes take by default have their own contract: test_tiles.py, test_vnni.py)
    d = write_random_checkpoint(tmp_path / "q", config("tied"), dtype="float32", quantize=bits, group_size=32)
    ref, native = load_model(d, dtype="float32"), load_model(d, dtype="native", kv_dtype="float32")
    assert type(native.blocks[0].mlp.gate.w).__name__ == "AffineWeight"
    ids = [3, 141, 59, 265]
    assert rel_err(native.forward(ids), ref.forward(ids)) < 1e-5
    a, b = ref.make_cache(), native.make_cache()
    ref.forward(ids, a), native.forward(ids, b)
    assert rel_err(native.forward([7], b), ref.forward([7], a)) < 1e-5


def test_quantize_at_load_int8_is_close(tmp_path):
    d = write_random_checkpoint(tmp_path / "b", config("tied"), dtype="bfloat16")
    ref, q8 = load_model(d, dtype="float32"), load_model(d, quantize="int8")
    ids = [3, 141, 59, 265, 358, 97]
    assert rel_err(q8.forward(ids), ref.forward(ids)) < 0.05
    with pytest.raises(Exception, match="quantize must be int8 or int4"):
        load_model(d, quantize="int3")


@pytest.mark.parametrize("bits", [4, 8])
def test_numba_quantized_kernels_themselves(reference, monkeypatch, bits):
    reference("numba")
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)  # the float kernels; test_vnni.py: the integer ones

    assert cpu.HAVE_NUMBA
    rng = np.random.default_rng(3)
    w = quantize_affine(rng.standard_normal((300, 1024), dtype=np.float32), bits=bits, group=64)
    x = rng.standard_normal(1024, dtype=np.float32)
    assert rel_err(AffineLinear(w)(x), w.dequantize().astype(np.float64) @ x) < 1e-5


@pytest.mark.parametrize("bits", [None, 4, 8])
def test_the_default_keeps_the_stored_format(tmp_path, monkeypatch, bits):
    """As mlx-lm does: a bf16 checkpoint runs as bf16 bits (the mmap itself), an MLX 4/8-bit one stays quantized,
    each with a bf16 KV cache; float32 copies and a float32 cache are what ``dtype="float32"`` asks for."""
    from fs_model import cpu

    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)  # K/V rounding only (int8 ones: test_tiles.py)
    stored = "float32" if bits else "bfloat16"
    d = write_random_checkpoint(tmp_path / "m", config("tied"), dtype=stored, quantize=bits, group_size=32)
    default, f32 = load_model(d), load_model(d, dtype="float32")
    kept = default.blocks[0].mlp.gate.w
    if bits:
        assert type(kept).__name__ == "AffineWeight" and kept.bits == bits
    else:  # the mmap itself, or an interleaved copy (bf16d tiles: bf16_dot_tiles.py)
        assert kept.dtype == np.uint16 and kept.flags.writeable == default.blocks[0].mlp.gate.interleaved
    assert default.kv_dtype == "bfloat16" and f32.kv_dtype == "float32"
    assert f32.blocks[0].mlp.gate.w.dtype == np.float32
    ids = [3, 141, 59, 265]
    assert rel_err(default.forward(ids), f32.forward(ids)) < 1e-2  # bf16 rounding of K/V only


SCALES = np.uint16 if cpu.SWITCHES.tiles else np.float32  # bf16 bits where the tiles read them (half_scales.py)


@pytest.mark.parametrize("bits", [4, 8])
def test_bf16_scales_stay_bf16_and_in_memory_beside_copied_codes(tmp_path, bits):
    """An MLX conversion of a bf16 model: its bf16 scales and biases are kept as bf16 (cpu/half_scales.py: no float32
    copies, 1/9 of a 4-bit model's bytes), mapped where the codes are read in place (8-bit) and copied into memory
    where the codes are copied (4-bit, planar), so that the kernel cannot evict them from under a running model."""
    need_tiles("the row kernels read float32 copies of the scales")
    d = write_random_checkpoint(tmp_path / "q", config("tied"), dtype="bfloat16", quantize=bits)
    model = load_model(d)
    w = model.blocks[0].mlp.down.w  # k = 128: two groups of 64, on the tiles
    assert w.scales.dtype == w.biases.dtype == np.uint16
    in_place = not w.codes.flags.writeable
    assert in_place == (bits == 8) and w.scales.flags.writeable != in_place and w.biases.flags.writeable != in_place
    ids = [3, 141, 59, 265]
    assert rel_err(model.forward(ids), load_model(d, dtype="float32").forward(ids)) < 2e-2


@pytest.mark.parametrize("bits", [4, 8])
def test_quantizing_at_load_is_converting_then_loading(tmp_path, bits):
    """``quantize="int4"`` on a bf16 checkpoint keeps what ``fs-weights convert -q`` writes (mlx-lm's convert: bf16
    scales and biases), so the two give the same logits bit for bit; the scales stay bf16 (2 bytes, half_scales.py)."""
    from fs_weights.convert import convert_checkpoint

    d = write_random_checkpoint(tmp_path / "b", config("tied"), dtype="bfloat16")
    q = convert_checkpoint(d, tmp_path / f"q{bits}", quantize=bits)
    at_load, converted = load_model(d, quantize=f"int{bits}"), load_model(q)
    assert at_load.blocks[0].mlp.down.w.scales.dtype == SCALES  # k = 128: two groups, on the tiles
    ids = [3, 141, 59, 265, 358, 97]
    assert np.array_equal(at_load.forward(ids).view(np.uint32), converted.forward(ids).view(np.uint32))
