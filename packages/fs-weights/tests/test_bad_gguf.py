"""Hostile GGUF files (the surface llama.cpp's own security advisories were about): every count, offset, size and
token id is checked against the file, each refusal names the section, the key or tensor, and the byte offset; a
file truncated under the mapping, a FIFO or a device is an error, never SIGBUS or a hang. And on valid files the
header parser agrees with the ``gguf`` package's own reader."""

import os
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fs_weights import Checkpoint, WeightsError
from fs_weights.gguf_file import GGUFFile, gguf_config
from fs_weights.gguf_header import GGUFFormatError

gguf = pytest.importorskip("gguf", reason="gguf is in the test group (pip install gguf)")
U64_MAX = 2**64 - 1
F32, F16, Q8_0 = 0, 1, 8


def s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<II", 4, value)


def build(kvs: list[bytes], tensors: list[tuple[str, list[int], int, int]], data: bytes, *, counts=None) -> bytes:
    """A GGUF v3 file from raw pieces: (name, dims fastest-first, ggml type, offset) per tensor, alignment 32."""
    n_t, n_kv = counts or (len(tensors), len(kvs))
    out = b"GGUF" + struct.pack("<IQQ", 3, n_t, n_kv) + b"".join(kvs)
    for name, dims, kind, offset in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", kind, offset)
    return out + b"\0" * (-len(out) % 32) + data


def model_file(layers: int = 1, block_count: int | None = None, eos: int = 3) -> bytes:
    """A minimal Qwen3 GGUF: an 8 x 32 embedding and one norm per layer, in F32."""
    kvs = [s("general.architecture") + struct.pack("<I", 8) + s("qwen3")]
    kvs += [kv_u32(f"qwen3.{k}", v) for k, v in (("block_count", layers if block_count is None else block_count),
            ("embedding_length", 32), ("feed_forward_length", 64), ("attention.head_count", 2),
            ("attention.head_count_kv", 1), ("attention.key_length", 16), ("context_length", 64))]  # fmt: skip
    kvs += [s("qwen3.attention.layer_norm_rms_epsilon") + struct.pack("<If", 6, 1e-6)]
    kvs += [s("qwen3.rope.freq_base") + struct.pack("<If", 6, 10000.0), kv_u32("tokenizer.ggml.eos_token_id", eos)]
    tensors, data = [("token_embd.weight", [32, 8], F32, 0)], np.ones((8, 32), np.float32).tobytes()
    for i in range(layers):
        tensors.append((f"blk.{i}.attn_norm.weight", [32], F32, len(data)))
        data += np.ones(32, np.float32).tobytes()
    return build(kvs, tensors, data)


def refused(tmp_path, data: bytes, *words: str, name: str = "bad.gguf") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(WeightsError) as e:
        gguf_config(GGUFFile(path))
    msg = str(e.value)
    assert str(path) in msg and all(w in msg for w in words), msg
    return msg


def test_a_minimal_file_loads(tmp_path):
    (tmp_path / "m.gguf").write_bytes(model_file(layers=2))
    cfg = gguf_config(f := GGUFFile(tmp_path / "m.gguf"))
    assert cfg["num_hidden_layers"] == 2 and cfg["eos_token_id"] == 3
    assert f.raw("model.embed_tokens.weight").shape == (8, 32)


@pytest.mark.parametrize(
    "data, words",
    [
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, U64_MAX),
            ["GGUF header", "key count of 18446744073709551615", "offset 16"],
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, U64_MAX, 0), ["GGUF tensor infos", "tensor count", "offset 8"]),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 0, U64_MAX),
            ["GGUF key 0 ('k')", "claims 18446744073709551615 elements"],
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 8, 2**40),
            ["GGUF key 0 ('k')", "claims 1099511627776 elements"],
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", U64_MAX) + b"\0" * 16,
            ["GGUF key 0", "the key (18446744073709551615 bytes) needs", "offset 32"],
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s(b"\xff\xfe") + struct.pack("<IB", 0, 1),
            ["GGUF key 0", "not valid UTF-8", "offset 32"],
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + (s("k") + struct.pack("<IB", 0, 1)) * 2,
            ["GGUF key 1 ('k')", "appears twice"],
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 9, 1), ["array of arrays"]),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<I", 13), ["value type 13"]),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), ["big-endian"]),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), ["version 1 is not supported"]),
        (b"GGML" + b"\0" * 20, ["does not start with b'GGUF'"]),
        (b"", ["does not start with"]),
        (build([kv_u32("general.alignment", 24)], [], b""), ["general.alignment 24 is not a positive power of two"]),
    ],
)
def test_counts_and_keys_are_checked_against_the_file(tmp_path, data, words):
    refused(tmp_path, data, *words)


