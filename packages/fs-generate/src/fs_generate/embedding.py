"""Text embeddings from a Qwen3-Embedding checkpoint: the same Qwen3 network, read at its last token.

Why here: an embedding model is a Qwen3 model whose output is not a next token but a vector, and fs-serve's
``/v1/embeddings`` and any script need the same recipe (sentence-transformers' modules.json for Qwen3-Embedding
says it: last-token pooling, then L2 normalization).

Contract, for texts of any lengths:

    ids(text)   = tokenizer.encode(text) + the special token tokenizer.json's post-processor appends
                  (Qwen3-Embedding's TemplateProcessing adds "<|endoftext|>"; a tokenizer without one adds none)
    h [B, H]    = model.last_hidden(rows left-padded to a common length)   - the final norm's output, float32
    e [B, D]    = h[:, :D] / ||h[:, :D]||₂     D = ``dimensions`` (Matryoshka: truncate, then renormalize), else H

    >>> vectors = embed(model, [ids(tok, "a cat"), ids(tok, "a kitten sat")])   # [2, 1024] for Qwen3-Embedding-0.6B
    >>> float(vectors[0] @ vectors[1])                                          # cosine similarity, in [-1, 1]

Rows are run ``MAX_BATCH_TOKENS`` padded tokens per pass, longest first, so a long input does not pad the short
ones. ``is_embedding_model`` says whether a directory is one (a ``modules.json`` with last-token pooling, or a
headless checkpoint): a generation checkpoint read at its last token gives a vector no one trained.
"""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fs_model import CausalLM

from .errors import GenerateError

MAX_BATCH_TOKENS = 4096  # padded tokens per pass: bounds the activations ([B, S, H] and attention's [B, h, S, S])


def appended_tokens(tokenizer: Any) -> list[int]:
    """The special tokens tokenizer.json's ``TemplateProcessing`` post-processor puts after a single text."""
    spec = getattr(tokenizer, "spec", None) or {}
    post = spec.get("post_processor") or {}
    steps = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    out: list[int] = []
    for p in steps:
        if p.get("type") != "TemplateProcessing":
            continue
        single = p.get("single", [])
        at = next((i for i, s in enumerate(single) if "Sequence" in s), len(single))
        for s in single[at + 1 :]:
            name = s.get("SpecialToken", {}).get("id")
            token = tokenizer.token_to_id(name) if isinstance(name, str) else None
            if token is not None:
                out.append(token)
    return out


def ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text)) + appended_tokens(tokenizer)


def is_embedding_model(path: str | Path) -> bool:
    """A sentence-transformers directory whose pooling is last-token, or a headless Qwen3Model checkpoint."""
    p = Path(path)
    if not str(path) or not p.exists():  # a model built in memory
        return False
    pooling = p / "1_Pooling" / "config.json"
    if (p / "modules.json").is_file() and pooling.is_file():
        try:
            return bool(json.loads(pooling.read_text(encoding="utf-8")).get("pooling_mode_lasttoken"))
        except (ValueError, OSError):
            return False
    try:
        from fs_weights import Checkpoint

        with Checkpoint.open(p) as ckpt:
            return bool(ckpt.headless)
    except Exception:
        return False


def embed(model: CausalLM, rows: Sequence[Sequence[int]], dimensions: int | None = None) -> np.ndarray:
    """``[len(rows), dimensions or H]`` float32 unit vectors (module docstring); rows keep their order."""
    rows = [[int(t) if isinstance(t, (int, np.integer)) and not isinstance(t, bool) else t for t in r] for r in rows]
    H, V, ctx = model.config.hidden_size, model.vocab_size, model.config.max_position_embeddings
    if not rows or any(not r for r in rows):
        raise GenerateError("embed needs at least one input, and every input at least one token")
    for b, r in enumerate(rows):
        bad = next((i for i, t in enumerate(r) if type(t) is not int or not 0 <= t < V), None)
        if bad is not None:
            raise GenerateError(f"input {b}: token id {r[bad]!r} at position {bad} is out of range [0, {V})")
        if len(r) > ctx:
            raise GenerateError(f"input {b} is {len(r)} tokens; the model's context is {ctx}")
    if dimensions is not None and (type(dimensions) is not int or not 1 <= dimensions <= H):
        raise GenerateError(f"dimensions must be an int in [1, {H}], got {dimensions!r}")
    out = np.zeros((len(rows), dimensions or H), dtype=np.float32)
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    at = 0
    while at < len(order):
        S = len(rows[order[at]])
        n = max(1, min(len(order) - at, MAX_BATCH_TOKENS // S))
        batch = order[at : at + n]
        pad = [S - len(rows[i]) for i in batch]
        padded = [[0] * p + list(rows[i]) for p, i in zip(pad, batch, strict=True)]
        h = np.asarray(model.last_hidden(model.tokens_array(padded), pad=pad), dtype=np.float64)[:, : dimensions or H]
        h /= np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-12)
        out[batch] = h.astype(np.float32)
        at += n
    return out
