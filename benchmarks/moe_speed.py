"""Qwen3-MoE at Qwen3-30B-A3B's shapes, fs against ``llama-bench`` on the very same GGUF file.

    uv run nox -s bench -- moe_speed        # or, with llama.cpp built (benchmarks/llama_cpp.py):
    uv run --all-packages --all-extras --group parity --group bench python benchmarks/moe_speed.py --llama-bin DIR

Qwen3-30B-A3B's layer (hidden 2048, 32 query / 4 KV heads of 128, 128 experts of width 768, 8 per token) and its
vocabulary, random weights, but ``--layers`` of its 48 layers (the whole model is 61 GB in bf16, more than this
disk and these rounds allow; each layer is the same work, so a per-layer figure is the difference between two layer
counts). Written as bf16, exported by ``fs-convert-gguf`` as llama.cpp's ``qwen3moe``, quantized to ``--type`` by
``llama-quantize``; fs loads that file as it is (``dtype="native"``), llama.cpp times it with ``llama-bench -t 2``.
Prefill P and decode N, every engine in its own process, rounds interleaved, each engine's best round kept.
"""

import argparse
import subprocess
import sys
from pathlib import Path

from fs_generate.gguf_cli import export
from fs_weights import preset, write_random_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from common import CACHE
from same_file import interleaved, table

A3B = dict(  # Qwen/Qwen3-30B-A3B's config.json, but num_hidden_layers
    vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_attention_heads=32, num_key_value_heads=4,
    head_dim=128, max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
    model_type="qwen3_moe", num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
    decoder_sparse_step=1, mlp_only_layers=[],
)  # fmt: skip


def gguf_file(layers: int, kind: str, llama_bin: Path, tokenizer: str) -> Path:
    out = CACHE / f"qwen3-30b-a3b-{layers}l-{kind.lower()}.gguf"
    if out.exists():
        return out
    src = CACHE / f"qwen3-30b-a3b-{layers}l-bf16"
    if not (src / "config.json").exists():
        print(f"writing {src} (random, bf16)", flush=True)
        write_random_checkpoint(src, preset("tiny", **A3B, num_hidden_layers=layers), dtype="bfloat16",
                                tokenizer=tokenizer)  # fmt: skip
    bf16 = src.with_suffix(".gguf")
    if not bf16.exists():
        export(str(src), bf16, "bf16")
    part = out.with_suffix(".part")
    subprocess.run([str(llama_bin / "llama-quantize"), str(bf16), str(part), kind], check=True, capture_output=True)
    part.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True, type=Path, help="llama.cpp's bin directory (benchmarks/llama_cpp.py)")
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 4], help="layer counts (two give a per-layer figure)")
    ap.add_argument("--type", default="Q4_0", help="llama-quantize's type for both engines' file")
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    args = ap.parse_args()
    S, N = args.prefill, args.decode
    files = {n: gguf_file(n, args.type, args.llama_bin, args.tokenizer) for n in args.layers}
    best = interleaved(files, args.llama_bin, S, N, args.rounds)
    print(f"\nQwen3-30B-A3B layers, {args.type}, prefill {S}, decode {N}, 2 threads, best of {args.rounds} rounds")
    table(
        files,
        best,
        "layers",
        "RSS GB fs/llama",
        lambda n, a, b: f"{a['peak_rss'] / 1e9:.2f} / {b['peak_rss'] / 1e9:.2f}",
    )
    if len(files) == 2:  # per layer: the difference of the per-token times
        lo, hi = sorted(files)
        for what in ("decode_tps",):
            ms = {e: (1e3 / best[f"{e} {hi}"][what] - 1e3 / best[f"{e} {lo}"][what]) / (hi - lo)
                  for e in ("fs", "llama.cpp") if f"{e} {hi}" in best and f"{e} {lo}" in best}  # fmt: skip
            print("per-layer decode ms/token: " + ", ".join(f"{e} {v:.2f}" for e, v in ms.items()))


if __name__ == "__main__":
    main()
