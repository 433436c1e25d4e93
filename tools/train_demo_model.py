"""Train the tiny demo model that `fs-generate` runs when no --model is given.

    uv run --group train --package fs-weights python tools/train_demo_model.py [--steps 700] [--out DIR]

A Qwen3-architecture model (q/k norms, GQA 4:2, split-half RoPE, SwiGLU, tied embeddings; 4.2M parameters) and a
byte-level BPE tokenizer with Qwen3's normalizer, pre-tokenizer regex, special tokens at the top of the
vocabulary and a ChatML template, both trained on the documentation topics that ship with every CPython
(`pydoc_data.topics`, PSF licence). JAX on the CPU: MLX's Linux CPU matmul is the unoptimised reference BLAS
(4 GFLOP/s here, against JAX's ~200+), which would turn 20 minutes into hours. Deterministic for a seed.
Writes an ordinary Qwen3 model directory (bf16 safetensors) that fs, HF tokenizers and mlx-lm all load.
"""

import argparse
import hashlib
import json
import math
import platform
import pydoc_data.topics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from fs_tokenizer.pipeline import QWEN2_PATTERN as QWEN3_PATTERN  # Qwen3 pre-tokenizes as Qwen2 does
from fs_weights import Qwen3Config, expected_tensors, save_safetensors
from fs_weights.byte_tokenizer import FILES, SPECIALS
from fs_weights.dtypes import f32_to_bf16

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "packages/fs-generate/src/fs_generate/demo_model"
VOCAB = 4096
CHATML = json.loads((FILES / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]
CONFIG = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=1024,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    tie_word_embeddings=True,
    bos_token_id=VOCAB - len(SPECIALS),
    eos_token_id=VOCAB - len(SPECIALS) + 2,
)


def corpus() -> tuple[list[str], list[str], str]:
    keys = sorted(pydoc_data.topics.topics)
    texts = [pydoc_data.topics.topics[k] for k in keys]
    digest = hashlib.sha256("\n\n".join(texts).encode()).hexdigest()
    held = {k for i, k in enumerate(keys) if i % 20 == 7}  # every 20th topic is never trained on
    return (
        [t for k, t in zip(keys, texts, strict=True) if k not in held],
        [t for k, t in zip(keys, texts, strict=True) if k in held],
        digest,
    )


def train_tokenizer(train: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN3_PATTERN), behavior="isolated"), bl])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(train, trainer)
    assert tok.get_vocab_size() == VOCAB - len(SPECIALS), tok.get_vocab_size()
    tok.add_special_tokens(SPECIALS[:3])
    tok.add_tokens(SPECIALS[3:])
    assert tok.token_to_id(SPECIALS[0]) == VOCAB - len(SPECIALS)
    return tok


# --- the model, in JAX: the same graph as fs_model/numpy ---------------------------------------------------------


def init_params(key: jax.Array, c: Qwen3Config) -> dict[str, jax.Array]:
    params = {}
    shapes = expected_tensors(c)
    keys = jax.random.split(key, len(shapes))
    for k, (name, shape) in zip(keys, shapes.items(), strict=True):
        if len(shape) == 1:
            params[name] = jnp.ones(shape, jnp.float32)
        elif name.endswith("embed_tokens.weight"):
            params[name] = 0.02 * jax.random.normal(k, shape, jnp.float32)
        else:
            scale = 1 / math.sqrt(shape[1])
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                scale /= math.sqrt(2 * c.num_hidden_layers)
            params[name] = scale * jax.random.normal(k, shape, jnp.float32)
    return params


