"""The MLX backend: the same Qwen3 graph on ``mx.fast`` kernels (rms_norm, rope, scaled_dot_product_attention),
on whatever device MLX has (Metal on Apple silicon, CPU or CUDA on Linux). Quantized checkpoints stay quantized:
``mx.quantized_matmul`` on the packed weights, no dequantized copy.
"""

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from fs_kvcache import BlockPool, KVStore, PagedBatch, PagedLayer, chunk_window
from fs_weights import Checkpoint, Qwen3Config

from ..errors import ModelError
from ..model import Model
from ..rope_scaling import rope_parameters
from .moe import SparseMoE, stacked
from .quantized_attention import quantize_kv, quantized_attention
from .shard import AllSum, check_divisible, rank_slice, shard_model, split_of

MLX_GROUPS = (32, 64, 128)  # the group sizes mx.quantized_matmul takes
DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


class Linear:
    """``x @ Wᵀ`` for a dense or an MLX-affine-quantized weight ``[out, in]``."""

    def __init__(
        self,
        w: mx.array,
        scales: mx.array | None = None,
        biases: mx.array | None = None,
        bits: int = 0,
        group_size: int = 0,
    ):
        self.w, self.scales, self.biases, self.bits, self.group_size = w, scales, biases, bits, group_size

    def __call__(self, x: mx.array) -> mx.array:
        if self.scales is None:
            return x @ self.w.T
        return mx.quantized_matmul(
            x, self.w, self.scales, self.biases, transpose=True, group_size=self.group_size, bits=self.bits
        )

    def rows(self, ids: mx.array) -> mx.array:
        """Embedding lookup: rows of the (dequantized) weight."""
        if self.scales is None or self.biases is None:
            return self.w[ids]
        return mx.dequantize(
            self.w[ids], self.scales[ids], self.biases[ids], group_size=self.group_size, bits=self.bits
        )


