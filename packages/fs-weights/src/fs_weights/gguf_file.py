"""A llama.cpp GGUF model file read as a checkpoint: HF tensor names, numpy shapes, MLX's quantized layout.

The header is parsed and checked by ``gguf_header`` (every count, offset and size against the file) and the
tensors are mapped on demand; the file must be a regular one. Names: ``token_embd``
-> ``model.embed_tokens``, ``blk.N.attn_q`` -> ``model.layers.N.self_attn.q_proj`` and so on (``NAMES``).
Shapes: GGUF lists dimensions fastest-first, so ``[1024, 151936]`` is numpy's ``(151936, 1024)``.

Types: F32, F16 and BF16 are read as they are. The quantized types that load (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
Q5_K, Q6_K: what Q8_0, Q4_K_M, Q5_K_M and Q6_K files hold) become MLX affine parts - ``.weight`` uint32 codes,
``.scales``, ``.biases`` - exactly (``gguf_blocks`` shows the formats and why no value moves), so they run on
fs's quantized kernels without a second rounding. Any other type (IQ*, Q2_K, Q3_K, TQ*) is refused by name,
listing the types that load.
"""

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import Checkpoint
from .errors import WeightsError
from .gguf_blocks import CODE_BITS, FORMATS, SUPERBLOCKS, affine_part, quantization, superblock_records
from .gguf_header import GGUFFormatError, GGUFHeader, GGUFTensor, parse_header
from .regular_file import open_regular
from .safetensors import TensorInfo, drop_pages, slice_bytes

BLOCK = {  # GGUF block tensor -> HF name under model.layers.N
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    # llama.cpp's qwen3moe: the router, and each projection's experts stacked [E, out, in] (Checkpoint reads them
    # per expert under transformers' names)
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
}
ARCHS = {"qwen3": "qwen3", "qwen3moe": "qwen3_moe"}  # general.architecture -> config.json's model_type
TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
FLOAT_TYPES = {"F32": "F32", "F16": "F16", "BF16": "BF16"}
FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}  # as stored (BF16 as its bits)
LOADS = ", ".join([*FLOAT_TYPES, *FORMATS])


def hf_name(gguf_name: str) -> str:
    stem, _, suffix = gguf_name.rpartition(".")
    parts = stem.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[1].isdigit() and parts[2] in BLOCK:
        return f"model.layers.{parts[1]}.{BLOCK[parts[2]]}.{suffix}"
    if stem in TOP:
        return f"{TOP[stem]}.{suffix}"
    raise WeightsError(f"GGUF tensor {gguf_name!r} is not part of a Qwen3 model")


# the last file parsed, and its header: loading a model reads the file for its weights, then for its vocabulary
_LAST: dict[tuple[int, int, int, int], GGUFHeader] = {}


