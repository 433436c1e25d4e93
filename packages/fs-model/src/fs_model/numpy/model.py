"""The numpy reference backend: float32 compute, one file per concept, read top to bottom.

ids -> embed [B,S,H] -> blocks -> final norm -> logits [B,S,V] (``x @ embedᵀ`` when tied).
"""

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from fs_weights import Qwen3Config

from ..errors import ModelError
from ..model import Model
from . import bf16_gemm
from .attention import Attention
from .block import Block
from .kernels import SMALL, one_blas_thread, widen
from .mlp import linear
from .norm import rms_norm
from .quantized import AffineWeight
from .rope import RoPE


class NumpyModel(Model):
    backend = "numpy"

    def __init__(
        self, config: Qwen3Config, weights: dict[str, np.ndarray], path: str = "<memory>", kv_dtype: str = "float32"
    ):
        """``kv_dtype="bfloat16"`` keeps the KV cache as bf16 bits (half the memory and the bytes read per token)."""
        super().__init__(config, path)
        if kv_dtype not in ("float32", "bfloat16"):
            raise ModelError(f"kv_dtype must be float32 or bfloat16, not {kv_dtype!r}")
        self.kv_dtype = kv_dtype
        c = config
        self.embed = weights["model.embed_tokens.weight"]
        self.lm_head = self.embed if c.tie_word_embeddings else weights["lm_head.weight"]
        self.norm = weights["model.norm.weight"]
        self.eps = c.rms_norm_eps
        self.rope = RoPE(c.dim_head, c.rope_theta)
        self.blocks = []
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            w = {k.removeprefix(p).split(".")[-2]: v for k, v in weights.items() if k.startswith(p)}
            heads = (c.num_attention_heads, c.num_key_value_heads, c.dim_head)
            attn = Attention(w, *heads, c.rms_norm_eps, self.rope, kv_bf16=kv_dtype == "bfloat16")
            self.blocks.append(Block(w, attn, c.rms_norm_eps))

    def _run(
        self,
        tokens: Any,
        offset: int,
        caches: Sequence[Any] | None,
        keep: int | None,
        trace: dict[str, Any] | None,
        pad: np.ndarray | None = None,
    ) -> np.ndarray:
        # a prefill on the bf16 GEMM runs on numba's threads: OpenBLAS's must keep off the cores meanwhile
        on_bf16_gemm = np.shape(tokens)[1] > SMALL and bf16_gemm.applies(self.blocks[0].mlp.gate)
        with one_blas_thread() if on_bf16_gemm else contextlib.nullcontext():
            tokens = np.asarray(tokens, dtype=np.int64)
            if isinstance(self.embed, AffineWeight):
                x = self.embed.rows(tokens)
            else:
                x = self.embed[tokens]
                x = widen(x) if x.dtype == np.uint16 else x.astype(np.float32)
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
            logits = linear(x, self.lm_head)
            if trace is not None:
                trace["final_norm"], trace["logits"] = x, logits
            return logits