class Block:
    def __init__(self, w: dict[str, Any], c: Qwen3Config, shards: int = 1):
        self.w, self.nh, self.nkv, self.D, self.eps = (
            w,
            c.num_attention_heads // shards,  # this rank's heads under tensor parallelism
            c.num_key_value_heads // shards,
            c.dim_head,
            c.rms_norm_eps,
        )
        self.theta, self.scale = c.rope_theta, c.dim_head**-0.5
        inv_freq, self.mscale = rope_parameters(c)  # rope_scaling (YaRN): mx.fast.rope takes the periods
        self.freqs = None if c.rope_scaling is None else mx.array((1.0 / inv_freq).astype(np.float32))

    def rope(self, x: mx.array, offset: Any) -> mx.array:
        if self.freqs is None:
            return mx.fast.rope(x, self.D, traditional=False, base=self.theta, scale=1.0, offset=offset)
        if self.mscale != 1.0:  # q and k both: attention logits scaled by mscale², as mlx-lm's YarnRoPE
            x = x * self.mscale
        return mx.fast.rope(x, self.D, traditional=False, base=None, scale=1.0, offset=offset, freqs=self.freqs)

    def attention(self, x: mx.array, offset: Any, cache: Any, mask: Any) -> mx.array:
        if isinstance(cache, PagedLayer):
            return self.paged_attention(x, offset, cache)
        B, S, _ = x.shape
        w = self.w
        q = mx.fast.rms_norm(w["q_proj"](x).reshape(B, S, self.nh, self.D), w["q_norm"], self.eps)
        k = mx.fast.rms_norm(w["k_proj"](x).reshape(B, S, self.nkv, self.D), w["k_norm"], self.eps)
        v = w["v_proj"](x).reshape(B, S, self.nkv, self.D)
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        q, k = self.rope(q, offset), self.rope(k, offset)
        bits = getattr(cache, "bits", 0)
        if bits:  # a QuantizedKVCache: the new positions packed, attention over the packed history
            gs = cache.group_size
            K, V = cache.update_and_fetch(quantize_kv(k, bits, gs), quantize_kv(v, bits, gs))
            out = quantized_attention(q, K, V, self.scale, mask, bits, gs)
        else:
            if cache is not None:
                k, v = cache.update_and_fetch(k, v)
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)
        return w["o_proj"](out.transpose(0, 2, 1, 3).reshape(B, S, self.nh * self.D))

    def paged_attention(self, x: mx.array, positions: mx.array, cache: PagedLayer) -> mx.array:
        """An engine step: x [1, N, H] holds every sequence's new tokens, ``positions`` [N] theirs. Each token is
        its own row for RoPE (per-row offsets); K/V go into the store's slots, then each sequence attends over its
        history gathered from its blocks (MLX has no paged attention kernel; the gather is one take per layer)."""
        N, w, st, bt = x.shape[1], self.w, cache.store, cache.batch
        q = mx.fast.rms_norm(w["q_proj"](x).reshape(N, self.nh, 1, self.D), w["q_norm"], self.eps)
        k = mx.fast.rms_norm(w["k_proj"](x).reshape(N, self.nkv, 1, self.D), w["k_norm"], self.eps)
        v = w["v_proj"](x).reshape(N, self.nkv, self.D)
        q, k = self.rope(q, positions), self.rope(k, positions)
        new: Any = (k[:, :, 0].transpose(1, 0, 2), v.transpose(1, 0, 2))  # K, V [nkv, N, D]
        if st.bits:  # a quantized pool (the engine's kv_bits): codes written before anything reads them
            new = [tuple(p[0] for p in quantize_kv(x[None], st.bits, st.group_size)) for x in new]
        st.write(cache.layer, bt.slots, *new)
        outs = []
        for i in range(len(bt.context)):
            a, b, T = int(bt.starts[i]), int(bt.starts[i + 1]), int(bt.context[i])
            K, V = st.gather(cache.layer, bt.tables[i], T)
            qi = q[a:b, :, 0].transpose(1, 0, 2)[None]  # [1, nh, n, D]
            mask = "causal" if b - a > 1 else None
            if st.bits:
                o = quantized_attention(qi, K, V, self.scale, mask, st.bits, st.group_size)
            else:
                o = mx.fast.scaled_dot_product_attention(qi, K, V, scale=self.scale, mask=mask)
            outs.append(o[0].transpose(1, 0, 2))  # [n, nh, D]
        out = mx.concatenate(outs, axis=0).reshape(1, N, self.nh * self.D)
        return w["o_proj"](out)

    def __call__(self, x: mx.array, offset: Any, cache: Any, mask: Any) -> mx.array:
        w = self.w
        x = x + self.attention(mx.fast.rms_norm(x, w["input_layernorm"], self.eps), offset, cache, mask)
        h = mx.fast.rms_norm(x, w["post_attention_layernorm"], self.eps)
        if "moe" in w:  # a Qwen3-MoE sparse layer
            return x + w["moe"](h)
        return x + w["down_proj"](nn_silu(w["gate_proj"](h)) * w["up_proj"](h))


def nn_silu(z: mx.array) -> mx.array:
    return z * mx.sigmoid(z)


