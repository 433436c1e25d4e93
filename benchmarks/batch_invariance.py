"""Where a row's logits still depend on what it is computed with, per weight format, on this machine.

    uv run --all-packages --all-extras python benchmarks/batch_invariance.py [--preset tiny|qwen3-0.6b]

For one 37-token prompt it compares the last position's logits of the solo prefill with: the same prompt split
36 + 1 (a cache hit then one token), the prompt as row 1 of a left-padded batch of 3 and of 12, and one decode step
alone vs inside batches of 4 and 12 rows. ``==`` is bitwise equality (the [kernels] issue's target for every
kept-weight format); otherwise the largest absolute difference. A diagnostic, not a benchmark: no timing.
"""

import argparse
from pathlib import Path

import numpy as np

from fs_model import load_model
from fs_weights import preset, write_random_checkpoint

FORMATS = {
    "f32": {"dtype": "float32"},
    "bf16": {"dtype": "native"},
    "int8": {"quantize": "int8"},
    "int4": {"quantize": "int4"},
}


def last(model, rows, offset=0, caches=None):
    L = max(map(len, rows))
    pad = [L - len(r) for r in rows]
    tokens = model.tokens_array([[0] * p + r for p, r in zip(pad, rows, strict=True)])
    out = model(tokens, offset, caches if caches is not None else model.make_cache(), logits_to_keep=1, pad=pad)
    return model.to_numpy(out)[:, -1]


def diff(a, b) -> str:
    return "==" if np.array_equal(a, b) else f"{np.abs(a - b).max():.1e}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args()
    d = Path(f"/tmp/fs-bench/invariance-{args.preset}")
    if not d.exists():
        cfg = preset(args.preset, vocab_size=512) if args.preset == "tiny" else preset(args.preset)
        write_random_checkpoint(d, cfg, dtype="bfloat16", seed=3)
    rng = np.random.default_rng(0)
    V = load_model(d).config.vocab_size
    P = rng.integers(0, min(V, 150_000), 37).tolist()
    others = [rng.integers(0, min(V, 150_000), n).tolist() for n in (20, 37, 5, 30, 11, 37, 2, 9, 33, 14, 25)]
    print(f"{'format':6s} {'36+1':>8s} {'batch 3':>8s} {'batch 12':>8s} {'decode 4':>9s} {'decode 12':>9s}")
    for name, kw in FORMATS.items():
        m = load_model(d, **kw)
        solo = last(m, [P])[0]
        c = m.make_cache()
        last(m, [P[:36]], 0, c)
        split = last(m, [P[36:]], 36, c)[0]
        b3 = last(m, [others[0], P, others[2]])[1]
        b12 = last(m, [others[0], P, *others[2:]])[1]
        same = [P] + [((np.array(P) + k) % V).tolist() for k in range(1, 12)]

        def step(rows):
            c = m.make_cache()
            last(m, rows, 0, c)
            return last(m, [[5]] * len(rows), 37, c)[0]

        d1 = step(same[:1])
        print(
            f"{name:6s} {diff(split, solo):>8s} {diff(b3, solo):>8s} {diff(b12, solo):>8s} "
            f"{diff(step(same[:4]), d1):>9s} {diff(step(same), d1):>9s}"
        )


if __name__ == "__main__":
    main()
