"""Write a Qwen3 checkpoint as a llama.cpp GGUF file (F32, F16, BF16, Q8_0, Q4_0 or Q4_K), through the ``gguf``
package.

The layout is llama.cpp's converter's for Qwen3: ``gguf_file.NAMES`` in reverse, 1-D tensors (norms) in F32,
every matrix (the embedding included) in the chosen type, quantized by the ``gguf`` package's own Q8_0 / Q4_0
quantizers or fs's Q4_K writer (``gguf_q4_k``; a matrix whose rows are not whole super-blocks of 256 takes Q5_0
instead, as ``llama-quantize`` falls back), and the ``qwen3.*`` hyper-parameters. The vocabulary is the caller's:
``tokenizer_fields`` holds the ``tokenizer.*`` keys (fs-tokenizer's ``gguf_fields(tokenizer, vocab_size)`` makes
them). The file is written beside ``out`` and renamed into place.
"""

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import check_replaceable, current_umask
from .checkpoint import Checkpoint
from .config import Qwen3Config, load_config
from .errors import WeightsError
from .gguf_file import BLOCK, TOP
from .gguf_q4_k import QK, q4_k_blocks

TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K")
# llama.cpp's LLAMA_FTYPE_* numbers (Q4_K everywhere is its MOSTLY_Q4_K_S: "Q4_K - Small")
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "Q4_K": 14, "BF16": 32}


def gguf_name(hf: str) -> str:
    stem, _, suffix = hf.rpartition(".")
    for g, h in TOP.items():
        if stem == h:
            return f"{g}.{suffix}"
    parts = stem.split(".", 3)  # model, layers, N, rest
    inverse = {v: k for k, v in BLOCK.items()}
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in inverse:
        return f"blk.{parts[2]}.{inverse[parts[3]]}.{suffix}"
    raise WeightsError(f"tensor {hf!r} has no GGUF name")


def write_gguf(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    ggml_type: str = "BF16",
    tokenizer_fields: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """``progress(done, total)`` in tensors as each is converted (quantizing a 0.6B model takes seconds)."""
    import gguf

    if ggml_type not in TYPES:
        raise WeightsError(f"GGUF type {ggml_type!r} is not one of {', '.join(TYPES)}")
    src_dir, target = Path(src), Path(out)
    c = load_config(src_dir)
    moe = c.model_type == "qwen3_moe"
    if moe:
        _check_qwen3moe(c, src_dir)
    qtype = gguf.GGMLQuantizationType[ggml_type]
    check_replaceable(target)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with Checkpoint.open(src_dir) as ckpt:
            w = gguf.GGUFWriter(str(tmp), "qwen3moe" if moe else "qwen3")  # every key below takes this prefix
            w.add_context_length(c.max_position_embeddings)
            w.add_embedding_length(c.hidden_size)
            w.add_feed_forward_length(c.intermediate_size)
            w.add_block_count(c.num_hidden_layers)
            w.add_head_count(c.num_attention_heads)
            w.add_head_count_kv(c.num_key_value_heads)
            w.add_key_length(c.dim_head)
            w.add_value_length(c.dim_head)
            w.add_rope_freq_base(c.rope_theta)
            w.add_layer_norm_rms_eps(c.rms_norm_eps)
            w.add_file_type(FILE_TYPE[ggml_type])
            if moe:
                w.add_expert_count(c.num_experts)
                w.add_expert_used_count(c.num_experts_per_tok)
                w.add_expert_feed_forward_length(c.moe_intermediate_size)
            _add_rope_scaling(w, c.rope_scaling)
            for key, value in (tokenizer_fields or {}).items():
                w.add_key_value(key, value, _value_type(gguf, value))
            names = [n for n in ckpt.names() if not n.endswith((".scales", ".biases")) and ".experts." not in n]
            if moe:  # each projection's experts as one stacked [E, out, in] tensor, as llama.cpp stores them
                names += [f"model.layers.{i}.mlp.switch_mlp.{p}.weight" for i in range(c.num_hidden_layers)
                          for p in ("gate_proj", "up_proj", "down_proj")]  # fmt: skip
            for done, name in enumerate(names, 1):
                if progress is not None:
                    progress(done, len(names))
                x = _stacked(ckpt, name, c.num_experts) if ".switch_mlp." in name else ckpt.get(name, dequantize=True)
                if x.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
                    w.add_tensor(gguf_name(name), x.astype(np.float32))
                elif qtype == gguf.GGMLQuantizationType.F16:
                    w.add_tensor(gguf_name(name), x.astype(np.float16))
                elif qtype == gguf.GGMLQuantizationType.Q4_K and x.shape[-1] % QK == 0:
                    blocks = q4_k_blocks(x.reshape(-1, x.shape[-1])).reshape(*x.shape[:-1], -1)
                    w.add_tensor(gguf_name(name), blocks, raw_dtype=qtype)
                else:  # Q8_0, Q4_0; Q4_K's fallback for rows that are not whole super-blocks: Q5_0
                    kind = gguf.GGMLQuantizationType.Q5_0 if qtype == gguf.GGMLQuantizationType.Q4_K else qtype
                    w.add_tensor(gguf_name(name), gguf.quants.quantize(x, kind), raw_dtype=kind)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _check_qwen3moe(c: Qwen3Config, src: Path) -> None:
    """llama.cpp's qwen3moe makes every layer sparse and always renormalizes the top-k weights."""
    dense = [i for i in range(c.num_hidden_layers) if not c.is_sparse(i)]
    if dense or not c.norm_topk_prob:
        why = f"layers {dense} are dense" if dense else "norm_topk_prob is false"
        raise WeightsError(
            f"{src}: llama.cpp's qwen3moe GGUF has every layer sparse and norm_topk_prob true; here {why}"
        )


def _stacked(ckpt: Checkpoint, name: str, experts: int) -> np.ndarray:
    """``mlp.switch_mlp.{p}.weight``: every expert's float32 matrix stacked [E, out, in]."""
    stem, proj = name.split(".switch_mlp.")
    return np.stack([ckpt.get(f"{stem}.experts.{e}.{proj}", dequantize=True) for e in range(experts)])


def _add_rope_scaling(w: Any, scaling: dict[str, Any] | None) -> None:
    """config.json's ``rope_scaling`` as llama.cpp's ``qwen3.rope.scaling.*`` keys (what gguf_file reads back)."""
    import gguf

    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if scaling is None or kind == "default":
        return
    if kind not in ("yarn", "linear"):
        raise WeightsError(f"rope_scaling type {kind!r} has no GGUF form here (yarn and linear do)")
    w.add_rope_scaling_type(gguf.RopeScalingType(kind))
    w.add_rope_scaling_factor(float(scaling["factor"]))
    if "original_max_position_embeddings" in scaling:
        w.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
    if "beta_fast" in scaling:
        w.add_rope_scaling_yarn_beta_fast(float(scaling["beta_fast"]))
    if "beta_slow" in scaling:
        w.add_rope_scaling_yarn_beta_slow(float(scaling["beta_slow"]))


def _value_type(gguf: Any, value: Any) -> Any:
    T = gguf.GGUFValueType
    if isinstance(value, bool):
        return T.BOOL
    if isinstance(value, int):
        return T.UINT32
    if isinstance(value, str):
        return T.STRING
    if isinstance(value, list):
        return T.ARRAY
    raise WeightsError(f"cannot store {type(value).__name__} as a GGUF value")
