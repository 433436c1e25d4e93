"""Typed, validated Qwen3 ``config.json`` and ``generation_config.json``.

Field names are exactly the HF keys, so ``Qwen3Config(**json)`` round-trips; keys we do not model are kept
in ``extra``. Validation names the offending key and file.
"""

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .jsonfile import read_json
from .quantize import SUPPORTED_BITS

_TYPES: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(
        (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
            "sliding_window",
            "bos_token_id",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "decoder_sparse_step",
        ),
        int,
    ),
    "norm_topk_prob": bool,
    "mlp_only_layers": list,
    "rms_norm_eps": (int, float),
    "rope_theta": (int, float),
    "tie_word_embeddings": bool,
    "attention_bias": bool,
    "use_sliding_window": bool,
    "hidden_act": str,
    "model_type": str,
    "torch_dtype": str,
    "rope_scaling": dict,
    "quantization": dict,
    "eos_token_id": (int, list),
}
_OPTIONAL = {
    "head_dim",
    "sliding_window",
    "bos_token_id",
    "torch_dtype",
    "rope_scaling",
    "quantization",
    "eos_token_id",
}


MODEL_TYPES = ("qwen3", "qwen3_moe")
MOE_KEYS = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "norm_topk_prob",
    "decoder_sparse_step",
    "mlp_only_layers",
)


@dataclass(frozen=True)
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    max_position_embeddings: int = 40960
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    rope_scaling: dict[str, Any] | None = None
    use_sliding_window: bool = False
    sliding_window: int | None = None
    model_type: str = "qwen3"
    torch_dtype: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    quantization: dict[str, Any] | None = None
    # Qwen3-MoE (model_type "qwen3_moe"): each sparse layer's MLP is num_experts SwiGLU experts of width
    # moe_intermediate_size, num_experts_per_tok of them chosen per token by a router; layer i is sparse when
    # (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers (those keep a dense intermediate_size MLP)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    source: str = field(default="<dict>", compare=False, repr=False)

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"{self.source}: {key!r} {why}")

        for key, want in _TYPES.items():
            v = getattr(self, key)
            if v is None and key in _OPTIONAL:
                continue
            ok = isinstance(v, bool) if want is bool else (isinstance(v, want) and not isinstance(v, bool))
            if not ok:
                name = " or ".join(t.__name__ for t in (want if isinstance(want, tuple) else (want,)))
                raise bad(key, f"must be {name}, got {type(v).__name__} {v!r}")
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
            "head_dim",
        ):
            if getattr(self, key) is not None and getattr(self, key) <= 0:
                raise bad(key, f"must be positive, got {getattr(self, key)}")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise bad(
                "head_dim",
                f"is absent and hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}",
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise bad(
                "num_key_value_heads",
                f"({self.num_key_value_heads}) must divide num_attention_heads ({self.num_attention_heads})",
            )
        for key in ("rms_norm_eps", "rope_theta"):
            if not (math.isfinite(getattr(self, key)) and getattr(self, key) > 0):
                raise bad(key, f"must be a finite positive number, got {getattr(self, key)}")
        if self.hidden_act != "silu":
            raise bad("hidden_act", f"is {self.hidden_act!r}; Qwen3 uses 'silu'")
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise bad("sliding_window", f"must be positive, got {self.sliding_window}")
        eos_ids(self.eos_token_id, self.source)
        if self.model_type not in MODEL_TYPES:
            raise bad("model_type", f"is {self.model_type!r}; supported: {', '.join(map(repr, MODEL_TYPES))}")
        if self.model_type == "qwen3_moe":
            self._check_moe(bad)
        elif self.num_experts:  # experts under a dense model_type: a mislabelled MoE config, not a dense model
            raise bad(
                "model_type", f"is 'qwen3' but num_experts is {self.num_experts} (a Qwen3-MoE config says 'qwen3_moe')"
            )
        if self.quantization is not None:
            check_quantization(self.quantization, self.source)

    def _check_moe(self, bad: Any) -> None:
        for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step"):
            if getattr(self, key) <= 0:
                raise bad(key, f"must be positive for a qwen3_moe model, got {getattr(self, key)}")
        if self.num_experts_per_tok > self.num_experts:
            raise bad("num_experts_per_tok", f"({self.num_experts_per_tok}) exceeds num_experts ({self.num_experts})")
        layers = self.mlp_only_layers
        if not all(type(i) is int and 0 <= i < self.num_hidden_layers for i in layers):
            raise bad("mlp_only_layers", f"must list layer indices below {self.num_hidden_layers}, got {layers!r}")

    def is_sparse(self, layer: int) -> bool:
        """Whether layer ``layer``'s MLP is the mixture of experts (mlx-lm's and transformers' rule)."""
        return (
            self.model_type == "qwen3_moe"
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    @property
    def dim_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<dict>") -> "Qwen3Config":
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "source"}
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in d
        ]
        if missing:
            raise ConfigError(f"{source}: missing required key(s) {', '.join(map(repr, missing))}")
        known = {k: v for k, v in d.items() if k in names}
        return cls(**known, extra={k: v for k, v in d.items() if k not in names}, source=source)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("extra", "source")}
        d = {k: v for k, v in d.items() if v is not None and not (k in MOE_KEYS and self.model_type != "qwen3_moe")}
        return {**d, **self.extra}

    def replace(self, **changes: Any) -> "Qwen3Config":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class GenerationConfig:
    eos_token_id: tuple[int, ...] = ()
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


