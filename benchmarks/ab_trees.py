"""A/B of two checkouts of this repository on the CPU path: prefill-128 and decode-32 tok/s per weight format,
interleaved rounds (best of 3), the same random Qwen3-0.6B-shape checkpoint, each run in its own process.

    git worktree add /tmp/before <rev>
    uv run --all-packages --all-extras python benchmarks/ab_trees.py /tmp/before . [--gguf FILE ...] [--only NAME ...]

``FS_*`` switches in the environment reach both trees' processes (``FS_ISA=avx2``: the AVX2 kernels on an AVX-512
host). ``--gguf``: also time these GGUF files as they are (``dtype="native"``: K-quants on their own kernels), named by
their file names; ``--only``: time just these formats (f32, bf16, int8, int4, or a GGUF file's name).

Used for "no performance change" claims (docs/performance.md); the timed code is cpu_speed.py's, minus the
parts an older tree may lack.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import qwen3_06b

ck = qwen3_06b("bfloat16")
CODE = r"""
import json, sys, time
import numpy as np
import fs_model
from fs_model import load_model
path, dtype, quantize, S, N = sys.argv[1], sys.argv[2], sys.argv[3], 128, 32
model = load_model(path, dtype=None if dtype == "native" else dtype, quantize=None if quantize == "-" else quantize)
ids = [(7 * i + 3) % 150000 for i in range(S)]
for n in (8, 16):
    model(np.array([ids[:n]]), 0, model.make_cache(), logits_to_keep=1)
caches = model.make_cache()
t0 = time.perf_counter(); model(np.array([ids]), 0, caches, logits_to_keep=1); prefill = time.perf_counter() - t0
t0 = time.perf_counter()
for i in range(N):
    model(np.array([[ids[i]]]), S + i, caches, logits_to_keep=1)
decode = time.perf_counter() - t0
print(json.dumps({"src": fs_model.__file__, "prefill_tps": S / prefill, "decode_tps": N / decode}))
"""
ap = argparse.ArgumentParser()
ap.add_argument("before")
ap.add_argument("after")
ap.add_argument("--gguf", nargs="*", default=[], type=Path)
ap.add_argument("--only", nargs="*")
args = ap.parse_args()
trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
fmts = [("f32", "float32", "-", ck), ("bf16", "bfloat16", "-", ck), ("int8", "bfloat16", "int8", ck),
        ("int4", "bfloat16", "int4", ck)] + [(f.name, "native", "-", f) for f in args.gguf]  # fmt: skip
fmts = [f for f in fmts if not args.only or f[0] in args.only]
best: dict[tuple[str, str], dict[str, float]] = {}
for rnd in range(3):
    for f, dt, q, path in fmts:
        for t, root in trees.items():
            src = ":".join(f"{root}/packages/{p}/src" for p in ("fs-model", "fs-weights", "fs-kvcache"))
            env = {"PYTHONPATH": src, "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
            env |= {k: v for k, v in os.environ.items() if k.startswith("FS_")}  # e.g. FS_ISA=avx2 for both trees
            cmd = [sys.executable, "-c", CODE, str(path), dt, q]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            assert r["src"].startswith(root), r  # the tree under test, not an installed copy
            b = best.setdefault((f, t), {"prefill_tps": 0.0, "decode_tps": 0.0})
            for k in b:
                b[k] = max(b[k], r[k])
            print(rnd, f, t, round(r["prefill_tps"], 1), round(r["decode_tps"], 2), flush=True)
print("\nbest of 3 (tok/s): before -> after (after / before)")
for f, *_ in fmts:
    a, b = best[(f, "before")], best[(f, "after")]
    pre = f"prefill {a['prefill_tps']:7.1f} -> {b['prefill_tps']:7.1f} ({b['prefill_tps'] / a['prefill_tps']:.2f}x)"
    dec = f"decode {a['decode_tps']:6.2f} -> {b['decode_tps']:6.2f} ({b['decode_tps'] / a['decode_tps']:.2f}x)"
    print(f"{f:5s} {pre}  {dec}")
