"""Qwen3-MoE's sparse MLP: a router picks k of E SwiGLU experts per token and mixes their outputs.

    p      = softmax(x · Wgᵀ)                      [T, E]   router probabilities (float32, max subtracted)
    top    = the k largest p, largest first        [T, k]   ties: the lower expert index first
    w      = p[top] (/ Σ p[top] if norm_topk_prob) [T, k]
    y[t]   = Σ_j w[t, j] · expert_top[t, j](x[t])  summed j = 0, 1, …, k-1

Tokens are grouped by expert, so each chosen expert's matrices are multiplied once per step whatever the number
of tokens that chose it (at batch 1, k of E experts' weights are read). A token's sum runs over its own ranked
list in a fixed order, and each expert's layer computes a row on its own (the kernels are batch invariant), so a
token's output does not depend on which other tokens share the step or chose the same experts.
"""

from typing import Any

import numpy as np

from .linear import Linear
from .mlp import MLP


def route(logits: np.ndarray, k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Router logits [T, E] -> (expert ids [T, k] int64, weights [T, k] float32), ranked as the module says."""
    z = logits.astype(np.float32) - logits.max(axis=-1, keepdims=True).astype(np.float32)
    e = np.exp(z)
    p = e / e.sum(axis=-1, keepdims=True)
    top = np.argsort(-p, axis=-1, kind="stable")[:, :k]  # stable: equal probabilities keep the lower index first
    w = np.take_along_axis(p, top, axis=-1)
    if normalize:
        w = w / w.sum(axis=-1, keepdims=True)
    return top, w.astype(np.float32)


class SparseMoE:
    def __init__(self, router: Linear, experts: list[MLP], k: int, normalize: bool):
        self.router, self.experts, self.k, self.normalize = router, experts, k, normalize

    @classmethod
    def from_weights(cls, w: dict[str, Any], prefix: str, experts: int, k: int, normalize: bool) -> "SparseMoE":
        """``w``: checkpoint names -> layers; ``prefix``: "model.layers.{i}.mlp." (transformers' expert names)."""

        def expert(e: int) -> MLP:
            p = f"{prefix}experts.{e}."
            return MLP({n: w[f"{p}{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj")})

        return cls(w[prefix + "gate.weight"], [expert(e) for e in range(experts)], k, normalize)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        shape = x.shape
        rows = np.ascontiguousarray(x.reshape(-1, shape[-1]), dtype=np.float32)
        top, weight = route(self.router(rows), self.k, self.normalize)
        picked = np.empty((rows.shape[0], self.k, shape[-1]), np.float32)  # [T, k, H]: each token's k outputs
        for e in np.unique(top).tolist():  # each chosen expert once, on every token that chose it
            tokens, ranks = np.nonzero(top == e)
            picked[tokens, ranks] = self.experts[e](rows[tokens])
        return self.mix(picked, weight).reshape(shape)

    def mix(self, picked: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Each token's k expert outputs [T, k, H] weighted [T, k] and summed in rank order -> [T, H]."""
        y = picked[:, 0] * weight[:, :1]
        for r in range(1, self.k):  # rank order, each token on its own: no reduction across tokens
            y = y + picked[:, r] * weight[:, r : r + 1]
        return y
