"""What batch invariance costs: prefill-128 and decode tok/s with FS_BATCH_INVARIANT=1 (the default) and =0, for
the kept-weight formats, interleaved in one run (random Qwen3-0.6B shapes, bf16 checkpoint; int8/int4 quantized at
load), best of ``--rounds``.

    uv run --all-packages --all-extras python benchmarks/invariance_cost.py [--rounds 2]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

FORMATS = {"bf16": ("bfloat16", "-"), "int8": ("bfloat16", "int8"), "int4": ("bfloat16", "int4")}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from common import qwen3_06b
    from cpu_speed import FS

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--decode", type=int, default=16)
    args = ap.parse_args()
    ckpt = qwen3_06b("bfloat16")
    best: dict[tuple[str, str], dict] = {}
    for rnd in range(args.rounds):
        for fmt, (dtype, quant) in FORMATS.items():
            for inv in ("1", "0"):
                env = dict(os.environ, FS_BATCH_INVARIANT=inv)
                argv = [sys.executable, "-c", FS, ckpt, dtype, quant, str(args.prefill), str(args.decode)]
                r = json.loads(subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout)
                b = best.setdefault((fmt, inv), r)
                for k in ("prefill_tps", "decode_tps"):
                    b[k] = max(b[k], r[k])
                print(f"round {rnd + 1} {fmt} FS_BATCH_INVARIANT={inv}: {r['prefill_tps']:.1f} / {r['decode_tps']:.2f}")
    print(f"\nbest of {args.rounds}: prefill-{args.prefill} and decode tok/s, invariant vs not")
    for fmt in FORMATS:
        a, b = best[(fmt, "1")], best[(fmt, "0")]
        pre, dec = (a[k] / b[k] for k in ("prefill_tps", "decode_tps"))
        print(
            f"{fmt}: prefill {a['prefill_tps']:.1f} vs {b['prefill_tps']:.1f} ({pre:.2f}x),"
            f" decode {a['decode_tps']:.2f} vs {b['decode_tps']:.2f} ({dec:.2f}x)"
        )


if __name__ == "__main__":
    main()
