"""mlx-lm's two extension points, ``sampler=`` and ``logits_processors=``, on fs's numpy logits.

Why: mlx-lm users bend generation with their own callables (ban a token, a custom sampler) instead of waiting for a
keyword; fs takes the same two hooks with the same order and meaning, on numpy arrays instead of ``mx.array``.

Contract, per chosen token (``Generator.sample``; every path that samples goes through it: ``generate``,
``stream_generate``, ``generate_batch``, speculative verification and the ``Engine``):

    logits [V] float32 -> OpenAI's penalties / logit_bias -> each processor(tokens [T] int64, logits) -> logits [V]
      -> repetition_penalty -> the constraint's mask -> sampler(logprobs [V] float32) -> token id   (int in [0, V))

``tokens`` is the prompt and every token chosen so far (mlx-lm passes the same). Without a ``sampler`` fs's own
temperature / top-k / top-p / min-p draw runs; with one, those keywords must stay at their defaults (mlx-lm's
sampler replaces them too). A processor must return V finite-or-minus-infinity floats; a sampler a token the
constraint allows. Either breaking that is a ``GenerateError`` naming the hook.

What a user callable can break: fs's *equal* contracts (engine == generate, batch == solo, speculation == plain)
hold only for callables that are pure functions of their arguments. One that keeps state between calls, or reads
anything else, sees speculation's verify rows and the engine's interleaving as extra calls. A seeded sampler's
randomness is the caller's: ``seed=`` seeds only fs's own draw.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import GenerateError

Sampler = Callable[[np.ndarray], Any]  # log-probabilities [V] -> a token id
LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (tokens [T], logits [V]) -> logits [V]


class UserHooks:
    def __init__(self, sampler: Sampler | None, processors: Sequence[LogitsProcessor], vocab_size: int):
        self.sampler, self.processors, self.V = sampler, tuple(processors), vocab_size

    @classmethod
    def make(cls, sampler: Any, processors: Any, vocab_size: int, own_sampling: bool) -> "UserHooks | None":
        """None when neither hook is given; checks both (a GenerateError) before any forward pass."""
        if sampler is None and not processors:
            return None
        if sampler is not None and not callable(sampler):
            raise GenerateError(f"sampler must be a callable (logprobs [V] -> token id), got {type(sampler).__name__}")
        if sampler is not None and own_sampling:
            raise GenerateError(
                "sampler= replaces temperature / top_k / top_p / min_p (as in mlx-lm); pass one or the other"
            )
        if processors is None:
            processors = ()
        if callable(processors) or not isinstance(processors, (list, tuple)):
            raise GenerateError("logits_processors must be a list of callables (tokens, logits) -> logits")
        for i, p in enumerate(processors):
            if not callable(p):
                raise GenerateError(f"logits_processors[{i}] is a {type(p).__name__}, not a callable")
        return cls(sampler, processors, vocab_size)

    def process(self, tokens: Sequence[int], logits: np.ndarray) -> np.ndarray:
        history = np.asarray(tokens, dtype=np.int64)
        for i, proc in enumerate(self.processors):
            out = proc(history, logits)
            try:
                out = np.asarray(out, dtype=np.float32)
            except (TypeError, ValueError):
                raise GenerateError(f"logits_processors[{i}] returned {type(out).__name__}, not an array") from None
            if out.shape != (self.V,) or np.isnan(out).any() or np.isposinf(out).any():
                raise GenerateError(
                    f"logits_processors[{i}] returned {out.dtype} {out.shape}; expected [{self.V}] floats, none NaN "
                    "or +inf"
                )
            logits = out
        return logits

    def sample(self, logits: np.ndarray) -> int:
        """The sampler's token from the log-probabilities of ``logits`` (a masked entry: -inf)."""
        assert self.sampler is not None
        z = logits.astype(np.float64)
        m = z.max()
        if not np.isfinite(m):
            raise GenerateError("every token's logit is -inf after the logits processors and the constraint")
        logprobs = (z - m - np.log(np.exp(z - m).sum())).astype(np.float32)
        token = self.sampler(logprobs)
        token = int(np.asarray(token).reshape(-1)[0]) if np.size(token) == 1 else token
        if type(token) is not int or not 0 <= token < self.V:
            raise GenerateError(f"the sampler returned {token!r}; expected a token id in [0, {self.V})")
        if not np.isfinite(logprobs[token]):
            raise GenerateError(f"the sampler chose token {token}, which the constraint or a processor ruled out")
        return token
