"""Save a prompt's KV state to a safetensors file and load it back, refusing a file made for another model.

Layout: ``tokens`` (I64 [n]), ``layer.{i}.keys`` / ``layer.{i}.values`` ([B, H, n, D]; bfloat16 stored as its
U16 bits), and ``__metadata__`` with ``fs_identity`` (the caller's identity string), ``fs_format``, ``fs_layers``
and ``fs_dtype``, and ``fs_digest``: one SHA-256 over the token ids and every layer's K and V bytes, so ids edited
with their K/V kept (or K/V edited under their ids) are refused, not silently continued from. Values are bounded
too: a K/V entry that is NaN, infinite or beyond ``LIMIT`` is refused (what a float16 cache can hold; real Qwen3
activations stay far below it, and 1e30 in a key turns every attention score into Inf).

Written atomically, and only over a regular file: ``--out /dev/full`` is refused, not replaced by a plain file.
This is the rule of ``fs_weights.atomic``, restated here because fs-kvcache depends on no other fs package.
"""

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import is_mlx
from .errors import KVCacheError

FORMAT = "fs-prompt-cache/2"  # 2: fs_digest binds the token ids to the K/V
LIMIT = 65504.0  # the largest float16


def _to_numpy(x: Any) -> tuple[np.ndarray, str]:
    """(numpy array, dtype name); bfloat16 travels as its uint16 bit pattern (MLX's, or a numpy cache's, which
    holds bf16 as uint16 bits already)."""
    if is_mlx(x):
        import mlx.core as mx

        if x.dtype == mx.bfloat16:
            return np.array(x.view(mx.uint16)), "bfloat16"
        x = np.array(x)
    if x.dtype == np.uint16:
        return np.ascontiguousarray(x), "bfloat16"
    if x.dtype not in (np.float32, np.float16):
        raise KVCacheError(f"cannot store a {x.dtype} cache")
    return np.ascontiguousarray(x), str(x.dtype)


