"""A model written the way the tiny-llm course writes its Week-4 test models: MLX only, no ``tokens_array``, and
its first call (on empty caches) already does MLX arithmetic on the tokens. Imported only once MLX is known to be
installed (test_step.py)."""

import mlx.core as mx


class CourseModel:
    """Logits put all their mass on ``(offset + S) % V``: the next token is its position, so a decode is checkable."""

    V = 16

    def __call__(self, inputs, offset, cache, logits_to_keep=None):
        x = inputs.astype(mx.float32)  # fails on a numpy array: mx.float32 is not a numpy dtype
        S = x.shape[1]
        kv = mx.zeros((1, 1, S, 2))
        cache[0].update_and_fetch(kv, kv)
        return mx.zeros((1, S, self.V)) + mx.eye(self.V)[(offset + S) % self.V]
