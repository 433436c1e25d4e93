"""How far int8 / int4 weights (quantized at load, MLX affine, group 64) move the model from its bf16 weights.

    uv run --all-packages --all-extras python benchmarks/quant_quality.py [--model DIR] [--tokens 64]

Reference: the same checkpoint with bf16 weights kept (exact bf16 arithmetic in float32). Reports the relative
max logit error on a prompt and the greedy agreement rate: the share of 64 greedy steps at which the quantized
model picks the reference's token when both are fed the reference's sequence (teacher-forced, so one early
disagreement does not count twice).
"""

import argparse
import sys

import numpy as np


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b

    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="model directory (default: the random bf16 Qwen3-0.6B-shaped checkpoint)")
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    path = args.model or qwen3_06b("bfloat16")
    ref = load_model(path, dtype="bfloat16")
    prompt = [(7 * i + 3) % min(150000, ref.vocab_size) for i in range(32)]
    caches = ref.make_cache()
    logits = [ref(np.array([prompt]), 0, caches, logits_to_keep=1)[0, -1]]
    seq = list(prompt)
    for _ in range(args.tokens - 1):
        seq.append(int(np.argmax(logits[-1])))
        logits.append(ref(np.array([[seq[-1]]]), len(seq) - 1, caches, logits_to_keep=1)[0, -1])
    want = np.stack(logits)
    for q in ("int8", "int4"):
        m = load_model(path, quantize=q)
        caches = m.make_cache()  # step by step, as generation runs (decode takes the integer path where it applies)
        got = [m(np.array([prompt]), 0, caches, logits_to_keep=1)[0, -1]]
        for i in range(len(prompt), len(seq)):
            got.append(m(np.array([[seq[i]]]), i, caches, logits_to_keep=1)[0, -1])
        got = np.stack(got)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        agree = float((got.argmax(-1) == want.argmax(-1)).mean())
        print(f"{q}: max |Δlogits| / max |logits| = {err:.3f}; greedy agreement {agree:.0%} over {len(want)} steps")


if __name__ == "__main__":
    main()
