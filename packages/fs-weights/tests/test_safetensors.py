import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import SafetensorError as OracleError
from safetensors import safe_open
from safetensors.numpy import save_file

from fs_weights import SafetensorsError, SafetensorsFile, bf16_to_f32, f32_to_bf16, save_safetensors


def make(path: Path, header: dict, data: bytes, pad: int = 0) -> Path:
    blob = json.dumps(header).encode() + b" " * pad
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def test_reads_what_the_reference_writer_wrote(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b": rng.standard_normal(7).astype(np.float16),
        "c": rng.integers(0, 2**32, (2, 4), dtype=np.uint32),
        "d": np.zeros((0, 3), np.float32),
    }
    save_file(tensors, tmp_path / "x.safetensors", metadata={"format": "np"})
    f = SafetensorsFile(tmp_path / "x.safetensors")
    assert f.metadata == {"format": "np"}
    for name, want in tensors.items():
        got = f.raw(name)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable  # mmap-backed views must not let callers corrupt a checkpoint


def test_reference_reads_what_we_wrote(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {"w": rng.standard_normal((4, 6)).astype(np.float32), "i": np.arange(5, dtype=np.int32)}
    save_safetensors(tmp_path / "y.safetensors", tensors, metadata={"k": "v"})
    with safe_open(tmp_path / "y.safetensors", framework="numpy") as f:
        assert f.metadata() == {"k": "v"}
        for name, want in tensors.items():
            np.testing.assert_array_equal(f.get_tensor(name), want)


def test_bf16_is_the_top_half_of_f32():
    bits = np.array([0x3F80, 0xC000, 0x0000, 0x8000, 0x7F80, 0x3EAA], dtype=np.uint16)
    np.testing.assert_array_equal(bf16_to_f32(bits), [1.0, -2.0, 0.0, -0.0, np.inf, 0.33203125])
    # rounding to nearest even at the halfway point, as torch/mlx do
    halfway = np.array([struct.unpack("<f", struct.pack("<I", 0x3F808000))[0]], np.float32)
    assert f32_to_bf16(halfway)[0] == 0x3F80
    above = np.array([struct.unpack("<f", struct.pack("<I", 0x3F808001))[0]], np.float32)
    assert f32_to_bf16(above)[0] == 0x3F81
    assert f32_to_bf16(np.array([np.nan], np.float32))[0] & 0x7FFF > 0x7F80


def test_bf16_roundtrip_error_is_half_an_ulp():
    x = np.random.default_rng(2).standard_normal(10_000).astype(np.float32)
    y = bf16_to_f32(f32_to_bf16(x))
    assert np.all(np.abs(y - x) <= np.abs(x) * 2.0**-8)


BAD = {
    "truncated data": ({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "past the"),
    "unknown dtype": ({"t": {"dtype": "F8_E9", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "unknown dtype"),
    "shape/bytes mismatch": ({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "span 8"),
    "overlap": (
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
        },
        b"\0" * 12,
        "overlap",
    ),
    "negative shape": ({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b"", "shape"),
    "offsets reversed": ({"t": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}, b"\0" * 4, "data_offsets"),
    "metadata not strings": ({"__metadata__": {"a": 1}}, b"", "__metadata__"),
    "entry not object": ({"t": [1, 2]}, b"", "not an object"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_headers_name_file_and_tensor(tmp_path, case):
    header, data, words = BAD[case]
    path = make(tmp_path / "bad.safetensors", header, data)
    with pytest.raises(SafetensorsError) as e:
        SafetensorsFile(path)
    assert str(path) in str(e.value) and words in str(e.value)
    if "t" in header:
        assert "'t'" in str(e.value)


@pytest.mark.parametrize(
    "raw,words",
    [
        (b"", "8-byte header length"),
        (b"\x05\0\0", "8-byte header length"),
        (struct.pack("<Q", 1 << 40) + b"{}", "runs past the end"),
        (struct.pack("<Q", 4) + b"{}", "runs past the end"),
        (struct.pack("<Q", 3) + b"{x}", "not valid JSON"),
        (struct.pack("<Q", 2) + b"\xff\xfe", "not valid UTF-8"),
        (struct.pack("<Q", 2) + b"[]", "JSON list"),
    ],
)
def test_bad_framing(tmp_path, raw, words):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(SafetensorsError, match=words):
        SafetensorsFile(path)


def test_missing_file_is_a_weights_error(tmp_path):
    with pytest.raises(SafetensorsError, match="cannot read"):
        SafetensorsFile(tmp_path / "nope.safetensors")


def test_write_is_atomic(tmp_path):
    target = tmp_path / "w.safetensors"
    save_safetensors(target, {"a": np.ones(3, np.float32)})
    before = target.read_bytes()

    class Boom(Exception):
        pass

    def explode(name):
        raise Boom

    from fs_weights.safetensors import write_safetensors

    with pytest.raises(Boom):
        write_safetensors(target, {"a": ((3,), "F32")}, explode)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]  # no temp file left behind


VALID_HEADER = {
    "__metadata__": {"format": "pt"},
    "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
    "q": {"dtype": "U32", "shape": [2], "data_offsets": [32, 40]},
}
DATA = bytes(range(40))


def _mutations():
    values = st.one_of(
        st.integers(-3, 64),
        st.just(2**63),
        st.text(max_size=4),
        st.none(),
        st.lists(st.integers(-2, 48), max_size=3),
        st.sampled_from(["F32", "BF16", "F16", "X"]),
    )
    json_mut = st.tuples(
        st.just("json"), st.sampled_from(["w", "b", "q"]), st.sampled_from(["dtype", "shape", "data_offsets"]), values
    )
    byte_mut = st.tuples(st.just("bytes"), st.integers(0, 300), st.integers(0, 255), st.none())
    cut = st.tuples(st.just("cut"), st.integers(0, 300), st.none(), st.none())
    return st.lists(st.one_of(json_mut, byte_mut, cut), min_size=1, max_size=4)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_mutations())
def test_fuzzed_headers_fail_cleanly_and_agree_with_the_reference(tmp_path, muts):
    header = json.loads(json.dumps(VALID_HEADER))
    for kind, a, b, c in muts:
        if kind == "json":
            header[a][b] = c
    blob = json.dumps(header).encode()
    raw = bytearray(struct.pack("<Q", len(blob)) + blob + DATA)
    for kind, a, b, _ in muts:
        if kind == "bytes" and a < len(raw):
            raw[a] = b
        elif kind == "cut":
            del raw[a:]
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(bytes(raw))
    try:
        ours = SafetensorsFile(path)
    except SafetensorsError as e:
        assert str(path) in str(e)
        ours = None
    try:
        with safe_open(path, framework="numpy") as f:
            theirs = {k: f.get_slice(k).get_shape() for k in f.keys()}  # noqa: SIM118
    except (OracleError, Exception):  # the oracle raises assorted types; we only need "did it accept"
        theirs = None
    if theirs is not None:
        assert ours is not None, "the reference accepted a file we rejected"
        assert {k: list(ours.tensors[k].shape) for k in ours.tensors} == theirs
    if ours is not None:
        for name, t in ours.tensors.items():
            assert ours.raw(name).nbytes == t.nbytes == t.end - t.begin
            assert t.end <= len(raw)
