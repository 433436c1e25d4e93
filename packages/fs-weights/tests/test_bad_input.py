"""Hostile and careless input to every file fs-weights reads, and to its command line: each ends in one
``WeightsError`` subclass naming the file and key (or a clean ``prog: error:`` line), never a traceback, a signal,
or zeros for bytes that are not there."""

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fs_weights import (
    Checkpoint,
    ConfigError,
    SafetensorsError,
    SafetensorsFile,
    WeightsError,
    cross_check,
    load_config,
    load_generation_config,
    preset,
    write_random_checkpoint,
)
from fs_weights.command_line import run_main
from fs_weights.jsonfile import MAX_DEPTH, parse_json

DEEP = "[" * 100_000 + "]" * 100_000  # RecursionError inside json.loads without the guard
SHALLOW_BUT_DEEP = '{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)  # parses; nesting refused


BASE_CONFIG = preset("tiny").to_dict()
QWEN3_KEYS = set(BASE_CONFIG) | {"quantization", "temperature", "top_p", "top_k", "do_sample", "eos_token_id"}


@pytest.fixture
def model(tmp_path, tiny):
    return write_random_checkpoint(tmp_path / "m", tiny, max_shard_bytes=60_000)  # sharded: has an index


@pytest.mark.parametrize("text", [DEEP, SHALLOW_BUT_DEEP], ids=["recursion", "depth"])
@pytest.mark.parametrize(
    "name,load,error",
    [
        ("config.json", lambda d: load_config(d), ConfigError),
        ("generation_config.json", lambda d: load_generation_config(d), ConfigError),
        ("model.safetensors.index.json", lambda d: Checkpoint.open(d), SafetensorsError),
    ],
)
def test_deeply_nested_json_names_the_file(model, text, name, load, error):
    (model / name).write_text(text)
    with pytest.raises(error, match=f"{name}: JSON nested deeper than {MAX_DEPTH} levels"):
        load(model)


def test_deeply_nested_safetensors_header_names_the_file(tmp_path):
    blob = DEEP.encode()
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(SafetensorsError, match=r"x.safetensors: header \(bytes 8-\d+\): JSON nested deeper"):
        SafetensorsFile(path)


@pytest.mark.parametrize(
    "change,words",
    [
        ({"rms_norm_eps": float("nan")}, "'rms_norm_eps' must be a finite positive number, got nan"),
        ({"rms_norm_eps": float("inf")}, "'rms_norm_eps' must be a finite positive number"),
        ({"rope_theta": -1.0}, "'rope_theta' must be a finite positive number"),
        ({"quantization": {"bits": "x", "group_size": 64}}, "'quantization': 'bits' must be one of 2, 4, 8, got 'x'"),
        ({"quantization": {"group_size": 64}}, "'quantization': 'bits' must be one of 2, 4, 8, got None"),
        ({"quantization": {"bits": 4, "group_size": 0}}, "'group_size' must be one of 16, 32, 64, 128, got 0"),
        ({"quantization": 5}, "'quantization' must be dict, got int 5"),
        ({"eos_token_id": [1, "2"]}, "'eos_token_id' must be an int or a list of ints"),
        ({"hidden_act": "gelu"}, "'hidden_act' is 'gelu'"),
        ({"sliding_window": 0}, "'sliding_window' must be positive"),
    ],
)
def test_config_values_are_validated_naming_the_key(model, change, words):
    cfg = json.loads((model / "config.json").read_text()) | change
    (model / "config.json").write_text(json.dumps(cfg))  # json writes NaN / Infinity literals, as Python reads them
    with pytest.raises(ConfigError) as e:
        load_config(model)
    assert words in str(e.value) and "config.json" in str(e.value)


def test_per_module_quantization_overrides_are_validated(model):
    cfg = json.loads((model / "config.json").read_text())
    cfg["quantization"] = {"bits": 4, "group_size": 64, "model.layers.0.mlp.down_proj": {"bits": 3, "group_size": 64}}
    (model / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="'quantization': 'model.layers.0.mlp.down_proj' 'bits' must be one of"):
        Checkpoint.open(model)  # the checkpoint reads quantization itself: the same check applies


@pytest.mark.parametrize(
    "change,words",
    [
        ({"temperature": float("nan")}, "'temperature' must be a finite non-negative number"),
        ({"top_p": 1.5}, "'top_p' must be in (0, 1]"),
        ({"top_k": -1}, "'top_k' must be a finite non-negative number"),
        ({"eos_token_id": "x"}, "'eos_token_id' must be an int or a list of ints"),
    ],
)
def test_generation_config_values_are_validated(model, change, words):
    (model / "generation_config.json").write_text(json.dumps(change))
    with pytest.raises(ConfigError) as e:
        load_generation_config(model)
    assert words in str(e.value) and "generation_config.json" in str(e.value)


