"""Writes the committed golden files from mlx-lm (the reference), never from fs_model.

    uv run --all-packages --group parity python packages/fs-model/tests/golden/make_golden.py

Output, next to this script: ``tiny-qwen3/`` (a random float32 checkpoint: untied lm_head, GQA 4:2,
head_dim 32 != hidden/heads, rope_theta 10000), ``activations.npz`` (mlx-lm's embedding, every block's
output, final norm and logits for PROMPT) and ``manifest.json`` (versions, hashes, tolerances).
Never rerun this to make a failing comparison pass: find the bug.
"""

import hashlib
import json
import os
import platform
from importlib.metadata import version
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mlx.core as mx
from mlx_lm.models.base import create_attention_mask
from mlx_lm.utils import load_model

from fs_weights import Qwen3Config, write_random_checkpoint

HERE = Path(__file__).parent
PROMPT = [151643, 9707, 11, 1879, 0, 220, 102, 17, 3, 400, 399, 1]
CONFIG = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=24,
    max_position_embeddings=1024,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    tie_word_embeddings=False,
)


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main() -> None:
    ids = [i % CONFIG["vocab_size"] for i in PROMPT]
    d = write_random_checkpoint(
        HERE / "tiny-qwen3", Qwen3Config.from_dict(CONFIG), seed=2024, dtype="float32", overwrite=True
    )
    model, _ = load_model(d)
    x = model.model.embed_tokens(mx.array([ids]))
    acts = {"embedding": x}
    mask = create_attention_mask(x, None)
    for i, layer in enumerate(model.model.layers):
        x = layer(x, mask, None)
        acts[f"block.{i}"] = x
    acts["final_norm"] = model.model.norm(x)
    acts["logits"] = model.lm_head(acts["final_norm"])
    np.testing.assert_array_equal(np.array(acts["logits"]), np.array(model(mx.array([ids]))))
    arrays = {k: np.array(v[0].astype(mx.float32)) for k, v in acts.items()}
    np.savez(HERE / "activations.npz", ids=np.array(ids), **arrays)
    manifest = {
        "reference": {
            "mlx": version("mlx"),
            "mlx-lm": version("mlx-lm"),
            "device": str(mx.default_device()),
            "platform": platform.platform(),
        },
        "prompt_ids": ids,
        "config": CONFIG,
        "tolerance": {"rule": "max|got - want| <= rtol * max|want| per array", "rtol": 1e-4, "dtype": "float32"},
        "sha256": {str(p.relative_to(HERE)): sha256(p) for p in sorted([*d.iterdir(), HERE / "activations.npz"])},
        "shapes": {k: list(v.shape) for k, v in arrays.items()},
    }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest["reference"]), "->", HERE)


if __name__ == "__main__":
    main()