QUANT_BITS = SUPPORTED_BITS  # the unpacker's widths (quantize.py decides)
QUANT_GROUPS = (16, 32, 64, 128)  # MLX's, and 16 for GGUF's Q6_K (the MLX backend dequantizes that one)


def check_quantization(q: Any, source: str) -> dict[str, Any]:
    """MLX's ``quantization`` entry: ``bits`` and ``group_size`` at the top, optionally per-module overrides
    (``"model.layers.0.mlp.down_proj": {"bits": 8, "group_size": 64}``, or ``false`` for a module left float)."""
    if not isinstance(q, dict):
        raise ConfigError(f"{source}: 'quantization' must be an object, got {type(q).__name__}")
    if q.get("mode", "affine") != "affine":  # mlx's mxfp4 / nvfp4 pack other codes in the same tensor names
        raise ConfigError(f"{source}: 'quantization': mode {q['mode']!r} is not supported (only 'affine')")
    for where, entry in [("", q)] + [(f"{k!r} ", v) for k, v in q.items() if isinstance(v, dict)]:
        for key, allowed in (("bits", QUANT_BITS), ("group_size", QUANT_GROUPS)):
            v = entry.get(key)
            if type(v) is not int or v not in allowed:
                raise ConfigError(
                    f"{source}: 'quantization': {where}{key!r} must be one of {', '.join(map(str, allowed))}, got {v!r}"
                )
    return q


def _read_json(path: Path) -> Any:
    return read_json(path, ConfigError)


def load_config(path: str | os.PathLike[str]) -> Qwen3Config:
    """``path`` is a model directory or a config.json file."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return Qwen3Config.from_dict(_read_json(p), source=str(p))


def eos_ids(value: Any, source: str) -> tuple[int, ...]:
    if value is None:
        return ()
    ids = value if isinstance(value, list) else [value]
    if not all(type(i) is int and i >= 0 for i in ids):
        raise ConfigError(f"{source}: 'eos_token_id' must be an int or a list of ints, got {value!r}")
    return tuple(ids)


def load_generation_config(path: str | os.PathLike[str]) -> GenerationConfig | None:
    """``path`` is a model directory or the file itself; ``None`` when the directory has none."""
    p = Path(path)
    if p.is_dir():
        p = p / "generation_config.json"
        if not p.exists():
            return None
    d = _read_json(p)
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    names = {f.name for f in dataclasses.fields(GenerationConfig)} - {"extra", "eos_token_id"}
    kw = {k: v for k, v in d.items() if k in names}
    for k, v in kw.items():
        want = bool if k == "do_sample" else float if k in ("temperature", "top_p") else int
        if v is not None and (isinstance(v, bool) != (want is bool) or not isinstance(v, (want, int))):
            raise ConfigError(f"{p}: {k!r} must be {want.__name__}, got {v!r}")
        if v is not None and want is not bool and not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{p}: {k!r} must be a finite non-negative number, got {v!r}")
    if kw.get("top_p") is not None and not 0 < kw["top_p"] <= 1:
        raise ConfigError(f"{p}: 'top_p' must be in (0, 1], got {kw['top_p']!r}")
    extra = {k: v for k, v in d.items() if k not in names and k != "eos_token_id"}
    return GenerationConfig(eos_token_id=eos_ids(d.get("eos_token_id"), str(p)), extra=extra, **kw)
