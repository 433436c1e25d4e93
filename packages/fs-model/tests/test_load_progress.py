"""load_model's progress is in bytes of the stored tensors: it rises with every weight and ends at the checkpoint's
size (a quantized weight's scales and biases counted with it), so a bar can show bytes and an ETA."""

import pytest

from fs_model import load_model
from fs_weights import Checkpoint, preset, write_random_checkpoint


@pytest.mark.parametrize("quantize", [None, 4])
def test_progress_counts_every_stored_byte_once(tmp_path, quantize):
    d = write_random_checkpoint(tmp_path / "m", preset("tiny"), dtype="bfloat16", quantize=quantize)
    calls: list[tuple[int, int]] = []
    load_model(d, progress=lambda done, total: calls.append((done, total)))
    size = Checkpoint.open(d).nbytes
    assert len(calls) == len([n for n in Checkpoint.open(d).names() if not n.endswith((".scales", ".biases"))])
    assert {t for _, t in calls} == {size}
    dones = [x for x, _ in calls]
    assert dones == sorted(dones) and len(set(dones)) == len(dones) and dones[-1] == size


@pytest.mark.parity
def test_the_mlx_backend_reports_the_same_bytes(tmp_path, reference):
    reference("mlx.core")
    d = write_random_checkpoint(tmp_path / "m", preset("tiny"), dtype="bfloat16", quantize=4)
    numpy_calls: list[tuple[int, int]] = []
    mlx_calls: list[tuple[int, int]] = []
    load_model(d, progress=lambda done, total: numpy_calls.append((done, total)))
    load_model(d, backend="mlx", progress=lambda done, total: mlx_calls.append((done, total)))
    assert mlx_calls == numpy_calls
