"""Does a checkpoint hold exactly the tensors its Qwen3 config implies?

``expected_tensors(config)`` is the single source of truth for HF tensor names and logical shapes; the random
checkpoint writer and fs_model's loader use it too.
"""

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .checkpoint import Checkpoint, natural_key
from .config import Qwen3Config
from .errors import CrossCheckError, WeightsError

NORMS = ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm", "norm")


def expected_tensors(c: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """HF name -> logical (unquantized) shape, in data-flow order."""
    H, I, D = c.hidden_size, c.intermediate_size, c.dim_head
    q, kv = c.num_attention_heads * D, c.num_key_value_heads * D
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, H)}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (q, H),
            p + "self_attn.k_proj.weight": (kv, H),
            p + "self_attn.v_proj.weight": (kv, H),
            p + "self_attn.q_norm.weight": (D,),
            p + "self_attn.k_norm.weight": (D,),
            p + "self_attn.o_proj.weight": (H, q),
            p + "post_attention_layernorm.weight": (H,),
        }
        if c.is_sparse(i):  # the router, then each expert's SwiGLU (transformers' per-expert names)
            E, M = c.num_experts, c.moe_intermediate_size
            out[p + "mlp.gate.weight"] = (E, H)
            for e in range(E):
                q_ = f"{p}mlp.experts.{e}."
                out |= {q_ + "gate_proj.weight": (M, H), q_ + "up_proj.weight": (M, H), q_ + "down_proj.weight": (H, M)}
        else:
            out |= {
                p + "mlp.gate_proj.weight": (I, H),
                p + "mlp.up_proj.weight": (I, H),
                p + "mlp.down_proj.weight": (H, I),
            }
        if c.attention_bias:
            out |= {
                p + "self_attn.q_proj.bias": (q,),
                p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.bias": (kv,),
                p + "self_attn.o_proj.bias": (H,),
            }
    out["model.norm.weight"] = (H,)
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = (c.vocab_size, H)
    return out


def is_quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """mlx quantizes every Linear and the embedding; norms and biases stay in float."""
    return name.endswith(".weight") and len(shape) == 2


ROUTER_QUANT = (8, 64)  # mlx-lm's qwen3_moe quant_predicate: the MoE router ("mlp.gate") at 8 bits, group 64


def quantized_as(name: str, bits: int, group: int) -> tuple[int, int]:
    """(bits, group) a quantizing converter gives matrix ``name``: the MoE router keeps 8 bits, as mlx-lm's does
    (its scores pick the experts; 4-bit ones would pick others), every other matrix the requested ones."""
    return ROUTER_QUANT if name.endswith(".mlp.gate.weight") else (bits, group)


def quantization_entry(c: Qwen3Config, bits: int, group: int) -> dict[str, Any]:
    """config.json's ``quantization`` for a checkpoint quantized at (bits, group): MLX's per-module entries where
    ``quantized_as`` differs (the MoE routers)."""
    q: dict[str, Any] = {"group_size": group, "bits": bits}
    for n in expected_tensors(c):
        b, g = quantized_as(n, bits, group)
        if (b, g) != (bits, group):
            q[n.removesuffix(".weight")] = {"group_size": g, "bits": b}
    return q


def stored_tensors(
    c: Qwen3Config, bits: int | None = None, group_size: int | None = None
) -> dict[str, tuple[tuple[int, ...], str | None]]:
    """Name -> (stored shape, forced dtype or None) as written on disk, quantized layout included."""
    out: dict[str, tuple[tuple[int, ...], str | None]] = {}
    for name, shape in expected_tensors(c).items():
        if bits and group_size and is_quantizable(name, shape):
            rows, cols = shape
            b, g = quantized_as(name, bits, group_size)
            if cols % g:
                raise WeightsError(f"{name}: input width {cols} is not a multiple of group_size {g}")
            base = name.removesuffix(".weight")
            out[name] = ((rows, cols * b // 32), "U32")
            out[base + ".scales"] = ((rows, cols // g), None)
            out[base + ".biases"] = ((rows, cols // g), None)
        else:
            out[name] = (shape, None)
    return out


@dataclass
class CrossCheckReport:
    missing: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    dtypes: dict[str, int] = field(default_factory=dict)
    parameters: int = 0
    tensors: int = 0
    tied: bool = False
    quantization: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    @property
    def verdict(self) -> str:
        if self.ok:
            return "ok"
        parts = [
            f"{len(v)} {k}"
            for k, v in (("missing", self.missing), ("unexpected", self.unexpected), ("mis-shaped", self.mismatched))
            if v
        ]
        return "FAILED: " + ", ".join(parts)

    def problems(self, limit: int = 20) -> list[str]:
        lines = [f"missing {n} {list(s)}" if s else f"missing {n}" for n, s in self.missing]
        lines += [f"unexpected {n}" for n in self.unexpected]
        lines += [f"mis-shaped {n}: expected {list(e)}, found {list(a)}" for n, e, a in self.mismatched]
        return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "ok": self.ok,
            "parameters": self.parameters,
            "tensors": self.tensors,
            "tied_embeddings": self.tied,
            "dtypes": self.dtypes,
            "quantization": self.quantization,
            "problems": self.problems(limit=1000),
        }


def cross_check(config: Qwen3Config, checkpoint: Checkpoint, *, strict: bool = False) -> CrossCheckReport:
    q = checkpoint.quantization or config.quantization
    report = CrossCheckReport(tied=config.tie_word_embeddings, quantization=q, tensors=len(checkpoint))
    # the layers present bound what is listed: num_hidden_layers = 10**9 must not build 11 billion expected names
    present = {
        int(n.split(".")[2]) for n in checkpoint.names() if n.startswith("model.layers.") and n.split(".")[2].isdigit()
    }
    listed = min(config.num_hidden_layers, max(present, default=-1) + 1)
    logical = expected_tensors(config.replace(num_hidden_layers=listed))
    if listed < config.num_hidden_layers:
        report.missing.append((f"model.layers.{listed}..{config.num_hidden_layers - 1}.* (every tensor)", ()))
    for name, shape in logical.items():
        if name not in checkpoint:
            report.missing.append((name, shape))
            continue
        found = checkpoint.info(name).shape
        if checkpoint.is_quantized(name) and q:
            bits, group = checkpoint.quant_params(name)
            want = {name: (shape[0], shape[1] * bits // 32)}
            base = name.removesuffix(".weight")
            want[base + ".scales"] = want[base + ".biases"] = (shape[0], shape[1] // group)
            for n, s in want.items():
                if checkpoint.info(n).shape != s:
                    report.mismatched.append((n, s, checkpoint.info(n).shape))
        elif found != shape:
            report.mismatched.append((name, shape, found))
        report.parameters += math.prod(shape)
    for name in checkpoint.names():
        base = name.removesuffix(".scales").removesuffix(".biases")
        if name not in logical and not (name != base and base + ".weight" in logical):
            report.unexpected.append(name)
    report.unexpected.sort(key=natural_key)
    report.dtypes = dict(Counter(checkpoint.info(n).dtype for n in checkpoint.names()))
    if strict and not report.ok:
        raise CrossCheckError(
            f"{checkpoint.source}: checkpoint does not match config ({report.verdict}):\n  "
            + "\n  ".join(report.problems())
        )
    return report
