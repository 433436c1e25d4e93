"""Tensor parallelism on mx.distributed (MLX backend): two ranks on 127.0.0.1 form a ring group, each loads its
slice of the checkpoint, and their logits equal one process's within float32 rounding, greedy tokens equal."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fs_model import ModelError, load_model
from fs_weights import write_random_checkpoint
from model_helpers import config, rel_err

pytestmark = pytest.mark.parity  # MLX is the reference library here: `nox -s parity` runs these
IDS = [3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 338, 327]
WORKER = Path(__file__).parent / "tp_worker.py"


def run_ranks(hostfile, path, out, dtype, *extra, n=2, timeout=120):
    """Spawn n ranks (MLX_RANK / MLX_HOSTFILE, as mlx.launch sets them); return their results, rank order."""
    hosts, _ = hostfile(n, directory=out)
    procs = []
    for r in range(n):
        env = dict(os.environ, MLX_RANK=str(r), MLX_HOSTFILE=str(hosts))
        cmd = [sys.executable, str(WORKER), str(path), str(out), ",".join(map(str, IDS)), dtype, *extra]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        logs = [p.communicate(timeout=timeout)[0].decode() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    return [np.load(out / f"rank{r}.npz") for r in range(n)]


@pytest.mark.parametrize("name", ["untied-gqa2", "tied", "mha"])
def test_two_ranks_give_one_process_logits(tmp_path, reference, ring_hostfile, name):
    reference("mlx.core")
    d = write_random_checkpoint(tmp_path / "m", config(name), dtype="float32")
    one = load_model(d, backend="mlx", dtype="float32")
    want = np.asarray(one.forward(IDS))
    ranks = run_ranks(ring_hostfile, d, tmp_path, "float32")
    assert all(int(r["size"]) == 2 for r in ranks)
    assert np.array_equal(ranks[0]["logits"], ranks[1]["logits"])  # every rank: the same bits
    assert rel_err(ranks[0]["logits"], want) <= 1e-5
    cache, seq = one.make_cache(), list(IDS)
    step = np.asarray(one.forward(IDS, cache))[-1]
    for _ in range(12):
        seq.append(int(step.argmax()))
        step = np.asarray(one.forward([seq[-1]], cache))[-1]
    assert ranks[0]["greedy"].tolist() == ranks[1]["greedy"].tolist() == seq[len(IDS) :]


def test_two_ranks_equal_mlx_lms_sharded_load(tmp_path, reference, ring_hostfile):
    reference("mlx_lm")
    d = write_random_checkpoint(tmp_path / "m", config("untied-gqa2"), dtype="float32")
    ours = run_ranks(ring_hostfile, d, tmp_path, "float32")
    (tmp_path / "ref").mkdir()
    theirs = run_ranks(ring_hostfile, d, tmp_path / "ref", "float32", "mlx_lm")
    assert rel_err(ours[0]["logits"], theirs[0]["logits"]) <= 1e-5


def test_shard_after_loading_equals_sharded_loading(tmp_path, reference, ring_hostfile):
    """``model.shard(group)`` (mlx-lm's call, on a model loaded whole) keeps the same slices as loading them."""
    reference("mlx.core")
    d = write_random_checkpoint(tmp_path / "q", config("untied-gqa2"), dtype="float32", quantize=8, group_size=32)
    loaded = run_ranks(ring_hostfile, d, tmp_path, "float32")
    (tmp_path / "cut").mkdir()
    cut = run_ranks(ring_hostfile, d, tmp_path / "cut", "float32", "shard")
    assert np.array_equal(loaded[0]["logits"], cut[0]["logits"])
    assert loaded[0]["greedy"].tolist() == cut[0]["greedy"].tolist()


def test_a_quantized_checkpoint_shards_in_whole_groups(tmp_path, reference, ring_hostfile):
    reference("mlx.core")
    d = write_random_checkpoint(tmp_path / "q", config("untied-gqa2"), dtype="float32", quantize=4, group_size=32)
    want = np.asarray(load_model(d, backend="mlx", dtype="float32").forward(IDS))
    ranks = run_ranks(ring_hostfile, d, tmp_path, "float32")
    assert rel_err(ranks[0]["logits"], want) <= 1e-5


def test_heads_that_do_not_divide_are_refused(tmp_path, reference):
    mx = reference("mlx.core")
    d = write_random_checkpoint(tmp_path / "mqa", config("mqa"), dtype="float32")

    class TwoRanks:  # the check runs before any collective: a stand-in group of size 2 is enough
        def rank(self):
            return 0

        def size(self):
            return 2

    with pytest.raises(ModelError, match="num_key_value_heads=1 does not divide by 2"):
        load_model(d, backend="mlx", tensor_group=TwoRanks())
    with pytest.raises(ModelError, match="needs backend='mlx'"):
        load_model(d, tensor_group=mx.distributed.init())


def test_qwen3_moe_splits_every_expert_over_the_ranks(tmp_path, reference, ring_hostfile):
    """A Qwen3-MoE with a dense layer 0: two ranks, each holding half of every expert's width, give one process's
    logits and greedy tokens; quantized, loading the slices equals cutting a whole model (the experts' [E, out, in]
    arrays split one axis further in than a dense matrix: splitting the expert axis instead fails both)."""
    reference("mlx.core")
    moe = config(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                 norm_topk_prob=True, mlp_only_layers=[0])  # fmt: skip
    d = write_random_checkpoint(tmp_path / "m", moe, dtype="float32")
    one = load_model(d, backend="mlx", dtype="float32")
    ranks = run_ranks(ring_hostfile, d, tmp_path, "float32")
    assert np.array_equal(ranks[0]["logits"], ranks[1]["logits"])
    assert rel_err(ranks[0]["logits"], np.asarray(one.forward(IDS))) <= 1e-5
    cache, seq = one.make_cache(), list(IDS)
    step = np.asarray(one.forward(IDS, cache))[-1]
    for _ in range(12):
        seq.append(int(step.argmax()))
        step = np.asarray(one.forward([seq[-1]], cache))[-1]
    assert ranks[0]["greedy"].tolist() == seq[len(IDS) :]
    q = write_random_checkpoint(tmp_path / "q", moe, dtype="float32", quantize=4, group_size=32)
    (tmp_path / "sliced").mkdir()
    (tmp_path / "cut").mkdir()
    sliced = run_ranks(ring_hostfile, q, tmp_path / "sliced", "float32")
    cut = run_ranks(ring_hostfile, q, tmp_path / "cut", "float32", "shard")
    assert np.array_equal(sliced[0]["logits"], cut[0]["logits"])
    want = np.asarray(load_model(q, backend="mlx", dtype="float32").forward(IDS))
    assert rel_err(sliced[0]["logits"], want) <= 1e-4  # 4-bit: the quantized MoE parity tolerance