EMBED = np.ones((8, 32), np.float32).tobytes()  # 1024 bytes


@pytest.mark.parametrize(
    "tensors, data, words",
    [
        ([("token_embd.weight", [32, 8], F32, U64_MAX - 31)], EMBED, ["tensor info 0 ('token_embd.weight')", "gap"]),
        ([("token_embd.weight", [32, 8], F32, 4)], EMBED, ["data offset 4 is not a multiple of general.alignment 32"]),
        (
            [("token_embd.weight", [32, 8], F32, 0), ("output_norm.weight", [32], F32, 512)],
            EMBED + EMBED[:128],
            ["tensor info 1 ('output_norm.weight')", "overlaps the previous tensor: 'token_embd.weight'"],
        ),
        (
            [("token_embd.weight", [32, 8], F16, 0), ("output_norm.weight", [32], F32, 1024)],
            EMBED + EMBED[:128],
            ["tensor info 1", "gap after the previous tensor: 'token_embd.weight' (F16 [32, 8]) ends at 512"],
        ),
        ([("token_embd.weight", [32, 8], Q8_0, 0)], EMBED, ["GGUF data", "follow the last tensor 'token_embd.weight'"]),
        ([("token_embd.weight", [32, 8], F16, 0)], EMBED, ["GGUF data", "512 bytes follow the last tensor"]),
        ([("token_embd.weight", [30, 8], Q8_0, 0)], EMBED, ["blocks of 32 values but its first dimension is 30"]),
        (
            [("token_embd.weight", [32, 8], F32, 0)],
            EMBED[:1000],
            ["GGUF data (tensor 'token_embd.weight')", "truncated"],
        ),
        ([("token_embd.weight", [32, 2**40], F32, 0)], EMBED, ["is 140737488355328 bytes", "truncated"]),
        ([("token_embd.weight", [32, 8, 1, 1, 1], F32, 0)], EMBED, ["5 dimensions"]),
        ([("token_embd.weight", [32, 8], 99, 0)], EMBED, ["tensor type 99 is not a ggml type"]),
        (
            [("token_embd.weight", [32, 8], F32, 0), ("token_embd.weight", [32], F32, 1024)],
            EMBED + EMBED[:128],
            ["tensor info 1", "a second tensor of this name"],
        ),
    ],
)
def test_tensor_offsets_types_and_sizes_are_checked(tmp_path, tensors, data, words):
    refused(tmp_path, build([], tensors, data), *words)


def test_metadata_is_checked_against_the_tensors_present(tmp_path):
    refused(tmp_path, model_file(block_count=2**32 - 1), "'qwen3.block_count' is 4294967295", "tensors for 1 layers")
    refused(tmp_path, model_file(eos=10**6), "'tokenizer.ggml.eos_token_id' is 1000000", "8-token vocabulary")


def test_non_finite_weights_are_refused_by_name(tmp_path):
    data = bytearray(model_file())
    at = data.index(np.ones((8, 32), np.float32).tobytes()) + 4 * 37  # element [1, 5]
    data[at : at + 4] = np.float32(np.nan).tobytes()
    (tmp_path / "nan.gguf").write_bytes(bytes(data))
    with Checkpoint.open(tmp_path / "nan.gguf") as ckpt, pytest.raises(WeightsError) as e:
        ckpt.get("model.embed_tokens.weight")
    assert "tensor 'model.embed_tokens.weight': element [1, 5] is NaN" in str(e.value)


def test_a_fifo_or_a_device_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "x.gguf")
    done: list[str] = []

    def open_it() -> None:
        try:
            GGUFFile(tmp_path / "x.gguf")
        except WeightsError as e:
            done.append(str(e))

    worker = threading.Thread(target=open_it, daemon=True)
    worker.start()
    worker.join(10)
    assert done and "not a regular file" in done[0]
    with pytest.raises(WeightsError, match="not a regular file"):
        GGUFFile("/dev/zero")


TRUNCATE_AFTER_MAP = textwrap.dedent(
    """
    import os, sys
    from fs_weights.gguf_file import GGUFFile
    path = sys.argv[1]
    f = GGUFFile(path)
    os.truncate(path, 64)
    try:
        print("returned", float(f.raw("model.embed_tokens.weight").sum()))
    except Exception as e:
        print(type(e).__name__, e)
    """
)