def save_prompt_cache(
    path: str | os.PathLike[str], tokens: list[int], state: list[tuple[Any, Any]], identity: str
) -> None:
    from safetensors.numpy import save_file

    if any(k.shape[2] != len(tokens) for k, _ in state):
        raise KVCacheError(f"every layer must hold exactly the {len(tokens)} positions of the tokens")
    tensors: dict[str, np.ndarray] = {"tokens": np.asarray(tokens, np.int64)}
    dtypes = set()
    for i, (k, v) in enumerate(state):
        (tensors[f"layer.{i}.keys"], dk), (tensors[f"layer.{i}.values"], dv) = _to_numpy(k), _to_numpy(v)
        dtypes |= {dk, dv}
    if len(dtypes) > 1:
        raise KVCacheError(f"layers hold mixed dtypes {sorted(dtypes)}")
    meta = {
        "fs_identity": identity,
        "fs_format": FORMAT,
        "fs_layers": str(len(state)),
        "fs_dtype": dtypes.pop() if dtypes else "float32",
        "fs_digest": _digest(
            tensors["tokens"], [(tensors[f"layer.{i}.keys"], tensors[f"layer.{i}.values"]) for i in range(len(state))]
        ),
    }
    target = Path(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except (OSError, ValueError) as e:
        raise KVCacheError(f"{target}: cannot write: {getattr(e, 'strerror', None) or e}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise KVCacheError(f"{target}: exists and is not a regular file; fs replaces only regular files")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=meta)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp creates 0600; a prompt cache is ordinary data
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_prompt_cache(
    path: str | os.PathLike[str], identity: str
) -> tuple[list[int], list[tuple[np.ndarray, np.ndarray]], str]:
    """(tokens, per-layer (K, V) as numpy, dtype name); bfloat16 K/V come back as uint16 bit patterns.
    Raises when the file was written for another ``identity``."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if meta.get("fs_format") != FORMAT:
                old = str(meta.get("fs_format", "")).startswith("fs-prompt-cache/")
                raise KVCacheError(
                    f"{path}: not a prompt-cache file (format {meta.get('fs_format')!r})"
                    + ("; it was written by an older fs: make it again" if old else "")
                )
            if meta.get("fs_identity") != identity:
                raise KVCacheError(f"{path}: {_difference(meta.get('fs_identity'), identity)}; refusing to load it")
            n, dtype = meta.get("fs_layers", ""), meta.get("fs_dtype")
            if not n.isdigit() or int(n) <= 0 or dtype not in DTYPES:
                raise KVCacheError(f"{path}: fs_layers {n!r} / fs_dtype {dtype!r} are not a layer count and a dtype")
            layers = [(f.get_tensor(f"layer.{i}.keys"), f.get_tensor(f"layer.{i}.values")) for i in range(int(n))]
            tokens = f.get_tensor("tokens")
    except KVCacheError:
        raise
    except Exception as e:  # the safetensors library's own errors carry no common base beyond these
        raise KVCacheError(f"{path}: not a readable prompt-cache file: {type(e).__name__}: {e}") from None
    _check_state(path, tokens, layers, DTYPES[dtype])
    if meta.get("fs_digest") != _digest(tokens, layers):
        raise KVCacheError(
            f"{path}: fs_digest does not match the token ids and K/V stored: the file was edited or damaged"
        )
    return tokens.tolist(), layers, dtype


def _digest(tokens: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> str:
    h = hashlib.sha256(np.ascontiguousarray(tokens, "<i8").tobytes())
    for k, v in layers:
        h.update(np.ascontiguousarray(k).tobytes())
        h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


DTYPES = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32}


def _check_state(path: Any, tokens: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]], dtype: type) -> None:
    """Shapes agree, token ids are non-negative, and every K/V value is finite and within ``LIMIT``: a NaN loaded
    into a cache would silently turn every later token into the same garbage."""
    if tokens.dtype != np.int64 or tokens.ndim != 1 or (tokens < 0).any():
        raise KVCacheError(f"{path}: 'tokens' must be a 1-D int64 array of token ids")
    first = layers[0][0].shape
    for i, (k, v) in enumerate(layers):
        for name, x in (("keys", k), ("values", v)):
            where = f"{path}: layer.{i}.{name}"
            if x.dtype != dtype or x.ndim != 4 or x.shape != first or x.shape[2] != tokens.size:
                raise KVCacheError(
                    f"{where}: {x.dtype} {x.shape}, expected {np.dtype(dtype)} [B, H, {tokens.size}, D] like layer 0"
                )
            values = (x.astype(np.uint32) << 16).view(np.float32) if dtype is np.uint16 else x
            big = np.abs(values).max(initial=0.0)
            if not big <= LIMIT:  # NaN compares false
                raise KVCacheError(
                    f"{where}: holds {'NaN' if np.isnan(big) else big} (|K/V| must be finite and at most {LIMIT:g});"
                    " refusing to load it"
                )


def _difference(saved: Any, wanted: str) -> str:
    """Which named parts of two ``identity_string``s differ - "made with other weights, kv_dtype bfloat16 (this run:
    float32)" - rather than two blobs of hashes; a digest is long and says nothing once it differs, so only short
    values are shown."""
    try:
        old, new = json.loads(saved), json.loads(wanted)
    except (TypeError, ValueError):
        old = new = None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return f"made for {saved!r}, not {wanted!r}"
    parts = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a != b:
            short = all(isinstance(x, str) and len(x) <= 24 for x in (a, b))
            parts.append(f"{key} {a} (this run: {b})" if short else f"other {key}")
    return "made with " + ", ".join(parts)


def identity_string(**parts: Any) -> str:
    """A stable identity from named parts, e.g. model path + config hash, tokenizer hash, dtype."""
    return json.dumps(parts, sort_keys=True, default=str)