@pytest.mark.parametrize(
    "data,words",
    [
        (b"\xff\xfe{}", "not valid UTF-8 (byte offset 0)"),
        (b'{"a": 1,,}', "not valid JSON: Expecting property name"),
        (b"", "not valid JSON: Expecting value (line 1, column 1)"),
    ],
)
def test_malformed_json_names_the_file_and_position(model, data, words):
    (model / "config.json").write_bytes(data)
    with pytest.raises(ConfigError, match="config.json: " + words.replace("(", r"\(").replace(")", r"\)")):
        load_config(model)


@pytest.mark.parametrize("shard", ["", ".", "..", "a/b.safetensors", "x\0.safetensors"])
def test_index_shard_names_must_be_plain_file_names(model, shard):
    index = json.loads((model / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = shard
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match="is not a plain file name"):
        Checkpoint.open(model)


def test_index_that_is_a_list_is_refused(model):
    (model / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(SafetensorsError, match="'weight_map' must be an object"):
        Checkpoint.open(model)


TRUNCATE_AFTER_MAP = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from fs_weights import SafetensorsError, SafetensorsFile, save_safetensors
    path = sys.argv[1]
    save_safetensors(path, {"big": np.ones(1 << 16, np.float32), "small": np.ones(3, np.float32)})
    f = SafetensorsFile(path)
    f.raw("big")  # the file is now mapped
    os.truncate(path, f.tensors["big"].begin + 100)
    for name in ("big", "small"):
        try:
            a = f.raw(name)
            print(name, "returned", float(a.sum()))
        except SafetensorsError as e:
            print(name, "refused:", e)
    """
)


def test_a_file_truncated_after_it_was_mapped_is_an_error_not_sigbus_or_zeros(tmp_path):
    """Run in a child: without the re-check the child dies of SIGBUS (or prints zeros for 'small')."""
    done = subprocess.run(
        [sys.executable, "-c", TRUNCATE_AFTER_MAP, str(tmp_path / "t.safetensors")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(" refused: " in ln and "truncated after it was opened" in ln for ln in lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=64), st.integers(0, 200))
@example(b"0", 1)  # a header that is a bare JSON number (hypothesis found it: a TypeError in the depth check)
@example(b'"x"', 3)
def test_arbitrary_bytes_are_a_safetensors_error_or_a_valid_file(tmp_path, tail, n):
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(struct.pack("<Q", n) + tail)
    try:
        f = SafetensorsFile(path)
    except SafetensorsError as e:
        assert str(path) in str(e)
        return
    for name in f:
        f.raw(name)


def test_a_tensor_name_with_a_lone_surrogate_prints_escaped(tmp_path):
    header = {"bad\udc80name": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    blob = json.dumps(header).encode()  # ASCII-escaped: "\\udc80" in the file
    path = tmp_path / "s.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0\0\0\0")
    done = subprocess.run(
        [sys.executable, "-m", "fs_weights.cli", "inspect", str(path)], capture_output=True, timeout=120
    )
    assert b"Traceback" not in done.stderr and b"bad\\udc80name" in done.stdout, done.stderr
    assert done.returncode in (0, 1)


def test_bad_flag_values_are_argparse_errors(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "fs_weights.cli", "random", str(tmp_path / "r"), "--seed", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "argument --seed: '-1' is not a non-negative integer" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r").exists()


def test_every_ending_of_a_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)

    def raise_(e):
        def body():
            raise e

        return body

    assert run_main("p", raise_(ConfigError("config.json: 'x' is bad")), (ConfigError,)) == 2
    assert capsys.readouterr().err == "p: error: config.json: 'x' is bad\n"
    assert run_main("p", raise_(KeyboardInterrupt()), (ConfigError,)) == 130
    assert capsys.readouterr().err == ""
    assert run_main("p", raise_(ZeroDivisionError("boom")), (ConfigError,)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "p: internal error: ZeroDivisionError: boom" and "Traceback" not in "".join(err)
    trace = err[1].split(" is in ")[1].split(";")[0]
    assert "ZeroDivisionError" in Path(trace).read_text() and os.path.dirname(trace) == str(tmp_path)


def test_closed_pipe_is_a_quiet_exit(tmp_path, tiny):
    d = write_random_checkpoint(tmp_path / "m", tiny)
    done = subprocess.run(
        f"{sys.executable} -m fs_weights.cli inspect {d} | head -c1", shell=True, capture_output=True, timeout=120
    )
    assert done.stderr == b"" and len(done.stdout) == 1


def test_parse_json_raises_the_callers_error_class():
    with pytest.raises(SafetensorsError, match="where: JSON nested deeper"):
        parse_json(DEEP, "where", SafetensorsError)
    assert parse_json(b'{"a": [1, 2]}', "ok") == {"a": [1, 2]}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(QWEN3_KEYS)), value=JSON_VALUES)
def test_any_json_value_for_any_config_key_loads_or_is_a_config_error(tmp_path, key, value):
    (tmp_path / "config.json").write_text(json.dumps({**BASE_CONFIG, key: value}))
    (tmp_path / "generation_config.json").write_text(json.dumps({key: value}))
    for load in (load_config, load_generation_config):
        try:
            load(tmp_path)
        except ConfigError as e:
            assert "config.json" in str(e)


def test_writers_replace_only_regular_files(tmp_path):
    """A FIFO (standing in for /dev/full, which a test must not risk) or a directory at the target is refused
    before a byte is written, and no temporary file is left; a regular file is replaced."""
    from fs_weights import save_safetensors
    from fs_weights.atomic import write_atomic

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for target in ("fifo", "dir"):
        with pytest.raises(WeightsError, match=f"{target}: exists and is a .*, not a regular file"):
            write_atomic(tmp_path / target, "x")
        with pytest.raises(SafetensorsError, match="not a regular file"):
            save_safetensors(tmp_path / target, {"a": np.zeros(2, np.float32)})
    pytest.importorskip("gguf")
    from fs_weights.gguf_export import write_gguf

    src = write_random_checkpoint(tmp_path / "src", preset("tiny"))
    with pytest.raises(WeightsError, match="fifo: exists and is a device, FIFO or socket"):
        write_gguf(src, tmp_path / "fifo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "src"]
    write_atomic(tmp_path / "plain", "old")
    write_atomic(tmp_path / "plain", "new")
    assert (tmp_path / "plain").read_text() == "new"


def test_a_layer_count_far_beyond_the_tensors_is_refused_at_once(model):
    """num_hidden_layers = 10**9 once built 11 billion expected names (MemoryError); the layers present bound it."""
    cfg = json.loads((model / "config.json").read_text()) | {"num_hidden_layers": 10**9}
    (model / "config.json").write_text(json.dumps(cfg))
    with Checkpoint.open(model) as ckpt:
        report = cross_check(load_config(model), ckpt)
    assert not report.ok and report.problems(1) == [f"missing model.layers.{BASE_CONFIG['num_hidden_layers']}"
                                                    "..999999999.* (every tensor)"]  # fmt: skip


def test_duplicate_keys_are_refused_where_asked():
    assert parse_json('{"a": 1, "a": 2}', "x.json") == {"a": 2}  # json's rule, for files others write
    with pytest.raises(WeightsError, match="x.json: key 'a' appears twice in one object"):
        parse_json('{"b": {"a": 1, "a": 2}}', "x.json", unique_keys=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused_by_tensor_and_element(tmp_path, tiny, dtype, bad, monkeypatch):
    from fs_weights import save_safetensors
    from fs_weights.dtypes import from_float32

    d = write_random_checkpoint(tmp_path / "m", tiny, dtype=dtype)
    with Checkpoint.open(d) as ckpt:
        tensors = {n: np.array(ckpt.raw(n)) for n in ckpt.names()}
        codes = {n: ckpt.info(n).dtype for n in ckpt.names()}
    w = tensors["model.layers.1.mlp.up_proj.weight"]
    w[3, 7] = from_float32(np.array([bad], np.float32), codes["model.layers.1.mlp.up_proj.weight"])[0]
    save_safetensors(d / "model.safetensors", tensors, codes)
    kind = "NaN" if np.isnan(bad) else "Inf"
    with Checkpoint.open(d) as ckpt, pytest.raises(WeightsError) as e:
        for n in ckpt.names():
            ckpt.get(n)
    assert f"tensor 'model.layers.1.mlp.up_proj.weight': element [3, 7] is {kind}" in str(e.value)
    monkeypatch.setenv("FS_CHECK_TENSORS", "0")  # the documented way to load them anyway
    with Checkpoint.open(d) as ckpt:
        assert not np.isfinite(ckpt.get("model.layers.1.mlp.up_proj.weight")[3, 7])
