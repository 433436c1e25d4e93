"""The grouped expert kernel (fs_model.cpu.experts): a Qwen3-MoE layer's chosen experts in two tile calls give the
bits of the reference loop's per-expert calls, for every kept format and tile kind, on this CPU's ISA."""

import numpy as np
import pytest

from fs_model import load_model
from fs_weights import write_random_checkpoint
from model_helpers import config, cpu_name

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
    from fs_model.cpu import tiles
    from fs_model.cpu.experts import GroupedMoE
    from fs_model.numpy.moe import SparseMoE

    if not cpu.HAVE_NUMBA:
        pytest.fail("the kernels session installs numba")
    stored, int8_activations = FORMATS[name]
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", int8_activations)
    d = write_random_checkpoint(tmp_path / "m", config(**MOE), seed=7, **stored)
    moe = load_model(d).blocks[0].mlp
    if not tiles.applies("bf16", 128):
        pytest.skip(f"{cpu_name()} lacks AVX2 + FMA: no tiles, the reference loop runs (test_tiles.py)")
    assert isinstance(moe, GroupedMoE) and moe.gate_up is not None and moe.down is not None
    x = np.random.default_rng(0).standard_normal((2, 9, 128)).astype(np.float32)
    got = moe(x)
    assert np.array_equal(got, SparseMoE.__call__(moe, x))
    assert np.array_equal(got[1, 4:5], moe(x[1:2, 4:5])[0])  # a token alone: its own bits
