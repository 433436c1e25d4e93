import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # toy.py under --import-mode=importlib
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def fast(tmp_path_factory, qwen3_tokenizer_dir):
    """A tiny random Qwen3 in bf16 with the real tokenizer, on the fast (batch-invariant) kernels: where the engine
    equals generate bit for bit and speculation runs."""
    from fs_generate import load
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:  # the kernels session installs fs-model[fast]: there this must not skip
        pytest.skip("numba is not installed: the bitwise contracts on the kernels are tested by `nox -s kernels`")
    d = write_random_checkpoint(
        tmp_path_factory.mktemp("engine") / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir
    )
    return load(str(d))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, qwen3_tokenizer_dir):
    """A tiny random Qwen3 (vocab 151936, untied) with the real tokenizer, float32."""
    from fs_weights import preset, write_random_checkpoint

    return write_random_checkpoint(
        tmp_path_factory.mktemp("gen") / "tiny",
        preset("tiny", tie_word_embeddings=False),
        dtype="float32",
        tokenizer=qwen3_tokenizer_dir,
        seed=1,
    )


MOE = dict(model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
           norm_topk_prob=True, mlp_only_layers=[1])  # fmt: skip


@pytest.fixture(scope="session")
def moe_dir(tmp_path_factory, qwen3_tokenizer_dir):
    """A tiny bf16 Qwen3-MoE (8 experts, 2 per token, layer 1 dense) with the real tokenizer: the kernels' MoE tests."""
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:  # the kernels session installs fs-model[fast]: there this must not skip
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    root = tmp_path_factory.mktemp("moe")
    return write_random_checkpoint(
        root / "bf16", preset("tiny", **MOE), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir
    )