def test_a_file_truncated_after_it_was_mapped_is_an_error_not_sigbus(tmp_path):
    (tmp_path / "t.gguf").write_bytes(model_file())
    done = subprocess.run([sys.executable, "-c", TRUNCATE_AFTER_MAP, str(tmp_path / "t.gguf")], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("GGUFFormatError") and "truncated after it was opened" in done.stdout, done.stdout


def test_the_header_parser_agrees_with_the_gguf_packages_reader(tmp_path):
    path = tmp_path / "ref.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_uint8("a.u8", 7), w.add_int64("a.i64", -5), w.add_float64("a.f64", 0.1), w.add_bool("a.bool", True)
    w.add_float32("a.f32", 1e-6), w.add_string("a.str", "naïve 你好"), w.add_array("a.ints", [1, 2, 3])
    w.add_array("a.strs", ["x", "", "Ġhello"]), w.add_array("a.bools", [True, False])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((8, 32)).astype(np.float32))
    w.add_tensor("output_norm.weight", rng.standard_normal(32).astype(np.float16))
    q = gguf.GGMLQuantizationType.Q8_0
    w.add_tensor("output.weight", gguf.quants.quantize(rng.standard_normal((8, 64)).astype(np.float32), q), raw_dtype=q)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    ref, ours = gguf.GGUFReader(str(path)), GGUFFile(path)
    assert ours.metadata == {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert [(t.name, t.ggml_type, t.dims, t.begin) for t in ours.header.tensors] == [
        (t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), t.data_offset) for t in ref.tensors
    ]
    for t in ref.tensors:
        assert np.array_equal(ours.stored_bytes({"token_embd": "model.embed_tokens.weight", "output_norm":
                              "model.norm.weight", "output": "lm_head.weight"}[t.name.split(".")[0]]),
                              np.asarray(t.data).reshape(-1).view(np.uint8))  # fmt: skip


VALID = model_file(layers=2)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.sampled_from([1, 4, 8]), st.integers(0, U64_MAX)),
                max_size=3), st.integers(0, len(VALID)))  # fmt: skip
def test_any_damage_to_a_header_or_tensor_table_is_refused_or_reads_cleanly(tmp_path, writes, cut):
    """Overwrite 1, 4 or 8 bytes anywhere (counts, lengths, types, dims, offsets, data) with any value, then cut
    the file anywhere: the result opens and every tensor reads, or it is a WeightsError naming the file."""
    data = bytearray(VALID)
    for at, width, value in writes:
        data[at : at + width] = (value % 2 ** (8 * width)).to_bytes(width, "little")[: len(data) - at]
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(bytes(data[:cut] if cut else data))
    try:
        with Checkpoint.open(path) as ckpt:
            gguf_config(ckpt.files[0])  # type: ignore[arg-type]
            for name in ckpt.names():
                ckpt.get(name, None, dequantize=True)
    except GGUFFormatError as e:
        assert str(path) in str(e) and "byte offset" in str(e), e
    except WeightsError as e:
        assert str(path) in str(e), e


@pytest.mark.parametrize(
    "knobs, why",
    [({"mlp_only_layers": [1]}, r"layers \[1\] are dense"), ({"norm_topk_prob": False}, "norm_topk_prob is false")],
)
def test_a_qwen3_moe_llama_cpp_cannot_run_is_not_exported(tmp_path, knobs, why):
    """llama.cpp's qwen3moe makes every layer sparse and renormalizes the top-k: anything else would run wrong."""
    from fs_weights import preset, write_random_checkpoint
    from fs_weights.gguf_export import write_gguf

    moe = preset("tiny", model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                 norm_topk_prob=True, vocab_size=512, bos_token_id=None, eos_token_id=None)  # fmt: skip
    src = write_random_checkpoint(tmp_path / "moe", moe.replace(**knobs), dtype="float32")
    with pytest.raises(WeightsError, match=f"llama.cpp's qwen3moe GGUF has every layer sparse.*{why}"):
        write_gguf(src, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_inspect_counts_a_quantized_gguf_as_the_model_it_holds(tmp_path):
    """The issue's complaint: a 4-bit file reported its packed words (152M for a 0.6B Q4_K_M). The file's own
    config gives the logical count, the tied embedding once, and a cross-check verdict."""
    from fs_weights import preset, write_random_checkpoint
    from fs_weights.crosscheck import cross_check
    from fs_weights.gguf_export import write_gguf
    from fs_weights.report import tensor_report

    c = preset("tiny", vocab_size=512, bos_token_id=None, eos_token_id=None)
    src = write_random_checkpoint(tmp_path / "src", c, dtype="float32")
    with Checkpoint.open(src) as ck:
        want = cross_check(c, ck).parameters
    report = tensor_report(write_gguf(src, tmp_path / "q.gguf", ggml_type="Q4_0"))
    assert report["parameters"] == want and report["verdict"] == "ok"
    assert report["stored_elements"] < want  # what was printed before: packed 4-bit words and float32 scales
