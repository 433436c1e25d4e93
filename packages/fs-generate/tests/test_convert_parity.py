"""``fs-weights convert --quantize 4`` output, loaded by mlx-lm and by fs on both backends: the same greedy
tokens on MLX (same ops on the same tensors), and on numpy (float32 activations over the dequantized weights,
where mlx-lm computes in bf16) the prompt's logits within bf16 tolerance and the same first token."""

import numpy as np
import pytest

from fs_generate import generate, load
from fs_weights.cli import main as fs_weights

pytestmark = pytest.mark.parity
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def converted(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_weights import preset, write_random_checkpoint

    root = tmp_path_factory.mktemp("convert")
    src = write_random_checkpoint(root / "src", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir)
    assert fs_weights(["convert", str(src), str(root / "q4"), "--quantize", "4", "--quiet"]) == 0
    return root / "q4"


def mlx_lm_greedy(path, n, reference):
    mx = reference("mlx.core")
    mlx_lm = reference("mlx_lm")
    from mlx_lm.generate import generate_step

    model, tok = mlx_lm.load(str(path))
    ids = tok.encode(PROMPT)
    steps = generate_step(mx.array(ids), model, sampler=lambda x: mx.argmax(x, -1))
    tokens = [int(t) for (t, _), _ in zip(steps, range(n), strict=False)]
    logits = np.array(model(mx.array([ids]))[0, -1].astype(mx.float32))
    return ids, tokens, logits


def test_mlx_lm_and_fs_mlx_agree_token_for_token(converted, reference):
    ids, want, _ = mlx_lm_greedy(converted, 16, reference)
    model, tok = load(str(converted), backend="mlx")
    assert tok.encode(PROMPT) == ids
    assert generate(model, tok, ids, max_new_tokens=16, eos_token_ids=[]).token_ids == want


def test_fs_numpy_agrees_within_bf16_tolerance(converted, reference):
    ids, want, logits = mlx_lm_greedy(converted, 1, reference)
    model, tok = load(str(converted))
    ours = np.asarray(model.forward(ids))[-1]
    assert np.abs(ours - logits).max() <= 5e-2 * np.abs(logits).max()
    assert generate(model, tok, ids, max_new_tokens=1, eos_token_ids=[]).token_ids == want
