"""The numpy reference backend: float32 compute, one file per concept, read top to bottom.

ids -> embed [B,S,H] -> blocks -> final norm -> logits [B,S,V] (``x @ embedᵀ`` when tied).

Every matrix arrives as a linear layer object (linear.py) and every layer class is handed in: the model is built
once by ``fs_model.numpy.build``, which decides there which kernels run (the reference classes here import none).
"""

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fs_kvcache import BlockPool, KVStore, PagedBatch, PagedLayer
from fs_weights import Qwen3Config

from ..errors import ModelError
from ..model import Model
from ..rope_scaling import rope_parameters
from .attention import Attention
from .block import Block
from .kv_quant import quantize_kv
from .linear import Linear
from .moe import SparseMoE
from .norm import rms_norm
from .rope import RoPE

# (number of tokens in the call) -> a context the whole forward pass runs in (e.g. BLAS kept to one thread)
ForwardContext = Callable[[int], contextlib.AbstractContextManager[Any]]


def _no_context(S: int) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


class NumpyModel(Model):
    backend = "numpy"

    def __init__(
        self,
        config: Qwen3Config,
        weights: dict[str, Any],
        path: str = "<memory>",
        kv_dtype: str = "float32",
        *,
        attention: type[Attention] = Attention,
        block: type[Block] = Block,
        moe: type[SparseMoE] = SparseMoE,
        context: ForwardContext = _no_context,
    ):
        """``weights``: checkpoint names -> a ``Linear`` for each matrix, a float32 array for each norm.
        ``kv_dtype="bfloat16"`` keeps the KV cache as bf16 bits (half the memory and the bytes read per token)."""
        super().__init__(config, path)
        if kv_dtype not in ("float32", "bfloat16"):
            raise ModelError(f"kv_dtype must be float32 or bfloat16, not {kv_dtype!r}")
        self.kv_dtype, self.context = kv_dtype, context
        self.batch_invariant = bool(getattr(block, "all_steps", False))  # every step on the invariant kernels
        c = config
        self.embed: Linear = weights["model.embed_tokens.weight"]
        self.lm_head: Linear = self.embed if c.tie_word_embeddings else weights["lm_head.weight"]
        self.norm = weights["model.norm.weight"]
        self.eps = c.rms_norm_eps
        self.rope = RoPE(c.dim_head, c.rope_theta, *rope_parameters(c))  # rope_scaling (YaRN) folded in
        self.blocks = []
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            w = {
                k.removeprefix(p).split(".")[-2]: v
                for k, v in weights.items()
                if k.startswith(p) and ".experts." not in k
            }
            heads = (c.num_attention_heads, c.num_key_value_heads, c.dim_head)
            attn = attention(w, *heads, c.rms_norm_eps, self.rope, kv_bf16=kv_dtype == "bfloat16")
            sparse = None
            if c.is_sparse(i):  # Qwen3-MoE: this layer's MLP is the router and its experts
                sparse = moe.from_weights(weights, p + "mlp.", c.num_experts, c.num_experts_per_tok, c.norm_topk_prob)
            self.blocks.append(block(w, attn, c.rms_norm_eps, sparse))

    def _quantize_kv(self, x: Any, bits: int, group_size: int) -> tuple[Any, Any, Any]:
        return quantize_kv(x, bits, group_size, self.kv_dtype == "bfloat16")

    # --- the engine's step: many sequences, one pass, K/V in a block pool ------------------------------------

    def make_kv_store(self, pool: BlockPool, bits: int | None = None, group_size: int = 64) -> KVStore:
        """Every layer's K/V in ``pool``'s blocks, in this model's cache dtype; with ``bits`` as affine codes
        (float32 scales and biases, bf16-rounded for a bf16 cache, as ``quantize_kv`` makes them)."""
        c = self.config
        dtype = self._store_dtype(bits, group_size)
        return KVStore(pool, c.num_hidden_layers, c.num_key_value_heads, c.dim_head, dtype, bits=bits,
                       group_size=group_size)  # fmt: skip

    def kv_block_bytes(self, block_size: int, bits: int | None = None, group_size: int = 64) -> int:
        c = self.config
        dtype = self._store_dtype(bits, group_size)
        return KVStore.block_bytes(c.num_hidden_layers, c.num_key_value_heads, c.dim_head, dtype, block_size,
                                   bits, group_size)  # fmt: skip

    def _store_dtype(self, bits: int | None, group_size: int) -> np.dtype:
        if bits is not None:
            self._check_kv_quantization(bits, group_size)
            return np.dtype(np.float32)
        return np.dtype(np.uint16 if self.kv_dtype == "bfloat16" else np.float32)

    def forward_paged(self, batch: PagedBatch, store: KVStore) -> np.ndarray:
        """Logits [sum(batch.keep), V] (float32) at each sequence's last ``keep`` new tokens (the last one alone
        unless the engine verifies drafts); their new K/V are written into ``store`` on the way. Each sequence's
        logits are the bits ``model(...)`` gives it alone wherever the kernels are batch invariant (the fused path,
        the default for kept-weight models)."""
        tokens = batch.tokens
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            bad = int(np.flatnonzero((tokens < 0) | (tokens >= self.vocab_size))[0])
            raise ModelError(f"token id {int(tokens[bad])} at packed position {bad} is out of range")
        if int(batch.context.max()) > self.config.max_position_embeddings:
            raise ModelError(f"a sequence reaches {int(batch.context.max())} positions, past max_position_embeddings")
        with self.context(tokens.shape[0]):
            x = self.embed.rows(tokens[None])  # [1, N, H]: every sequence's new tokens in one row
            tables = self.rope.tables(batch.positions)
            for i, block in enumerate(self.blocks):
                x = block(x, tables, PagedLayer(store, i, batch))
            x = rms_norm(x[:, batch.logit_rows], self.norm, self.eps)
            return np.asarray(self.lm_head(x)[0], dtype=np.float32)

    def _run(
        self,
        tokens: Any,
        offset: int,
        caches: Sequence[Any] | None,
        keep: int | None,
        trace: dict[str, Any] | None,
        pad: np.ndarray | None = None,
    ) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        with self.context(tokens.shape[1]):
            x = self.embed.rows(tokens)
            if trace is not None:
                trace["embedding"] = x
            positions = np.arange(offset, offset + tokens.shape[1])
            if pad is not None:  # a real token's position is its cache position minus its row's padding
                positions = np.maximum(positions[None, None, :] - pad[:, None, None], 0)  # [B, 1, S]
            tables = self.rope.tables(positions)
            for i, block in enumerate(self.blocks):
                x = block(x, tables, caches[i] if caches is not None else None, pad)
                if trace is not None:
                    trace[f"block.{i}"] = x
            if keep is not None:
                x = x[:, -keep:]
            x = rms_norm(x, self.norm, self.eps)
            logits = self.lm_head(x)
            if trace is not None:
                trace["final_norm"], trace["logits"] = x, logits
            return logits
