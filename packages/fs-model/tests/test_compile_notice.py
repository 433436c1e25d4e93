"""The first run's compile is announced, never silent: one stderr line when fs-model's kernels compile (a numba
cache miss), none when they all come from the cache. Each run is a fresh process with its own empty cache dir, and
multiplies by one matrix: which kernels compile does not matter here, that it is announced does, and one matrix's
call is the shortest compile (~4 s; a whole step's kernels take 15-25)."""

import os
import subprocess
import sys

import pytest

from fs_weights import write_random_checkpoint
from model_helpers import config

RUN = """
import sys
import numpy as np
from fs_model import load_model
m = load_model(sys.argv[1])
m.lm_head(np.ones((1, m.config.hidden_size), np.float32))
"""


@pytest.mark.kernels
def test_a_first_run_says_it_compiles_and_a_cached_run_says_nothing(tmp_path):
    d = write_random_checkpoint(tmp_path / "bf16", config(), dtype="bfloat16", seed=1)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}

    def stderr() -> str:
        done = subprocess.run([sys.executable, "-c", RUN, str(d)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stderr

    first = stderr()
    assert first.count("compiling CPU kernels") == 1  # one line, however many kernels compile
    assert "compiling CPU kernels for bf16 weights (first run only" in first
    assert "compiling" not in stderr()  # the same kernels again: all from the cache
