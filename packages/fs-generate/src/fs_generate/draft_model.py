"""A draft model for speculative decoding: a smaller model's greedy guesses, with its own KV cache.

Why a second model: prompt lookup only guesses where the text repeats its context; a small model of the same family
(Qwen3-0.6B for a 4B, or the target's own weights at int4 for a bf16 target) guesses ordinary text too, and one
draft token costs a fraction of a target step. The draft's bits never reach the output - the target verifies every
guess (speculative.py) - so the draft may run on any backend and format, batch invariant or not.

    draft = DraftModel(small, target)          # same vocabulary size, or GenerateError
    draft(seq, k)                              # k greedy tokens after seq; its cache follows seq
    # its cache holds seq[:-1] + the first k-1 guesses; the next call keeps what the new seq still shares and
    # feeds the rest: after j accepted guesses that is the j-th guess onwards (at least the new pending token)

Greedy, not the request's sampler: the request's generator draws exactly once per emitted token (the target's
choice); a draft that drew from it would shift every later draw and change a seeded output.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from fs_model import CausalLM

from .errors import GenerateError
from .step import last_logits, prefill, tokens_for


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    return int(np.flatnonzero(x != y)[0])


class DraftModel:
    def __init__(self, model: CausalLM, target: CausalLM):
        if model.vocab_size != target.vocab_size:
            raise GenerateError(
                f"the draft model's vocabulary has {model.vocab_size} ids, the target's {target.vocab_size}: "
                "a draft must share the target's tokenizer (the same model family)"
            )
        self.model = model
        self.caches: list[Any] | None = None  # made at the first call (a request that never decodes costs none)
        self.fed: list[int] = []  # the tokens whose K/V the caches hold, in order
        self.passes = 0  # the draft model's forward passes (its cost, for the stats line and benchmarks)

    def __call__(self, seq: Sequence[int], k: int) -> list[int]:
        k = min(k, self.model.config.max_position_embeddings + 1 - len(seq))  # its last guess is not fed
        if k <= 0 or not seq:
            return []
        if self.caches is None:
            self.caches = self.model.make_cache()
        keep = min(shared_prefix(self.fed, seq), len(seq) - 1)  # the last token is always fed: its logits
        if len(self.fed) > keep:
            for c in self.caches:
                c.trim(len(self.fed) - keep)
        logits, passes = prefill(self.model, seq[keep:], self.caches, keep)
        self.passes += passes
        at, drafts = len(seq), [int(np.argmax(logits))]
        while len(drafts) < k:
            out = self.model(tokens_for(self.model, [[drafts[-1]]]), at, self.caches, logits_to_keep=1)
            drafts.append(int(np.argmax(last_logits(out)[0])))
            at, self.passes = at + 1, self.passes + 1
        self.fed = [*seq, *drafts[:-1]]
        return drafts

    def reset(self) -> None:
        """Forget the cache (a new conversation, or to free its memory)."""
        self.caches, self.fed = None, []
