"""The grouped expert kernel (fs_model.cpu.experts): a Qwen3-MoE layer's chosen experts in two tile calls give the
bits of the reference loop's per-expert calls, for every kept format and tile kind, on this CPU's ISA; and the
compiled routing (fs_model.cpu.routing) ranks as the reference does, with its values to float32 rounding."""

import numpy as np
import pytest

from fs_model import load_model
from fs_weights import write_random_checkpoint
from model_helpers import config, cpu_name, need_tiles

# 8 experts, 3 per token, and matrices whose k (128) every tile kind takes (4-bit needs two groups of 64)
MOE = dict(model_type="qwen3_moe", num_experts=8, num_experts_per_tok=3, moe_intermediate_size=128, hidden_size=128,
           num_hidden_layers=1, norm_topk_prob=True)  # fmt: skip
FORMATS = {  # name -> (how the checkpoint is stored, int8 activations on)
    "bf16": (dict(dtype="bfloat16"), True),
    "int8": (dict(dtype="float32", quantize=8, group_size=64), True),
    "int4-int8-activations": (dict(dtype="float32", quantize=4, group_size=64), True),
    "int4-float-activations": (dict(dtype="float32", quantize=4, group_size=64), False),
}


@pytest.mark.kernels
@pytest.mark.parametrize("name", FORMATS)
def test_grouped_experts_equal_the_per_expert_calls(tmp_path, monkeypatch, name):
    """Tokens that share experts, experts no token chose, one token alone: the grouped layer equals the reference
    loop bit for bit (a wrong group offset, an up row written over a gate row or a pair scattered back to the wrong
    (token, rank) moves values far beyond rounding)."""
    from fs_model import cpu
    from fs_model.cpu import routing, tiles
    from fs_model.cpu.experts import GroupedMoE
    from fs_model.numpy import moe as numpy_moe
    from fs_model.numpy.moe import SparseMoE

    if not cpu.HAVE_NUMBA:
        pytest.fail("the kernels session installs numba")
    stored, int8_activations = FORMATS[name]
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", int8_activations)
    d = write_random_checkpoint(tmp_path / "m", config(**MOE), seed=7, **stored)
    moe = load_model(d).blocks[0].mlp
    need_tiles("the reference loop runs (test_tiles.py)")
    if not tiles.applies("bf16", 128):
        pytest.skip(f"{cpu_name()} lacks AVX2 + FMA: no tiles, the reference loop runs (test_tiles.py)")
    assert isinstance(moe, GroupedMoE) and moe.gate_up is not None and moe.down is not None
    x = np.random.default_rng(0).standard_normal((2, 9, 128)).astype(np.float32)
    got = moe(x)
    monkeypatch.setattr(numpy_moe, "route", routing.route)  # the reference loop on the same routing
    assert np.array_equal(got, SparseMoE.__call__(moe, x))
    assert np.array_equal(got[1, 4:5], moe(x[1:2, 4:5])[0])  # a token alone: its own bits


@pytest.mark.kernels
@pytest.mark.parametrize("normalize", [True, False])
def test_compiled_routing_ranks_as_the_reference(normalize):
    """The same experts in the same order as numpy/moe.route (largest first, a tie to the lower expert) and the
    same weights to float32 rounding (its sums run left to right, numpy's pairwise: not the same bits). A selection
    that kept a later expert on a tie, or ranked by the logits' order after a softmax that rounded two apart, fails."""
    from fs_model import cpu
    from fs_model.cpu import routing
    from fs_model.numpy.moe import route

    if not cpu.HAVE_NUMBA:
        pytest.fail("the kernels session installs numba")
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((64, 128)) * 4).astype(np.float32)
    logits[0] = 0.0  # every expert tied: the first k
    logits[1, [5, 9, 70]] = 30.0  # three tied at the top, then the rest
    logits[2, :] = -1e4
    logits[2, 100] = 0.0  # one expert takes all the weight
    for k in (1, 8):
        top, w = routing.route(logits, k, normalize)
        want_top, want_w = route(logits, k, normalize)
        assert top.dtype == np.int64 and w.dtype == np.float32 and top.shape == w.shape == (64, k)
        assert np.array_equal(top, want_top)
        np.testing.assert_allclose(w, want_w, rtol=2e-6, atol=1e-30)
    assert routing.route(logits, 8, normalize)[0][0].tolist() == list(range(8))
    assert routing.route(logits, 4, normalize)[0][1].tolist()[:3] == [5, 9, 70]
