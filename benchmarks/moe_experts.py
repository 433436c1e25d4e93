"""One Qwen3-MoE layer's experts on the CPU kernels: the grouped call (cpu/experts.py) against the per-expert loop.

    uv run nox -s bench -- moe_experts
    uv run --all-packages --all-extras --group bench python benchmarks/moe_experts.py [--experts 32] [--rounds 5]

The peer is the reference loop (numpy/moe.py's ``SparseMoE.__call__``) on the very same layer object and the same
tiles, in the same process: the figure is what grouping saves (fewer calls, the activations prepared once), not a
kernel difference - both give the same bits, checked here on every input before timing. Qwen3-30B-A3B's expert
shapes (hidden 2048, width 768, 8 per token) with random weights; ``--experts`` of its 128 (only the chosen ones
are read, so the count changes the router's work, not the experts'). Rounds interleave the two; best round kept.
"""

import argparse
import time

import numpy as np

from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.experts import GroupedMoE
from fs_model.numpy.mlp import MLP
from fs_model.numpy.moe import SparseMoE
from fs_weights import f32_to_bf16

H, M, K = 2048, 768, 8  # Qwen3-30B-A3B: hidden_size, moe_intermediate_size, num_experts_per_tok


def layer(fmt: str, experts: int, rng: np.random.Generator) -> GroupedMoE:
    def linear(n: int, k: int) -> AffineLinear | Bf16Linear:
        w = (rng.standard_normal((n, k)) * 0.02).astype(np.float32)
        return Bf16Linear(f32_to_bf16(w)) if fmt == "bf16" else AffineLinear(quantize_affine(w, bits=int(fmt[3:])))

    shapes = {"gate_proj": (M, H), "up_proj": (M, H), "down_proj": (H, M)}
    mlps = [MLP({name: linear(*shape) for name, shape in shapes.items()}) for _ in range(experts)]
    router = AffineLinear(quantize_affine(rng.standard_normal((experts, H)).astype(np.float32), bits=8))
    moe = GroupedMoE(router, mlps, K, True)
    if moe.gate_up is None:
        raise SystemExit("the tiles do not run on this CPU: nothing is grouped")
    return moe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--formats", nargs="+", default=["int4", "int8", "bf16"])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| format (tile) | tokens | per-expert loop ms | grouped ms | speedup |\n|---|---|---|---|---|")
    for fmt in args.formats:
        moe = layer(fmt, args.experts, rng)
        for T in args.tokens:
            xs = [rng.standard_normal((1, T, H)).astype(np.float32) for _ in range(args.calls)]
            for x in xs:  # the contract first: the same bits
                assert np.array_equal(moe(x), SparseMoE.__call__(moe, x))
            best = {"loop": np.inf, "grouped": np.inf}
            for _ in range(args.rounds):
                for name, run in (("loop", lambda x: SparseMoE.__call__(moe, x)), ("grouped", moe)):
                    t0 = time.perf_counter()
                    for x in xs:
                        run(x)
                    best[name] = min(best[name], (time.perf_counter() - t0) / len(xs) * 1e3)
            kind = moe.gate_up.first.kind if moe.gate_up is not None else "?"
            print(f"| {fmt} ({kind}) | {T} | {best['loop']:.3f} | {best['grouped']:.3f} | "
                  f"{best['loop'] / best['grouped']:.2f}× |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