class GGUFFile:
    """The tensors of one GGUF file, shaped like ``SafetensorsFile`` for ``Checkpoint``."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        fd, size = open_regular(self.path)
        self._fd: int | None = fd
        self._map: mmap.mmap | None = None
        try:
            if size:
                self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino, st.st_mtime_ns, size)
            if key not in _LAST:
                header = parse_header(self._map if self._map is not None else b"", size, str(self.path))
                _LAST.clear()
                _LAST[key] = header
            self.header = _LAST[key]
            self.metadata = self.header.metadata
            self.tensors: dict[str, TensorInfo] = {}
            self.quant: dict[str, tuple[int, int]] = {}  # quantized HF base name -> (bits, group size)
            self._parts: dict[str, tuple[GGUFTensor, str]] = {}  # HF name -> (stored tensor, which part)
            self._tensors()
        except BaseException:
            self.close()
            raise

    def _tensors(self) -> None:
        for t in self.header.tensors:
            try:
                name, kind = hf_name(t.name), t.ggml_type
            except WeightsError as e:
                raise WeightsError(f"{self.path}: {e}") from None
            shape = tuple(reversed(t.dims))
            if kind in FLOAT_TYPES:
                self._add(name, FLOAT_TYPES[kind], shape, t, "float")
            elif kind in FORMATS:
                if len(shape) != 2 and not (len(shape) == 3 and ".switch_mlp." in name):
                    raise WeightsError(f"{self.path}: tensor {t.name!r}: {kind} {list(t.dims)} is not a matrix")
                *lead, cols = shape  # a matrix, or stacked experts [E, rows, cols]
                (bits, group), base = FORMATS[kind], name.removesuffix(".weight")
                self.quant[base] = (bits, group)
                self._add(name, "U32", (*lead, cols * bits // 32), t, "weight")
                self._add(base + ".scales", "F32", (*lead, cols // group), t, "scales")
                self._add(base + ".biases", "F32", (*lead, cols // group), t, "biases")
            else:
                raise WeightsError(
                    f"{self.path}: tensor {t.name!r} is {kind}; the types that load: {LOADS} "
                    "(requantize the file with llama-quantize, or convert from the safetensors model)"
                )

    def _add(self, name: str, code: str, shape: tuple[int, ...], t: GGUFTensor, part: str) -> None:
        itemsize = {"F32": 4, "U32": 4, "F16": 2, "BF16": 2}[code]
        self.tensors[name] = TensorInfo(name, code, shape, 0, int(np.prod(shape)) * itemsize, self.path)
        self._parts[name] = (t, part)

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def __iter__(self) -> Any:
        return iter(self.tensors)

    def _stored(self, t: GGUFTensor) -> np.ndarray:
        """The tensor's bytes, mapped. The size is re-checked on every access, as the safetensors reader does: a
        page past the end of a file truncated under a live mapping raises SIGBUS when touched."""
        size = os.fstat(self._fd).st_size if self._fd is not None else -1
        if self._map is None or size < t.end:
            raise GGUFFormatError(
                f"{self.path}: data (tensor {t.name!r}): the file is now {size} bytes but the tensor ends at byte "
                f"{t.end} (truncated after it was opened)"
            )
        return np.frombuffer(self._map, np.uint8, t.end - t.begin, t.begin)

    def raw(self, name: str) -> np.ndarray:
        """The tensor as a safetensors file would store it (BF16 as uint16 bits; quantized parts repacked)."""
        t, part = self._parts[name]
        shape = self.tensors[name].shape
        data, kind = self._stored(t), t.ggml_type
        if part == "float":
            return data.view(FLOAT_DTYPES[kind]).reshape(shape)
        *lead, cols = reversed(t.dims)  # the matrix's shape (the parts' shapes are the packed ones)
        rows = int(np.prod(lead))
        return affine_part(kind, data, (rows, cols), part).reshape(shape)

    def superblocks(self, name: str) -> tuple[str, np.ndarray] | None:
        """(layout, records) for the codes ``name`` of a K-quant matrix (gguf_blocks: per super-block of 256 weights
        the factors its groups' scales and biases are products of), else None. A copy: the pages may be dropped."""
        t, part = self._parts[name]
        if part != "weight" or t.ggml_type not in SUPERBLOCKS or len(t.dims) != 2:
            return None
        rows, cols = t.dims[1], t.dims[0]
        return SUPERBLOCKS[t.ggml_type], superblock_records(t.ggml_type, self._stored(t), (rows, cols))

    def code_bits(self, name: str) -> int | None:
        """How many bits the codes of quantized ``name`` hold in the file where fewer than they are repacked to (the
        5- and 6-bit types, repacked as 8-bit codes: gguf_blocks.CODE_BITS), else None."""
        t, part = self._parts[name]
        return CODE_BITS.get(t.ggml_type) if part == "weight" else None

    def raw_expert(self, name: str, e: int) -> np.ndarray:
        """Expert ``e`` of a stacked [E, ...] tensor: only its own blocks repacked (Checkpoint reads experts so)."""
        t, part = self._parts[name]
        shape = self.tensors[name].shape
        data, kind = self._stored(t), t.ggml_type
        per = data.size // shape[0]
        own = data[e * per : (e + 1) * per]
        if part == "float":
            return own.view(FLOAT_DTYPES[kind]).reshape(shape[1:])
        rows, cols = t.dims[1], t.dims[0]
        return affine_part(kind, own, (rows, cols), part)

    def stored_bytes(self, name: str) -> np.ndarray:
        """The bytes the file holds for ``name`` (a quantized tensor's parts share their blocks): what a
        checkpoint digest samples, without repacking anything."""
        return self._stored(self._parts[name][0])

    def release(self, name: str, expert: int | None = None) -> None:
        """Drop the pages of ``name``'s blocks (or of one ``expert``'s, in a stacked tensor) from resident memory:
        a loader that repacked them keeps only its copy (``raw`` itself keeps none)."""
        t = self._parts[name][0]
        E = self.tensors[name].shape[0] if expert is not None else 1
        drop_pages(self._map, *slice_bytes(t.begin, t.end, E, expert or 0))

    def close(self) -> None:
        """Drop the mapping; arrays already handed out keep it alive until they are freed."""
        self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


SCALING = ".rope.scaling."  # after the architecture's name: qwen3.rope.scaling.type, qwen3moe.rope.scaling.type
SCALING_KEYS = {  # llama.cpp's key -> config.json's rope_scaling key
    "type": "rope_type",
    "factor": "factor",
    "original_context_length": "original_max_position_embeddings",
    "yarn_beta_fast": "beta_fast",
    "yarn_beta_slow": "beta_slow",
}


def rope_scaling(f: GGUFFile) -> dict[str, Any] | None:
    """config.json's ``rope_scaling`` from llama.cpp's ``qwen3.rope.scaling.*`` keys (YaRN as Qwen3 documents it,
    or linear); a key whose meaning fs does not compute (``yarn_log_multiplier``, ``attn_factor``...) is refused."""
    m = f.metadata
    prefix = f"{m.get('general.architecture')}{SCALING}"
    found = {k.removeprefix(prefix): v for k, v in m.items() if k.startswith(prefix)}
    unknown = sorted(set(found) - set(SCALING_KEYS))
    if unknown:
        raise WeightsError(f"{f.path}: metadata key '{prefix}{unknown[0]}' is not supported (fs reads "
                           f"{', '.join(prefix + k for k in SCALING_KEYS)})")  # fmt: skip
    if found.get("type", "none") == "none":
        return None
    return {SCALING_KEYS[k]: v for k, v in found.items()}


def gguf_config(f: GGUFFile) -> dict[str, Any]:
    """config.json's keys for the model a GGUF file holds (qwen3 or qwen3moe; other architectures refused by name)."""
    m = f.metadata
    arch = m.get("general.architecture")
    if arch not in ARCHS:
        raise WeightsError(
            f"{f.path}: general.architecture is {arch!r}; supported: {', '.join(map(repr, ARCHS))} GGUF files"
        )
    scaling = rope_scaling(f)  # before the other keys: an unsupported one is the first thing to say

    def key(name: str) -> Any:
        if f"{arch}.{name}" not in m:
            raise WeightsError(f"{f.path}: metadata key '{arch}.{name}' is missing")
        return m[f"{arch}.{name}"]

    embed = f.tensors["model.embed_tokens.weight"].shape if "model.embed_tokens.weight" in f.tensors else None
    if embed is None:
        raise WeightsError(f"{f.path}: no token_embd.weight tensor")
    floats = [
        t.dtype
        for t in f.tensors.values()
        if t.dtype in ("BF16", "F16") and not t.name.endswith((".scales", ".biases"))
    ]
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3MoeForCausalLM" if arch == "qwen3moe" else "Qwen3ForCausalLM"],
        "model_type": ARCHS[arch],
        "vocab_size": embed[0],
        "hidden_size": key("embedding_length"),
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": key("attention.head_count"),
        "num_key_value_heads": key("attention.head_count_kv"),
        "head_dim": key("attention.key_length"),
        "max_position_embeddings": key("context_length"),
        "rms_norm_eps": float(str(np.float32(key("attention.layer_norm_rms_epsilon")))),  # stored as float32
        "rope_theta": float(key("rope.freq_base")),
        "tie_word_embeddings": "lm_head.weight" not in f.tensors,
        "torch_dtype": {"BF16": "bfloat16", "F16": "float16"}.get(floats[0] if floats else "", "float32"),
    }
    if scaling is not None:
        cfg["rope_scaling"] = scaling
    if arch == "qwen3moe":  # llama.cpp's qwen3moe: every layer sparse, the top-k weights always renormalized
        cfg |= {
            "num_experts": key("expert_count"),
            "num_experts_per_tok": key("expert_used_count"),
            "moe_intermediate_size": key("expert_feed_forward_length"),
            "norm_topk_prob": True,
        }
    layers = {int(n.split(".")[2]) for n in f.tensors if n.startswith("model.layers.")}
    if cfg["num_hidden_layers"] != len(layers) or layers != set(range(len(layers))):
        raise WeightsError(
            f"{f.path}: metadata key '{arch}.block_count' is {cfg['num_hidden_layers']!r} but the file holds tensors "
            f"for {len(layers)} layers{'' if layers == set(range(len(layers))) else ' (not numbered 0..N-1)'}"
        )
    vocab = m.get("tokenizer.ggml.tokens")
    rows = len(vocab) if isinstance(vocab, list) else embed[0]
    for name in ("bos_token_id", "eos_token_id", "padding_token_id"):
        tid = m.get(f"tokenizer.ggml.{name}")
        if tid is None:
            continue
        if type(tid) is not int or not 0 <= tid < min(rows, embed[0]):
            raise WeightsError(
                f"{f.path}: metadata key 'tokenizer.ggml.{name}' is {tid!r}, not a token id of the "
                f"{min(rows, embed[0])}-token vocabulary"
            )
        if name != "padding_token_id":
            cfg[name] = tid
    q = quantization(f.quant)
    if q is not None:
        cfg["quantization"] = q
    return cfg


END_OF_GENERATION = frozenset({"<|endoftext|>", "<|im_end|>"})  # Qwen's end of a turn and of a document


def gguf_eos_ids(f: GGUFFile) -> list[int]:
    """The ids generation stops at, as llama.cpp decides: the EOS id, and every control token that ends a turn."""
    m = f.metadata
    tokens, types = m.get("tokenizer.ggml.tokens") or [], m.get("tokenizer.ggml.token_type") or []
    eos = m.get("tokenizer.ggml.eos_token_id")
    ids = [eos] if isinstance(eos, int) else []
    ids += [i for i, (t, k) in enumerate(zip(tokens, types, strict=False)) if k == 3 and t in END_OF_GENERATION]
    return list(dict.fromkeys(ids))


def open_gguf(path: str | os.PathLike[str]) -> tuple[Checkpoint, dict[str, Any], list[int]]:
    """(checkpoint, config.json's keys, EOS ids) for a GGUF model file, parsed once."""
    f = GGUFFile(path)
    cfg = gguf_config(f)
    return Checkpoint([f], Path(path), cfg.get("quantization")), cfg, gguf_eos_ids(f)  # type: ignore[list-item]
