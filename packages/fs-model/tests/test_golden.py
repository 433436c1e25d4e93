"""fs_model against committed mlx-lm outputs: runs anywhere, no mlx needed (the numpy backend)."""

import hashlib
import json

import numpy as np
import pytest

from fs_model import load_model
from model_helpers import GOLDEN

MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())


def test_golden_files_are_the_ones_the_manifest_describes():
    for rel, digest in MANIFEST["sha256"].items():
        assert hashlib.sha256((GOLDEN / rel).read_bytes()).hexdigest() == digest, rel


@pytest.fixture(scope="module")
def traced():
    model = load_model(GOLDEN / "tiny-qwen3", backend="numpy")
    return model.trace(MANIFEST["prompt_ids"])


@pytest.mark.parametrize("point", list(MANIFEST["shapes"]))
def test_every_checkpoint_matches_mlx_lm(traced, point):
    want = np.load(GOLDEN / "activations.npz")[point]
    got = traced[point]
    assert got.shape == want.shape == tuple(MANIFEST["shapes"][point])
    rtol = MANIFEST["tolerance"]["rtol"]
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= rtol, f"{point}: max|Δ| = {err:.2e} × max|want| > {rtol}"


def test_first_diverging_block_is_named(traced):
    """The comparison walks data-flow order, so a bug is reported where it starts, not at the logits."""
    golden = np.load(GOLDEN / "activations.npz")
    order = ["embedding", *[f"block.{i}" for i in range(MANIFEST["config"]["num_hidden_layers"])], "final_norm"]
    broken = dict(traced)
    broken["block.1"] = broken["block.1"] + 1e-2
    first = next(p for p in order if np.abs(broken[p] - golden[p]).max() > 1e-4 * np.abs(golden[p]).max())
    assert first == "block.1"