class MlxModel(Model):
    backend = "mlx"

    def __init__(
        self, config: Qwen3Config, weights: dict[str, Any], dtype: mx.Dtype, path: str = "<memory>", shards: int = 1
    ):
        super().__init__(config, path)
        self.dtype = dtype
        self.kv_heads = config.num_key_value_heads // shards  # this rank's share (all of them on one machine)
        self.tensor_group: Any = None
        self.embed = weights["model.embed_tokens"]
        self.lm_head = self.embed if config.tie_word_embeddings else weights["lm_head"]
        self.norm = weights["model.norm"]
        self.blocks = []
        for i in range(config.num_hidden_layers):
            p = f"model.layers.{i}."
            self.blocks.append(
                Block(
                    {k.removeprefix(p).split(".")[-1]: v for k, v in weights.items() if k.startswith(p)}, config, shards
                )
            )

    @classmethod
    def from_checkpoint(
        cls,
        config: Qwen3Config,
        ckpt: Checkpoint,
        path: str,
        *,
        dtype: str | None = None,
        quantize: str | None = None,
        kv_dtype: str | None = None,
        progress: Any = None,
        tensor_group: Any = None,
    ) -> "MlxModel":
        """``dtype`` is the compute dtype (default: the checkpoint's); quantized checkpoints stay quantized.
        ``tensor_group`` (an ``mx.distributed`` group of N ranks): this rank loads and runs its 1/N of every
        projection (``shard.py``)."""
        if quantize is not None:
            raise ModelError("quantize= applies to the numpy backend; for MLX use an MLX-quantized checkpoint")
        if kv_dtype is not None:
            raise ModelError("kv_dtype= applies to the numpy backend; MLX caches hold the compute dtype")
        name = dtype or _stored_dtype(ckpt)
        if name not in DTYPES:
            raise ModelError(f"dtype {name!r} is not available on the MLX backend (choose from {', '.join(DTYPES)})")
        dt = DTYPES[name]
        rank, N = (tensor_group.rank(), tensor_group.size()) if tensor_group is not None else (0, 1)
        if N > 1:
            check_divisible(config, N, (ckpt.quantization or {}).get("group_size"))

        def part(n: str) -> np.ndarray:
            return rank_slice(ckpt, n, rank, N)

        weights: dict[str, Any] = {}
        names = [n for n in ckpt.names() if not n.endswith((".scales", ".biases"))]
        done, total = 0, sum(map(ckpt.weight_nbytes, names))
        for n in names:
            if progress is not None:
                done += ckpt.weight_nbytes(n)
                progress(done, total)
            if ".mlp.experts." in n:  # stacked per layer below
                continue
            base = n.removesuffix(".weight")
            bits, group = ckpt.quant_params(n) if ckpt.is_quantized(n) else (0, 0)
            if group and group not in MLX_GROUPS:  # GGUF's Q6_K (groups of 16): the exact values, dequantized
                dense = ckpt.get(n, np.float32, dequantize=True)
                weights[base] = Linear(mx.array(rank_slice(ckpt, n, rank, N, dense)).astype(dt))
            elif group:
                weights[base] = Linear(
                    mx.array(part(n)),
                    _to_mx(ckpt, base + ".scales", dt, part(base + ".scales")),
                    _to_mx(ckpt, base + ".biases", dt, part(base + ".biases")),
                    bits,
                    group,
                )
            elif len(ckpt.info(n).shape) == 2:
                weights[base] = Linear(_to_mx(ckpt, n, dt, part(n)))
            else:
                weights[base] = _to_mx(ckpt, n, dt, part(n))
        for i in range(config.num_hidden_layers):
            if config.is_sparse(i):  # the router (a Linear, loaded above) and every expert's matrices stacked
                p = f"model.layers.{i}.mlp."
                gate, up, down = (
                    stacked(ckpt, p, config.num_experts, n, dt, part) for n in ("gate_proj", "up_proj", "down_proj")
                )
                moe = weights[p + "moe"] = SparseMoE(
                    weights.pop(p + "gate"), gate, up, down, config.num_experts_per_tok, config.norm_topk_prob
                )
                moe.group = tensor_group if N > 1 else None
        mx.eval([_arrays(v) for v in weights.values()])
        if N > 1:  # the column-split projections end with the group's sum
            for base in weights:
                if split_of(base + ".weight") == 1:
                    weights[base] = AllSum(weights[base], tensor_group)
        model = cls(config, weights, dt, path, shards=N)
        model.tensor_group = tensor_group
        return model

    def shard(self, group: Any) -> None:
        """Tensor parallelism for a model loaded whole: keep only this rank's slices (mlx-lm's ``model.shard``)."""
        shard_model(self, group)

    # --- the engine's step ---------------------------------------------------------------------------------

    def make_kv_store(self, pool: BlockPool, bits: int | None = None, group_size: int = 64) -> KVStore:
        """With ``bits``: K/V as ``mx.quantize``'s triples (scales and biases in the model's dtype, as mlx-lm's)."""
        c = self.config
        if bits is not None:
            self._check_kv_quantization(bits, group_size)
        return KVStore(pool, c.num_hidden_layers, self.kv_heads, c.dim_head, self.dtype, like=mx.zeros(1), bits=bits,
                       group_size=group_size)  # fmt: skip

    def kv_block_bytes(self, block_size: int, bits: int | None = None, group_size: int = 64) -> int:
        c = self.config
        if bits is not None:
            self._check_kv_quantization(bits, group_size)
        return KVStore.block_bytes(c.num_hidden_layers, self.kv_heads, c.dim_head, self.dtype, block_size, bits,
                                   group_size)  # fmt: skip

    def forward_paged(self, batch: PagedBatch, store: KVStore) -> np.ndarray:
        """Logits [sum(batch.keep), V] (float32 numpy) at each sequence's last ``keep`` new tokens; as numpy's."""
        if int(batch.context.max()) > self.config.max_position_embeddings:
            raise ModelError(f"a sequence reaches {int(batch.context.max())} positions, past max_position_embeddings")
        x = self.embed.rows(mx.array(batch.tokens.astype(np.int32))[None]).astype(self.dtype)
        positions = mx.array(batch.positions.astype(np.int32))
        for i, block in enumerate(self.blocks):
            x = block(x, positions, PagedLayer(store, i, batch), None)
        x = mx.fast.rms_norm(x[:, mx.array(batch.logit_rows.astype(np.int32))], self.norm, self.config.rms_norm_eps)
        logits = self.lm_head(x)[0]
        mx.eval(logits, *store.arrays())  # the writes too: each step's graph ends here
        return np.asarray(self.to_numpy(logits), dtype=np.float32)

    def tokens_array(self, ids: Sequence[int] | Sequence[Sequence[int]]) -> Any:
        return mx.array(np.asarray(super().tokens_array(ids)), dtype=mx.int32)

    def _quantize_kv(self, x: Any, bits: int, group_size: int) -> tuple[Any, Any, Any]:
        return quantize_kv(x, bits, group_size)

    def to_numpy(self, x: Any) -> Any:
        if isinstance(x, mx.array):
            return np.array(x.astype(mx.float32) if x.dtype == mx.bfloat16 else x)
        return x

    def _run(
        self,
        tokens: Any,
        offset: int,
        caches: Sequence[Any] | None,
        keep: int | None,
        trace: dict[str, Any] | None,
        pad: np.ndarray | None = None,
    ) -> mx.array:
        tokens = tokens if isinstance(tokens, mx.array) else mx.array(np.asarray(tokens), dtype=mx.int32)
        x = self.embed.rows(tokens).astype(self.dtype)
        if trace is not None:
            trace["embedding"] = x
        S = tokens.shape[1]
        rope_offset: Any = int(offset)
        mask: Any = "causal" if S > 1 else None
        window = chunk_window(caches[0], S) if caches is not None else None
        if window is not None:  # a rotating cache's window hides keys a causal mask would show
            mask = mx.array(window)
        if pad is not None:  # per-row positions and a mask hiding each row's left padding
            rope_offset = mx.array((int(offset) - pad).tolist())
            T = int(offset) + S
            keys, queries = np.arange(T), np.arange(int(offset), T)
            visible = (keys[None, None, :] <= queries[None, :, None]) & (keys[None, None, :] >= pad[:, None, None])
            mask = mx.array(visible[:, None])  # [B, 1, S, T], True = attend
        for i, block in enumerate(self.blocks):
            x = block(x, rope_offset, caches[i] if caches is not None else None, mask)
            if trace is not None:
                trace[f"block.{i}"] = x
        if keep is not None:
            x = x[:, -keep:]
        x = mx.fast.rms_norm(x, self.norm, self.config.rms_norm_eps)
        logits = self.lm_head(x)
        if trace is not None:
            trace["final_norm"], trace["logits"] = x, logits
        return logits


