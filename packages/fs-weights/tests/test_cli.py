import json
import subprocess
import sys

import pytest

from fs_weights import save_safetensors, write_random_checkpoint
from fs_weights.cli import main


def test_inspect_table_and_json(tmp_path, tiny, capsys):
    d = write_random_checkpoint(tmp_path / "m", tiny, max_shard_bytes=60_000)
    assert main(["inspect", str(d)]) == 0
    out = capsys.readouterr().out
    assert "model.layers.1.mlp.down_proj.weight" in out and "BF16" in out and "64x128" in out
    assert "cross-check: ok" in out and "parameters: 164,288 (0.2M)" in out
    assert main(["inspect", str(d), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "ok" and report["tensor_count"] == len(report["tensors"]) == 25
    assert isinstance(report["parameters"], int) and report["files"] > 1
    assert {"name", "dtype", "shape", "bytes", "file"} <= set(report["tensors"][0])


def test_inspect_reports_a_failed_cross_check_with_exit_1(tmp_path, tiny, capsys):
    d = write_random_checkpoint(tmp_path / "m", tiny)
    (d / "extra.safetensors").unlink(missing_ok=True)
    import numpy as np

    save_safetensors(d / "extra.safetensors", {"stray": np.zeros(2, np.float32)})
    assert main(["inspect", str(d)]) == 1
    out = capsys.readouterr().out
    assert "FAILED: 1 unexpected" in out and "unexpected stray" in out


def test_random_command_and_errors(tmp_path, capsys):
    assert main(["random", str(tmp_path / "r"), "--preset", "tiny", "--dtype", "float16", "--quantize", "8"]) == 0
    assert "wrote tiny (float16, 8-bit)" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert main(["random", str(tmp_path / "r")]) == 2
    assert "not empty" in capsys.readouterr().err
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\0\0\0\0\0\0\0{broken")
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fs-weights: error: ") and "bad.safetensors" in err and "Traceback" not in err


def test_console_entry_point_runs(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "fs_weights.cli", "inspect", str(tmp_path / "none")], capture_output=True, text=True
    )
    assert r.returncode == 2 and "no such file or directory" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["random"], ["inspect"], ["random", "x", "--preset", "huge"]])
def test_usage_errors_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2


def test_version_is_the_package_version():
    import fs_weights

    cmd = [sys.executable, "-m", "fs_weights.cli", "--version"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"fs-weights {fs_weights.__version__}"


def test_the_load_bar_shows_bytes():
    import io

    from fs_weights.command_line import progress_bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    show, close = progress_bar(out)
    assert show is not None
    for done in (1 << 20, 3 << 20, 4 << 20):
        show(done, 4 << 20)
    close()
    text = out.getvalue()
    assert "/4.00M" in text and "B/s" in text, text[-200:]  # a byte total and a byte rate (tqdm redraws at most 10/s)
    assert progress_bar(io.StringIO())[0] is None  # not a terminal: no bar
    assert progress_bar(Terminal(), quiet=True)[0] is None  # --quiet: no bar


def test_random_checkpoint_progress_counts_every_byte(tmp_path):
    from fs_weights import Checkpoint, preset

    calls: list[tuple[int, int]] = []
    d = write_random_checkpoint(tmp_path / "m", preset("tiny"), quantize=4, progress=lambda a, b: calls.append((a, b)))
    size = Checkpoint.open(d).nbytes
    dones = [x for x, _ in calls]
    assert {t for _, t in calls} == {size} and dones == sorted(dones) and dones[-1] == size
