"""Lossless speculative decoding: draft k tokens (from the context, or a draft model), verify them in one pass.

Why: a decode step reads every weight to produce one token; scoring the pending token and k guesses after it in
one pass reads them once for up to k + 1 tokens. Where the model is batch invariant (``model.batch_invariant``:
a row's logits do not depend on how many tokens share its call) the pass's logits at each position are the bits a
one-token decode step would have produced there, so choosing from them in order - the same sampler, the same
generator, one draw per emitted token - emits exactly the plain run's tokens, greedy or seeded. A model that is not
batch invariant is refused (verifying would move its bits: the bug mlx-lm's and vLLM's users report).

Drafts come from a ``Drafter``: ``prompt_lookup`` (here: the tokens that followed the latest earlier occurrence of
the context's last n tokens, n = 3, then 2, then 1; none when nothing matches, a plain one-token step) or a
``DraftModel`` (draft_model.py: a smaller model's greedy continuation). What a drafter proposes never changes the
output, only how many tokens one pass confirms.

    pass   = [pending, d1 … dk]  at the cache's end           logits L [k + 1, V]
    choose t_i from L[i] for i = 0, 1, …: emit it; if i < k and t_i == d_{i+1} go on, else stop
    cache  = trimmed back to the emitted tokens (the first one that was not a draft stays pending, unfed)

A pass holds at most ``exact_rows(caches, kv_bits)`` rows: as many as read the same K/V, in the same form, as
one-token steps would - a rotating cache (``max_kv_size``) until its window would cut the pass, a dense cache that
``kv_bits`` quantizes at ``start`` positions until then; past those points a pass has one row, a plain step.

Every stop rule is the caller's, applied to each emitted token as in plain decoding (``Generator.take``); the
caller calls ``settle()`` when it stops, so the caches end holding exactly what a plain run's would.
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from fs_kvcache import DenseKVCache, RotatingKVCache, to_numpy
from fs_model import CausalLM

from .errors import GenerateError
from .kv_bits import KVBits
from .sampling import logprob
from .step import prefill, tokens_for

NGRAMS = (3, 2, 1)  # n-gram sizes tried, longest first
MAX_DRAFT = 16  # a pass of 17 rows: past that a rejected guess costs more than a decode step saves


class Drafter(Protocol):
    def __call__(self, seq: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` guesses at the tokens after ``seq`` (the context, ending with the pending token)."""
        ...


def check(model: CausalLM, k: int, name: str = "prompt_lookup_num_tokens", low: int = 0) -> None:
    """Refuse what speculation cannot keep lossless or a nonsensical k, by name."""
    if type(k) is not int or not low <= k <= MAX_DRAFT:
        raise GenerateError(f"{name} must be an int in [{low}, {MAX_DRAFT}], got {k!r}")
    if k and not getattr(model, "batch_invariant", False):
        raise GenerateError(
            f"{name} needs a batch-invariant model (bf16 / int8 / int4 weights on the CPU kernels, "
            "the default for kept weights): on this one verifying drafts in one pass would change the output"
        )


def exact_rows(caches: Sequence[Any], kv_bits: KVBits | None) -> int:
    """The most rows the next pass over ``caches`` may hold with each row reading what a one-token step would: a
    rotating cache's window must not cut the pass (it has then dropped nothing: a dense cache, the same kernels);
    a dense cache that ``kv_bits`` will quantize must reach ``start`` positions at the pass's end at most (a plain
    run's rows from ``start`` on read codes). At least 1: a plain step."""
    c = caches[0]
    if isinstance(c, RotatingKVCache):
        return max(1, c.max_size - c.n)
    if kv_bits is not None and type(c) is DenseKVCache:
        return max(1, kv_bits.start - c.offset)
    return MAX_DRAFT + 1


def lookup(seq: Sequence[int], k: int) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of ``seq``'s last n tokens (NGRAMS)."""
    arr = np.asarray(seq, dtype=np.int64)
    for n in NGRAMS:
        if len(arr) <= n:
            continue
        tail = arr[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # every n-gram that has a successor
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return arr[start : start + k].tolist()
    return []


def prompt_lookup(seq: Sequence[int], k: int) -> list[int]:
    """The prompt-lookup ``Drafter`` (``lookup`` looked up at each call, so a test can put an oracle in its place)."""
    return lookup(seq, k)


class Speculation:
    """``tokens()`` yields ``(token, logprob, from_draft)`` after ``prompt_ids`` are prefilled at ``offset``; the
    caller applies its rules between tokens. Drafts are made from ``context()``, read after each emitted token, at
    most ``min(k, room())`` of them (``room``: tokens the request may still emit after the next one); ``kv_bits``
    quantizes the caches when a plain run's would be (after the prompt's passes, and after each pass's trim)."""

    def __init__(
        self,
        model: CausalLM,
        prompt_ids: Sequence[int],
        caches: Sequence[Any],
        sample: Callable[[np.ndarray], int],
        context: Callable[[], Sequence[int]],
        k: int,
        offset: int = 0,
        draft: Drafter = prompt_lookup,
        room: Callable[[], int] = lambda: MAX_DRAFT,
        kv_bits: KVBits | None = None,
    ):
        self.model, self.prompt, self.caches, self.sample = model, list(prompt_ids), caches, sample
        self.context, self.draft, self.room, self.kv_bits = context, draft, room, kv_bits
        self.k, self.offset = k, offset
        self.budget = k  # drafts asked for in the next pass (1..k: shrinks while guesses fail)
        self.excess = 0  # cache positions past the emitted tokens (drafts fed but not emitted yet)
        self.passes = self.drafted = self.accepted = 0

    def tokens(self) -> Iterator[tuple[int, float, bool]]:
        logits, self.passes = prefill(self.model, self.prompt, self.caches, self.offset, after_pass=self.kv_bits)
        at = self.offset + len(self.prompt)
        token = self.sample(logits)
        yield token, logprob(logits, token), False
        while True:
            k = min(self.budget, self.room(), exact_rows(self.caches, self.kv_bits) - 1)
            drafts = self.draft(self.context(), k) if k > 0 else []
            feed = [token, *drafts]
            out = self.model(tokens_for(self.model, [feed]), at, self.caches, logits_to_keep=len(feed))
            L = np.asarray(to_numpy(out[0]), dtype=np.float32)  # [len(feed), V]
            at += len(feed)
            self.passes, self.drafted = self.passes + 1, self.drafted + len(drafts)
            for i in range(len(feed)):
                self.excess = len(feed) - 1 - i  # fed beyond the token chosen now (its own position is unfed)
                token = self.sample(L[i])
                hit = i < len(drafts) and token == drafts[i]
                self.accepted += hit
                yield token, logprob(L[i], token), hit
                if not hit:
                    break
            at -= self.excess
            if drafts:  # Hugging Face's schedule: 2 more after a pass that confirmed every draft, 1 fewer otherwise
                confirmed = len(feed) - 1 - self.excess == len(drafts)
                self.budget = min(self.k, self.budget + 2) if confirmed else max(1, self.budget - 1)
            self.settle()
            if self.kv_bits is not None:  # after the trim: quantize when a plain run's caches would be
                self.kv_bits(self.model, self.caches)

    def settle(self) -> None:
        """Trim the drafts fed past the last emitted token (a stop inside an accepted run, or a rejection)."""
        if self.excess:
            for c in self.caches:
                c.trim(self.excess)
            self.excess = 0
