"""Checkpoints that are damaged or lie about themselves: ``load_model`` raises one ``ModelError`` naming the file
and key before any compute; the CLI prints one line. The weights digest tells same-shaped checkpoints apart."""

import json
import shutil
import subprocess
import sys

import pytest

from fs_model import ModelError, load_model


@pytest.fixture
def copy(checkpoints, tmp_path):
    src = next(iter(checkpoints.values()))
    return shutil.copytree(src, tmp_path / "m")


@pytest.mark.parametrize(
    "change,words",
    [
        ({"rms_norm_eps": float("nan")}, "'rms_norm_eps' must be a finite positive number"),
        ({"num_attention_heads": 0}, "'num_attention_heads' must be positive"),
        ({"quantization": {"bits": "x", "group_size": 64}}, "'quantization': 'bits' must be one of"),
    ],
)
def test_bad_config_values_are_model_errors(copy, change, words):
    cfg = json.loads((copy / "config.json").read_text()) | change
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=words) as e:
        load_model(copy)
    assert "config.json" in str(e.value)


def test_a_shard_truncated_on_disk_is_refused(copy):
    shard = next(copy.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-1000])
    with pytest.raises(ModelError, match="truncated file"):
        load_model(copy)


def test_the_weights_digest_separates_same_shaped_checkpoints(checkpoints, tmp_path):
    from fs_weights import write_random_checkpoint

    src = next(iter(checkpoints.values()))
    a = load_model(src)
    cfg = json.loads((src / "config.json").read_text())
    from fs_weights import Qwen3Config

    other = write_random_checkpoint(tmp_path / "other", Qwen3Config.from_dict(cfg), seed=99, dtype="float32")
    b = load_model(other)
    assert len(a.weights_digest) == 64 and a.weights_digest == load_model(src).weights_digest
    assert a.weights_digest != b.weights_digest


def test_cli_errors_are_one_line(copy):
    (copy / "config.json").write_text("{")
    done = subprocess.run(
        [sys.executable, "-m", "fs_model.cli", "logits", "--model", str(copy), "--ids", "1", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("fs-model: error: ") and "config.json: not valid JSON" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "fs_model.cli", "logits", "--model", str(copy), "--ids", "1", "--top", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "argument --top: '0' is not a positive integer" in done.stderr