from_checkpoint = MlxModel.from_checkpoint  # the loader's entry point, as fs_model.numpy.from_checkpoint


def _arrays(v: Any) -> list[Any]:
    """The MLX arrays a loaded layer holds (to evaluate them once, at load)."""
    if isinstance(v, Linear):
        return [v.w]
    if isinstance(v, SparseMoE):
        return [v.router.w] + [a for s in (v.gate, v.up, v.down) for a in (s.w, s.scales, s.biases) if a is not None]
    return [v]


def _to_mx(ckpt: Checkpoint, name: str, dt: mx.Dtype, raw: np.ndarray | None = None) -> mx.array:
    """Tensor ``name`` (or ``raw``, a slice of its storage) as an MLX array of ``dt``."""
    info = ckpt.info(name)
    raw = np.asarray(ckpt.raw(name)) if raw is None else raw
    if info.dtype == "BF16":
        return mx.array(raw).view(mx.bfloat16).astype(dt)
    return mx.array(raw).astype(dt)


def _stored_dtype(ckpt: Checkpoint) -> str:
    codes = {ckpt.info(n).dtype for n in ckpt.names()} - {"U32"}
    return {"BF16": "bfloat16", "F16": "float16"}.get(codes.pop(), "float32") if len(codes) == 1 else "float32"
