"""Several matrices in one tile call (cpu/tile_groups.py: a layer's q/k/v, gate/up): every output the same bits as
each matrix's own call, for every kept format and row count, and a group only where every part tiles alike."""

import numpy as np
import pytest

from fs_model.cpu import SWITCHES, tiles
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.tile_groups import TileGroup
from fs_weights import f32_to_bf16
from model_helpers import cpu_name, need_tiles

pytestmark = pytest.mark.kernels
SHAPES = [(256, 128), (64, 128), (37, 128)]  # q, k, v-like: different row counts, one with a partial block
WHOLE = [(256, 128), (64, 128), (48, 128)]  # whole 16-row blocks, as every Qwen3 matrix: 4-bit takes q4ic on VNNI


def layers(fmt, seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    if fmt == "bf16":
        return [Bf16Linear(f32_to_bf16(w)) for w in ws]
    return [AffineLinear(quantize_affine(w, 8 if fmt == "int8" else 4, 64)) for w in ws]


@pytest.mark.parametrize("shapes", [SHAPES, WHOLE], ids=["partial-block", "whole-blocks"])
@pytest.mark.parametrize("fmt", ["bf16", "int8", "int4"])
@pytest.mark.parametrize("M", [1, 2, 3, 5, 9])
def test_a_group_gives_each_matrix_its_own_bits(reference, fmt, M, shapes):
    reference("numba")
    need_tiles("no groups")
    if not tiles.applies("bf16", 128):
        pytest.skip(f"{cpu_name()} has no AVX2 + FMA: no tiles, so no groups")
    parts = layers(fmt, shapes=shapes)
    group = TileGroup.of(parts)
    kinds = {p.tiles.kind for p in parts}
    integer = kinds <= set(tiles.INTEGER)
    # the int8-activation kinds group where every part runs the same kernels: 4-bit everywhere the tiles run, except
    # a partial 16-row block beside whole ones on VNNI hosts (q4iw beside q4ic: column_tiles.py)
    assert (group is not None) == (integer and len(kinds) == 1)
    assert integer or fmt != "int4" or not SWITCHES.int8_activations  # FS_INT8_ACTIVATIONS=0: float 4-bit tiles
    if fmt == "int4" and integer and shapes is WHOLE:
        assert group is not None
    if group is None:
        return
    X = np.random.default_rng(M).standard_normal((M, 128), dtype=np.float32)
    got = group(X)
    for layer, y in zip(parts, got, strict=True):
        assert y.shape == (M, layer.shape[0]) and np.array_equal(y, layer(X)), fmt


def test_no_group_across_formats_or_without_the_tiles(reference):
    reference("numba")
    need_tiles("no groups")
    if not tiles.applies("bf16", 128):
        pytest.skip(f"{cpu_name()} has no AVX2 + FMA: no tiles, so no groups")
    mixed = [*layers("int8")[:1], *layers("int4")[1:]]
    assert TileGroup.of(mixed) is None  # other kernels: called one by one
    one = layers("int4", shapes=WHOLE)
    if one[0].tiles.kind not in tiles.INTEGER:
        pytest.skip("FS_INT8_ACTIVATIONS=0: the 4-bit tiles take float activations, and no layer groups")
    assert TileGroup.of(one) is not None
    one[0].invariant = False  # FS_BATCH_INVARIANT=0: a decode may leave the tiles for VNNI rows, so no group
    assert TileGroup.of(one) is None
