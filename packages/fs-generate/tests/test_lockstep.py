"""A tensor-parallel engine over 2 ranks on 127.0.0.1 (mx.distributed ring): rank 0 takes the requests, every
rank runs the same steps; the outputs equal one process's engine. A rank that dies makes the other exit."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fs_generate import Engine, load

pytestmark = pytest.mark.parity  # MLX is the reference library here: `nox -s parity` runs these
WORKER = Path(__file__).parent / "lockstep_worker.py"
sys.path.insert(0, str(Path(__file__).parent))


def spawn(hostfile, path, out, **env):
    hosts, _ = hostfile(2)
    return [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(path), str(out)],
            env=dict(os.environ, MLX_RANK=str(r), MLX_HOSTFILE=str(hosts), **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in range(2)
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_weights import preset, write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("tp") / "tiny", preset("tiny", tie_word_embeddings=False),
                                   dtype="float32", tokenizer=qwen3_tokenizer_dir)  # fmt: skip


def test_two_ranks_serve_the_same_outputs_as_one_engine(tiny, tmp_path, reference, ring_hostfile):
    reference("mlx.core")
    from lockstep_worker import REQUESTS

    procs = spawn(ring_hostfile, tiny, tmp_path)
    try:
        logs = [p.communicate(timeout=300)[0].decode() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    got = json.loads((tmp_path / "results.json").read_text())
    model, tok = load(str(tiny), backend="mlx", dtype="float32")
    engine = Engine(model, tok, max_batch=3, max_step_tokens=16)
    want = [h.result() for h in [engine.submit(p, eos_token_ids=[], **kw) for p, kw in REQUESTS]]
    assert [g[0] for g in got] == [w.token_ids for w in want]
    for (_, lp), w in zip(got, want, strict=True):  # the all-sums round differently: float32 tolerance
        assert lp == pytest.approx(w.logprobs, rel=1e-4, abs=1e-4)


def test_a_dead_rank_makes_the_other_exit_within_the_watchdog(tiny, tmp_path, reference, ring_hostfile):
    reference("mlx.core")
    t0 = time.monotonic()
    procs = spawn(ring_hostfile, tiny, tmp_path, KILL_AFTER="5", WATCHDOG_S="3")
    try:
        logs = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert procs[1].returncode == 9
    assert procs[0].returncode != 0, logs[0]
    assert time.monotonic() - t0 < 90
    assert "another rank has died" in logs[0] or "rror" in logs[0], logs[0]
