"""Plots for docs/performance.md from the recorded numbers in docs/data/results.json and
docs/data/cpu_speed.json (written by ``benchmarks/cpu_speed.py --out``).

uv run --group bench python benchmarks/plot_results.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]


def bars(ax, data: dict[str, float], title: str, unit: str) -> None:
    names, values = list(data), list(data.values())
    ax.barh(names, values, color=["#2b6cb0" if n.startswith("fs") else "#a0aec0" for n in names])
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:g}", va="center")
    ax.set_title(title)
    ax.set_xlabel(unit)
    ax.margins(x=0.15)  # room for the value printed after the longest bar
    ax.invert_yaxis()


def main() -> None:
    r = json.loads((ROOT / "docs/data/results.json").read_text())
    out = ROOT / "docs/img"
    out.mkdir(exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.2))
    bars(axes[0], r["prefill_128_tok_s"], "Qwen3-0.6B shapes: prefill, 128 tokens", "tokens/s")
    bars(axes[1], r["decode_tok_s"]["float32"], "decode, float32", "tokens/s")
    bars(axes[2], r["decode_tok_s"]["bfloat16"], "decode, bfloat16", "tokens/s")
    fig.text(0.5, 0.01, r["machine"], fontsize=8, ha="center", va="bottom")
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # room for the machine line below the axes' labels
    fig.savefig(out / "model_speed.png", dpi=110)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3))
    ctx = r["cached_decode_ms_per_token"]
    axes[0].plot([int(c) for c in ctx], list(ctx.values()), marker="o")
    axes[0].set_xscale("log", base=2)
    axes[0].set_title("cached decode cost vs context (numpy, f32)")
    axes[0].set_xlabel("context tokens")
    axes[0].set_ylabel("ms / token")
    bars(axes[1], r["tokenizer_mb_s"]["pydoc_data.topics"], "encode, one thread (pydoc topics)", "MB/s")
    fig.tight_layout()
    fig.savefig(out / "cache_and_tokenizer.png", dpi=110)
    cpu_speed(json.loads((ROOT / "docs/data/cpu_speed.json").read_text()), out / "cpu_speed.png")
    engine_serving(json.loads((ROOT / "docs/data/engine_serving.json").read_text()), out / "engine_serving.png")
    serve_load(json.loads((ROOT / "docs/data/serve_load.json").read_text()), out / "serve_load.png")
    print(f"wrote {out}/model_speed.png, cache_and_tokenizer.png, cpu_speed.png, engine_serving.png, serve_load.png")


def cpu_speed(r: dict, path: Path) -> None:
    """Issue 8's run: fs, llama.cpp and mlx-lm side by side per weight format, decode and prefill."""
    formats = [("f32", "fs f32", None, "mlx-lm f32"), ("bf16", "fs bf16", "llama.cpp BF16", "mlx-lm bf16")]
    formats += [("8-bit", "fs int8", "llama.cpp Q8_0", None), ("4-bit", "fs int4", "llama.cpp Q4_0", None)]
    engines = r["engines"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    titles = ("decode after a 128-token prompt (batch 1)", "prefill, 128 tokens")
    for ax, key, title in zip(axes, ("decode_tps", "prefill_tps"), titles, strict=True):
        for j, (label, color) in enumerate((("fs", "#2b6cb0"), ("llama.cpp", "#dd6b20"), ("mlx-lm", "#a0aec0"))):
            xs, ys = [], []
            for i, f in enumerate(formats):
                name, x = f[1 + j], i + (j - 1) * 0.27
                if name and name in engines:
                    xs.append(x)
                    ys.append(engines[name][key])
                else:  # that engine has no such format, or it was not measured: say so, do not leave a gap
                    ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, color=color, rotation=90)
            # an engine with no bars still gets its own colour in the legend (an empty bar set has none)
            ax.bar(xs, ys, width=0.27, color=color)
            ax.plot([], [], "s", color=color, label=label if xs else f"{label} (not measured)")
            for x, y in zip(xs, ys, strict=True):
                ax.text(x, y, f"{y:.0f}" if y >= 10 else f"{y:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(formats)), [f[0] for f in formats])
        ax.set_ylabel("tokens/s")
        ax.set_title(f"Qwen3-0.6B shapes, 2 CPU cores: {title}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def engine_serving(r: dict, path: Path) -> None:
    """The engine issue's run: aggregate generated tok/s of the same requests four ways, per weight format."""
    ways = [
        ("fs Engine", "aggregate_tps", "#2b6cb0"),
        ("fs one by one", "one_by_one_tps", "#90cdf4"),
        ("llama.cpp batched", "llama_no_share", "#dd6b20"),
        ("llama.cpp batched, -pps", "llama_pps", "#fbd38d"),
    ]
    fmts = list(r["results"])
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for j, (label, key, color) in enumerate(ways):
        xs = [i + (j - 1.5) * 0.2 for i in range(len(fmts))]
        ys = [r["results"][f].get(key, 0.0) for f in fmts]
        ax.bar(xs, ys, width=0.2, color=color, label=label)
        for x, y in zip(xs, ys, strict=True):
            ax.text(x, y, f"{y:.1f}" if y else "n/a", ha="center", va="bottom", fontsize=7)
    w = r["workload"]
    ax.set_xticks(range(len(fmts)), fmts)
    ax.set_ylabel("generated tokens/s")
    ax.set_title(
        f"{w['requests']} requests, {w['system']}-token shared prompt + {w['user']}, {w['new']} new each, "
        f"batch {w['max_batch']} ({r['date']})",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def serve_load(r: dict, path: Path) -> None:
    """The serve issue's run: aggregate tok/s and TTFT p50 against concurrent streams, per server and format."""
    colors = {"fs-serve": "#2b6cb0", "llama-server": "#dd6b20", "mlx_lm.server": "#718096"}
    fmts = list(r["results"])
    fig, axes = plt.subplots(1, 2 * len(fmts), figsize=(5 * len(fmts) + 2, 3.4))
    for k, fmt in enumerate(fmts):
        for name, res in r["results"][fmt].items():
            if name not in colors:
                continue
            cs = [int(c) for c in res["levels"]]
            for ax, key in ((axes[2 * k], "aggregate_tps"), (axes[2 * k + 1], "ttft_p50")):
                ys = [res["levels"][str(c)][key] for c in cs]
                ax.plot(cs, ys, marker="o", color=colors[name], label=name)
        axes[2 * k].set_title(f"{fmt}: aggregate generated tok/s", fontsize=9)
        axes[2 * k + 1].set_title(f"{fmt}: time to first token p50 (s)", fontsize=9)
        for ax in axes[2 * k : 2 * k + 2]:
            ax.set_xlabel("concurrent streams")
            ax.set_xticks([int(c) for c in r["levels"]])
        axes[2 * k].legend(fontsize=7)
    fig.suptitle(f"random Qwen3-0.6B weights, {r['new']} new tokens per request, shared system prompt ({r['date']})",
                 fontsize=8, y=0.02)  # fmt: skip
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