def forward(params: dict[str, jax.Array], ids: jax.Array, c: Qwen3Config) -> jax.Array:
    B, S = ids.shape
    nh, nkv, D, eps = c.num_attention_heads, c.num_key_value_heads, c.dim_head, c.rms_norm_eps

    def rms(x: jax.Array, w: jax.Array) -> jax.Array:
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w

    inv = c.rope_theta ** (-jnp.arange(0, D // 2, dtype=jnp.float32) * 2 / D)
    ang = jnp.arange(S, dtype=jnp.float32)[:, None] * inv
    cos, sin = jnp.cos(ang), jnp.sin(ang)

    def rope(x: jax.Array) -> jax.Array:  # [B, S, h, D]
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        cs, sn = cos[None, :, None], sin[None, :, None]
        return jnp.concatenate([x1 * cs - x2 * sn, x1 * sn + x2 * cs], axis=-1)

    mask = jnp.tril(jnp.ones((S, S), bool))
    x = params["model.embed_tokens.weight"][ids]
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        h = rms(x, params[p + "input_layernorm.weight"])
        q = rope(
            rms(
                (h @ params[p + "self_attn.q_proj.weight"].T).reshape(B, S, nh, D),
                params[p + "self_attn.q_norm.weight"],
            )
        )
        k = rope(
            rms(
                (h @ params[p + "self_attn.k_proj.weight"].T).reshape(B, S, nkv, D),
                params[p + "self_attn.k_norm.weight"],
            )
        )
        v = (h @ params[p + "self_attn.v_proj.weight"].T).reshape(B, S, nkv, D)
        k, v = jnp.repeat(k, nh // nkv, axis=2), jnp.repeat(v, nh // nkv, axis=2)  # head h reads kv head h // G
        scores = jnp.einsum("bshd,bthd->bhst", q, k) / math.sqrt(D)
        att = jax.nn.softmax(jnp.where(mask, scores, -1e30), axis=-1)
        out = jnp.einsum("bhst,bthd->bshd", att, v).reshape(B, S, nh * D)
        x = x + out @ params[p + "self_attn.o_proj.weight"].T
        h = rms(x, params[p + "post_attention_layernorm.weight"])
        g = h @ params[p + "mlp.gate_proj.weight"].T
        x = x + (jax.nn.silu(g) * (h @ params[p + "mlp.up_proj.weight"].T)) @ params[p + "mlp.down_proj.weight"].T
    x = rms(x, params["model.norm.weight"])
    return x @ params["model.embed_tokens.weight"].T


def loss_fn(params: dict[str, jax.Array], batch: jax.Array, c: Qwen3Config) -> jax.Array:
    logits = forward(params, batch[:, :-1], c)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def write_model_dir(out: Path, params: dict[str, np.ndarray], tok: Tokenizer, c: Qwen3Config, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    names = expected_tensors(c)
    save_safetensors(
        out / "model.safetensors",
        {n: f32_to_bf16(np.asarray(params[n])) for n in names},
        {n: "BF16" for n in names},
        {"format": "pt"},
    )
    cfg = c.to_dict() | {"architectures": ["Qwen3ForCausalLM"], "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    gen = {
        "bos_token_id": c.bos_token_id,
        "eos_token_id": [c.eos_token_id, c.bos_token_id],
        "pad_token_id": c.bos_token_id,
        "do_sample": False,
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    tok.save(str(out / "tokenizer.json"))
    added = {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": i < 3,
        }
        for i, t in enumerate(SPECIALS)
    }
    tcfg = {
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": c.max_position_embeddings,
        "tokenizer_class": "Qwen2Tokenizer",
        "errors": "replace",
        "split_special_tokens": False,
        "added_tokens_decoder": added,
        "chat_template": CHATML,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    (out / "TRAINING.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--plot", type=Path, default=ROOT / "docs/img/demo_loss.png")
    args = ap.parse_args()
    t_start = time.perf_counter()
    train, held, digest = corpus()
    tok = train_tokenizer(train)
    eot = tok.token_to_id("<|endoftext|>")
    ids = np.concatenate([np.array([*tok.encode(t).ids, eot], np.int32) for t in train])
    held_ids = np.concatenate([np.array([*tok.encode(t).ids, eot], np.int32) for t in held])
    counts = np.bincount(ids, minlength=VOCAB).astype(np.float64) + 1.0  # add-one unigram baseline
    unigram_ppl = float(np.exp(-np.mean(np.log(counts[held_ids] / counts.sum()))))
    print(
        f"corpus: pydoc_data.topics sha256 {digest[:16]}…, {len(train)} train topics ({len(ids):,} tokens), "
        f"{len(held)} held-out ({len(held_ids):,} tokens); unigram held-out perplexity {unigram_ppl:.1f}"
    )
    c = Qwen3Config.from_dict(CONFIG)
    params = init_params(jax.random.PRNGKey(args.seed), c)
    n_params = sum(int(np.prod(p.shape)) for p in params.values())
    warmup = min(50, args.steps // 4)
    sched = optax.warmup_cosine_decay_schedule(0.0, args.lr, warmup, max(args.steps, warmup + 1), args.lr / 10)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.1))
    state = opt.init(params)

    @jax.jit
    def step(params, state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, c)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    eval_loss = jax.jit(lambda p, b: loss_fn(p, b, c))
    held_windows = np.stack([held_ids[i : i + args.seq + 1] for i in range(0, len(held_ids) - args.seq - 1, args.seq)])
    rng = np.random.default_rng(args.seed)
    losses, evals = [], []
    best: tuple[float, int, dict[str, np.ndarray]] = (float("inf"), 0, {})
    t0 = time.perf_counter()
    for s in range(1, args.steps + 1):
        starts = rng.integers(0, len(ids) - args.seq - 1, args.batch)
        batch = jnp.asarray(np.stack([ids[i : i + args.seq + 1] for i in starts]))
        params, state, loss = step(params, state, batch)
        losses.append(float(loss))
        if s % 50 == 0 or s == args.steps:
            evals.append(
                (
                    s,
                    float(
                        np.mean(
                            [
                                float(eval_loss(params, jnp.asarray(held_windows[j : j + 16])))
                                for j in range(0, len(held_windows), 16)
                            ]
                        )
                    ),
                )
            )
            if evals[-1][1] < best[0]:  # keep the weights with the best held-out loss (the corpus is small)
                best = (evals[-1][1], s, {k: np.asarray(v) for k, v in params.items()})
        done = time.perf_counter() - t0
        bar = "#" * (30 * s // args.steps)
        sys.stderr.write(
            f"\r[{bar:<30}] step {s}/{args.steps} loss {losses[-1]:.3f} "
            f"held-out {evals[-1][1] if evals else float('nan'):.3f} "
            f"{s * args.batch * args.seq / done:,.0f} tok/s ETA {done / s * (args.steps - s):.0f}s"
        )
        sys.stderr.flush()
    sys.stderr.write("\n")
    held_ppl = math.exp(best[0])
    meta = {
        "corpus": "CPython pydoc_data.topics (Python documentation topics), PSF License Agreement",
        "corpus_sha256": digest,
        "python": platform.python_version(),
        "train_topics": len(train),
        "held_out_topics": len(held),
        "train_tokens": len(ids),
        "held_out_tokens": len(held_ids),
        "parameters": n_params,
        "steps": args.steps,
        "batch": args.batch,
        "seq": args.seq,
        "lr": args.lr,
        "seed": args.seed,
        "final_train_loss": losses[-1],
        "kept_step": best[1],
        "held_out_loss": best[0],
        "held_out_perplexity": held_ppl,
        "unigram_held_out_perplexity": unigram_ppl,
        "train_seconds": round(time.perf_counter() - t_start, 1),
        "jax": jax.__version__,
    }
    write_model_dir(args.out, best[2], tok, c, meta)
    print(json.dumps(meta, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.plot(range(1, len(losses) + 1), losses, lw=0.8, label="train loss")
        ax.plot(*zip(*evals, strict=True), marker="o", label="held-out loss")
        ax.axhline(math.log(unigram_ppl), ls="--", color="gray", label="unigram baseline (held-out)")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_title(f"demo model: {n_params / 1e6:.1f}M params, {args.steps} steps on pydoc_data.topics")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"loss curve: {args.plot}")
    except ImportError:
        print("matplotlib not installed: no loss curve")


if __name__ == "__main__":
    main()
