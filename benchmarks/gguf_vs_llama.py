"""The GGUF types Qwen3 users download, made by llama.cpp's own ``llama-quantize`` and read by both: does fs give
llama.cpp's next-token log-probabilities on the same file?

    uv run --group bench --package fs-generate python benchmarks/gguf_vs_llama.py --llama-bin DIR

A random Qwen3 (hidden 256, so K-quant super-blocks of 256 fit every matrix) with Qwen3's real vocabulary, and a random
Qwen3-MoE of the same shapes (8 experts, 2 per token; llama.cpp's ``qwen3moe``), are each written as BF16 by
``fs-convert-gguf``, then quantized by ``llama-quantize`` to Q4_K_M, Q5_K_M, Q6_K and Q4_1; "fs Q4_K" is
``fs-convert-gguf --outtype q4_k``'s own file (fs's Q4_K writer), which llama.cpp must run as it runs its own. For each
file llama-server (``n_probs: 20``, greedy, one token) and fs (the file loaded as it is: Q4_K/Q4_1 on the 4-bit kernels,
Q5_K as 8-bit codes on the 8-bit ones, Q6_K packed in 6 bits with int8 activations) score the same prompt; printed:
whether the argmax agrees, and the largest and mean |fs - llama.cpp| log-probability over llama.cpp's top 20. llama.cpp
rounds activations (to Q8_K for K-quant dot products, to bf16 for BF16 rows) and fs does not everywhere, so the two
differ by that rounding, not by zero.
"""

import argparse
import subprocess  # llama-quantize
from pathlib import Path

import numpy as np
from common import free_port, post_json, server

from fs_generate.gguf_cli import export
from fs_model import load_model
from fs_weights import preset, write_random_checkpoint

TYPES = ["BF16", "Q4_K_M", "Q5_K_M", "Q6_K", "Q4_1", "fs Q4_K"]
MODELS = {  # the dense Qwen3, and a Qwen3-MoE llama.cpp's qwen3moe runs (every layer sparse, top-k renormalized)
    "dense": {},
    "moe": dict(
        model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=256, norm_topk_prob=True
    ),
}
IDS = [785, 6722, 315, 9625, 374, 12095, 13, 576, 1156, 4128]  # "The capital of France is Paris. The first ..."


def llama_logprobs(llama_server: Path, gguf: Path) -> tuple[int, dict[int, float]]:
    port = free_port()
    with server([str(llama_server), "-m", str(gguf), "--port", str(port), "-t", "2", "-c", "256"], port) as proc:
        body = {"prompt": IDS, "n_predict": 1, "n_probs": 20, "temperature": 0, "cache_prompt": False,
                "post_sampling_probs": False}  # fmt: skip
        first = post_json(port, "/completion", body, proc)["completion_probabilities"][0]
        return first["id"], {t["id"]: t["logprob"] for t in first["top_logprobs"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True, type=Path, help="llama.cpp's bin directory (benchmarks/llama_cpp.py)")
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    ap.add_argument("--dir", type=Path, default=Path("/tmp/fs-bench/gguf-vs-llama"))
    args = ap.parse_args()
    shape = dict(hidden_size=256, intermediate_size=512, head_dim=64, num_attention_heads=4, num_key_value_heads=2,
                 tie_word_embeddings=False)  # fmt: skip
    print("| model | file | tensor types | same argmax | max abs dlogprob | mean |")
    print("|---|---|---|---|---|---|")
    for model, knobs in MODELS.items():
        root = args.dir / model
        src, bf16 = root / "src", root / "bf16.gguf"
        if not (src / "config.json").exists():
            write_random_checkpoint(src, preset("tiny", **shape, **knobs), dtype="bfloat16", tokenizer=args.tokenizer)
        if not bf16.exists():
            export(str(src), bf16, "bf16")
        for kind in TYPES:
            f = bf16 if kind == "BF16" else root / f"{kind.lower().replace(' ', '-')}.gguf"
            if kind == "fs Q4_K" and not f.exists():
                export(str(src), f, "q4_k")
            elif not f.exists():
                subprocess.run([str(args.llama_bin / "llama-quantize"), str(bf16), str(f), kind], check=True,
                               capture_output=True)  # fmt: skip
            from gguf import GGUFReader

            kinds = ", ".join(sorted({t.tensor_type.name for t in GGUFReader(str(f)).tensors}))
            top, theirs = llama_logprobs(args.llama_bin / "llama-server", f)
            z = np.asarray(load_model(f).forward(IDS), np.float64)[-1]
            lp = z - z.max() - np.log(np.exp(z - z.max()).sum())
            d = [abs(lp[i] - p) for i, p in theirs.items()]
            same = int(np.argmax(lp)) == top
            print(f"| {model} | {kind} | {kinds} | {same} | {max(d):.4f} | {float(np.mean(d)):.4f} |", flush=True)


if __name__ == "__main__":
    main()
