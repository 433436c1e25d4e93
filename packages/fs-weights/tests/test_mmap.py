"""Reading one layer costs that layer's bytes, not the file's: measured as peak RSS in a fresh process."""

import json
import subprocess
import sys

import pytest

from fs_weights import Qwen3Config, write_random_checkpoint

PROBE = """
import json, resource, sys
from fs_weights import Checkpoint
def rss():  # VmHWM: ru_maxrss would carry the parent's peak across exec
    try:
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
ck = Checkpoint.open(sys.argv[1]); before = rss()
names = [n for n in ck.names() if n.startswith("model.layers.3.")]
total = sum(float(ck.get(n).sum()) for n in names)
print(json.dumps({"before": before, "after": rss(), "layer_bytes": sum(ck.info(n).nbytes for n in names),
                  "file_bytes": ck.nbytes}))
"""


def wide_config(layers: int) -> Qwen3Config:
    """Layers big enough (3.5 MB each in float32) that page-level RSS effects dominate the runtime's noise."""
    cfg = dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=4)
    return Qwen3Config.from_dict({**cfg, "num_hidden_layers": layers, "head_dim": 64})


def test_one_layer_costs_its_bytes_not_the_files(tmp_path):
    cfg = wide_config(layers=24)
    d = write_random_checkpoint(tmp_path / "m", cfg, dtype="float32")
    out = subprocess.run([sys.executable, "-c", PROBE, str(d)], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["file_bytes"] > 20 * r["layer_bytes"]
    grew = r["after"] - r["before"]
    assert grew < 3 * r["layer_bytes"] + 8 * 2**20, r  # f32: mapped pages + one temporary per tensor


RELEASE = """
import json, sys
import numpy as np
from fs_weights import Checkpoint
def rss():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
ck = Checkpoint.open(sys.argv[1])
base = rss()
sums = [float(ck.raw(n).astype(np.float64).sum()) for n in ck.names()]
touched = rss()
for n in ck.names():
    ck.release(n)
released = rss()
again = [float(ck.raw(n).astype(np.float64).sum()) for n in ck.names()]
print(json.dumps({"touched": touched - base, "released": released - base, "same": sums == again,
                  "file_bytes": ck.nbytes}))
"""


def test_release_drops_a_tensors_pages_and_rereads_them(tmp_path):
    """What a loader that keeps only converted copies relies on to keep peak RSS near the kept bytes."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads VmRSS from /proc (Linux)")
    cfg = wide_config(layers=8)
    d = write_random_checkpoint(tmp_path / "m", cfg, dtype="float32")
    out = subprocess.run([sys.executable, "-c", RELEASE, str(d)], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["touched"] > 0.8 * r["file_bytes"], r  # reading mapped every page in
    assert r["released"] < 0.2 * r["file_bytes"], r  # release() took them out of this process's RSS
    assert r["same"]  # and the data reads back unchanged
