"""generate_step: the decode step fs-generate and fs-agent share, on duck-typed models (tiny-llm's Week-4 call)."""

import numpy as np
import pytest

from fs_generate import generate, generate_step, prefill
from fs_kvcache import DenseKVCache
from toy import ByteTokenizer, ToyModel, one_hot, spell


def test_a_caller_that_stops_pays_no_extra_forward_pass():
    model = ToyModel(spell("abc", 2))
    steps = generate_step(model, [1, 2], model.make_cache())
    got = [next(steps)[0] for _ in range(3)]
    assert got == [ord("a"), ord("b"), ord("c")]
    assert [(ids, off) for ids, off, _ in model.calls] == [([1, 2], 0), ([97], 2), ([98], 3)]  # "c" not fed


def test_prefill_chunks_at_their_offsets():
    model = ToyModel(lambda seq: one_hot(ord("x")))
    logits, passes = prefill(model, list(range(1, 8)), model.make_cache(), offset=0, chunk=3)
    assert passes == 3 and int(np.argmax(logits)) == ord("x")
    assert [(ids, off) for ids, off, _ in model.calls] == [([1, 2, 3], 0), ([4, 5, 6], 3), ([7], 6)]


def test_generate_decodes_through_the_same_step():
    model = ToyModel(spell("hi", 1), eos_token_id=0)
    assert generate(model, ByteTokenizer(), [5], max_new_tokens=8).text == "hi"


class MlxToy:
    """A Week-4 model on MLX arrays without ``tokens_array``; ``hold`` keeps the MLX module as an attribute (the rule
    then knows MLX before the first call), else MLX is imported inside the call and only the cache tells."""

    def __init__(self, mx, hold):
        if hold:
            self.mx = mx
        self.seen = []

    def __call__(self, tokens, offset, caches, logits_to_keep=None):
        import mlx.core as mx

        self.seen.append(type(tokens).__module__.split(".")[0])
        t = mx.array(np.asarray(tokens)) if not isinstance(tokens, mx.array) else tokens
        kv = mx.zeros((1, 1, t.shape[1], 2))
        caches[0].update_and_fetch(kv, kv)
        logits = mx.zeros((1, t.shape[1], 16))
        return logits + mx.eye(16)[(offset + t.shape[1]) % 16]


@pytest.mark.parity
@pytest.mark.parametrize("hold", [True, False])
def test_an_mlx_toy_model_gets_mlx_tokens(reference, hold):
    model = MlxToy(reference("mlx.core"), hold)
    steps = generate_step(model, [1, 2, 3], [DenseKVCache()])
    got = [next(steps)[0] for _ in range(3)]
    assert got == [3, 4, 5]
    # holding MLX: MLX from the first call; otherwise the prefill knew nothing yet, then the cache holds mx arrays
    assert model.seen == (["mlx"] * 3 if hold else ["numpy", "mlx", "mlx"])


@pytest.mark.parity
def test_a_course_model_gets_mlx_tokens_on_its_first_call(reference):
    """The tiny-llm course's own test models do MLX arithmetic on the tokens of the first call, whose caches are
    still empty: their module imports MLX, and that is what the rule reads."""
    reference("mlx.core")
    from fs_generate.step import is_mlx_model
    from mlx_course_model import CourseModel

    model = CourseModel()
    assert is_mlx_model(model) and not is_mlx_model(ToyModel(spell("a", 1)))
    steps = generate_step(model, [1, 2, 3], [DenseKVCache()])
    assert [next(steps)[0] for _ in range(4)] == [3, 4, 5, 6]
