"""Several matrices in one tile call (cpu/tile_groups.py: a layer's q/k/v, gate/up): every output the same bits as
each matrix's own call, for every kept format and row count, and a group only where every part tiles alike."""

import numpy as np
import pytest

from fs_model.cpu import SWITCHES, tiles
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.tile_groups import TileGroup
from fs_weights import f32_to_bf16
from model_helpers import cpu_name

pytestmark = pytest.mark.kernels
SHAPES = [(256, 128), (64, 128), (37, 128)]  # q, k, v-like: different row counts, one with a partial block


def layers(fmt, seed=0):
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal(s, dtype=np.float32) for s in SHAPES]
    if fmt == "bf16":
        return [Bf16Linear(f32_to_bf16(w)) for w in ws]
    return [AffineLinear(quantize_affine(w, 8 if fmt == "int8" else 4, 64)) for w in ws]


@pytest.mark.parametrize("fmt", ["bf16", "int8", "int4"])
@pytest.mark.parametrize("M", [1, 2, 3, 5, 9])
def test_a_group_gives_each_matrix_its_own_bits(reference, fmt, M):
    reference("numba")
    if not tiles.applies("bf16", 128):
        pytest.skip(f"{cpu_name()} has no AVX2 + FMA: no tiles, so no groups")
    parts = layers(fmt)
    group = TileGroup.of(parts)
    integer = parts[0].tiles.kind in tiles.INTEGER
    assert (group is not None) == integer  # the int8-activation kinds group (4-bit everywhere the tiles run)
    assert integer or fmt != "int4" or not SWITCHES.int8_activations  # FS_INT8_ACTIVATIONS=0: float 4-bit tiles
    if group is None:
        return
    X = np.random.default_rng(M).standard_normal((M, 128), dtype=np.float32)
    got = group(X)
    for layer, y in zip(parts, got, strict=True):
        assert y.shape == (M, layer.shape[0]) and np.array_equal(y, layer(X)), fmt


def test_no_group_across_formats_or_without_the_tiles(reference):
    reference("numba")
    if not tiles.applies("bf16", 128):
        pytest.skip(f"{cpu_name()} has no AVX2 + FMA: no tiles, so no groups")
    mixed = [*layers("int8")[:1], *layers("int4")[1:]]
    assert TileGroup.of(mixed) is None  # other kernels: called one by one
    one = layers("int4")
    if one[0].tiles.kind not in tiles.INTEGER:
        pytest.skip("FS_INT8_ACTIVATIONS=0: the 4-bit tiles take float activations, and no layer groups")
    assert TileGroup.of(one) is not None
    one[0].invariant = False  # FS_BATCH_INVARIANT=0: a decode may leave the tiles for VNNI rows, so no group
    assert TileGroup.of(one) is None
