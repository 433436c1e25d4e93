"""``warm_up``: what a server runs before it says ready. After it, requests on the CPU kernels compile nothing
(the first client does not wait for numba), and the serving engine it precedes starts untouched. Run in a fresh
process with an empty numba cache dir, so the compiles are real and nothing is warm already."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fs_weights import preset, write_random_checkpoint

RUN = """
import json, sys
from numba.core import event
sys.path.insert(0, sys.argv[2])
from toy import ByteTokenizer
from fs_generate import Engine
from fs_generate.warm_up import warm_up
from fs_model import load_model

def names(rec):
    return sorted({e.data["dispatcher"].py_func.__qualname__ for _, e in rec.buffer if e.is_start})

model, tok = load_model(sys.argv[1]), ByteTokenizer()  # bf16 kept: the fused kernels and the tiles
engine = Engine(model, tok, max_batch=4, kv_budget_bytes=64 * model.kv_block_bytes(16))
with event.install_recorder("numba:compile") as during:
    warm_up(engine)
with event.install_recorder("numba:compile") as after:
    handles = [engine.submit(list(range(5, 5 + n)), max_new_tokens=6, eos_token_ids=()) for n in (3, 40, 17)]
    engine.run_until_idle()
    lengths = [len(h.result().token_ids) for h in handles]
print(json.dumps({"during": names(during), "after": names(after), "lengths": lengths,
                  "finished": engine.stats()["finished"]}))
"""


@pytest.mark.kernels
@pytest.mark.slow  # every kernel compiled from nothing: ~25 s of CI's 8 minutes, so it runs in `nox -s slow`
def test_after_the_warm_up_requests_compile_nothing(tmp_path):
    d = write_random_checkpoint(tmp_path / "bf16", preset("tiny", vocab_size=256), dtype="bfloat16", seed=2)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(d), str(Path(__file__).parent)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert "_attend_impl" in got["during"]  # the warm-up compiled the kernels a request needs...
    assert got["after"] == []  # ...all of them: the requests after it compiled nothing
    assert got["lengths"] == [6, 6, 6]
    assert got["finished"] == 3  # the warm-up's requests were not this engine's
