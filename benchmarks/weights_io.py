"""fs-weights on the real Qwen3-0.6B shapes: inspect time and the memory cost of reading one layer.

    uv run --all-packages python benchmarks/weights_io.py [--dir /tmp/qwen3-0.6b-random]

Peer: the `safetensors` library (safe_open + get_tensor), measured in the same run on the same files.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from fs_weights import preset, write_random_checkpoint

READ_LAYER = """
import json, sys
def hwm():  # peak RSS of this process image (ru_maxrss would include the parent's peak from before exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
from fs_weights import Checkpoint
ck = Checkpoint.open(sys.argv[1])
before = hwm()
names = [n for n in ck.names() if n.startswith(sys.argv[2])]
arrays = [ck.get(n) for n in names]
print(json.dumps({"rss_growth": hwm() - before, "layer_bytes": sum(ck.info(n).nbytes for n in names),
                  "f32_bytes": sum(a.nbytes for a in arrays)}))
"""

PEER_LIST = """
import glob, json, sys, time
from safetensors import safe_open
t0 = time.perf_counter(); n = 0
for f in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
    with safe_open(f, framework="numpy") as h:
        n += sum(len(h.get_slice(k).get_shape()) >= 0 for k in h.keys())
print(json.dumps({"seconds": time.perf_counter() - t0, "tensors": n}))
"""

FS_LIST = """
import json, sys, time
from fs_weights import Checkpoint
t0 = time.perf_counter()
ck = Checkpoint.open(sys.argv[1]); n = sum(len(ck.info(k).shape) >= 0 for k in ck.names())
print(json.dumps({"seconds": time.perf_counter() - t0, "tensors": n}))
"""


def run(code: str, *args: str) -> dict:
    return json.loads(
        subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/fs-bench/qwen3-0.6b-bf16-sharded")
    args = ap.parse_args()
    d = Path(args.dir)
    if not (d / "config.json").exists():
        t0 = time.perf_counter()
        write_random_checkpoint(d, preset("qwen3-0.6b"), dtype="bfloat16", max_shard_bytes=500 * 2**20)
        print(f"wrote {d} in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    out = subprocess.run(["fs-weights", "inspect", str(d), "--json"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    r = json.loads(out.stdout)
    print(
        f"fs-weights inspect (CLI, end to end): {wall:.2f}s  tensors={r['tensor_count']} files={r['files']} "
        f"parameters={r['parameters']:,} verdict={r['verdict']}"
    )
    fs, peer = run(FS_LIST, str(d)), run(PEER_LIST, str(d))
    print(
        f"open + list {fs['tensors']} tensors: fs-weights {fs['seconds'] * 1e3:.1f} ms, safetensors "
        f"{peer['seconds'] * 1e3:.1f} ms  (fs / safetensors time = {fs['seconds'] / peer['seconds']:.2f}x)"
    )
    layer = run(READ_LAYER, str(d), "model.layers.13.")
    print(
        f"read block 13 as float32: {layer['layer_bytes'] / 2**20:.1f} MiB stored (bf16) of a "
        f"{r['bytes'] / 2**30:.2f} GiB checkpoint -> peak RSS grew {layer['rss_growth'] / 2**20:.1f} MiB = "
        f"{layer['rss_growth'] / layer['f32_bytes']:.2f}x the float32 arrays returned, "
        f"{layer['rss_growth'] / r['bytes']:.3f}x the file"
    )


if __name__ == "__main__":
    main()
