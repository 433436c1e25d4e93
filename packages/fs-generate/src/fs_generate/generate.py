"""The generation loop: prefill the prompt once, then one token per step from the KV cache.

``stream_generate`` yields a ``GenerationStep`` per token; ``generate`` collects them into a ``Generation``.
The uncached path (``use_cache=False``: recompute the growing prefix every step) is kept as the oracle.
"""

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import GenerateError
from .sampling import SamplingParams, choose, logprob
from .stopping import StopStrings, resolve_eos

PREFILL_CHUNK = 512


@dataclass(frozen=True)
class GenerationStep:
    token_id: int
    text: str  # the complete UTF-8 text this token made available (may be "")
    logprob: float
    finish_reason: str | None = None  # set on the last step: "eos" | "length" | "context" | "stop"


@dataclass
class Generation:
    token_ids: list[int]  # generated only; an EOS that ended generation is not included
    text: str
    finish_reason: str  # "eos" | "length" | "context" | "stop"
    prompt_ids: list[int] = field(default_factory=list)
    eos_token_id: int | None = None  # the EOS id that ended generation, reported separately
    logprobs: list[float] = field(default_factory=list)
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    forward_passes: int = 0

    @property
    def prompt_tps(self) -> float:
        return len(self.prompt_ids) / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def generation_tps(self) -> float:
        return len(self.token_ids) / self.generation_seconds if self.generation_seconds else 0.0


def prompt_ids(model: Any, tokenizer: Any, prompt: str | Sequence[int]) -> list[int]:
    if isinstance(prompt, str):
        ids = list(tokenizer.encode(prompt))
    elif isinstance(prompt, Iterable):
        ids = list(prompt)
        if not all(type(i) is int or isinstance(i, np.integer) for i in ids):
            raise GenerateError("a token-id prompt must contain only ints")
        ids = [int(i) for i in ids]
        V = model.vocab_size
        bad = [(pos, i) for pos, i in enumerate(ids) if not 0 <= i < V]
        if bad:
            raise GenerateError(f"prompt token id {bad[0][1]} at position {bad[0][0]} is out of range [0, {V})")
    else:
        raise GenerateError(f"prompt must be str or a list of token ids, got {type(prompt).__name__}")
    if not ids:
        raise GenerateError(
            "empty prompt: a decoder-only model needs at least one token to condition on "
            "(Qwen3 has no BOS; pass [<|endoftext|>] explicitly if that is what you want)"
        )
    return ids


class Generator:
    """One request's state; ``steps()`` runs it. Kept small so the batch path can reuse the same rules."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        prompt: str | Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        eos_token_ids: Iterable[int] | None = None,
        repetition_penalty: float | None = None,
        context_limit: int | None = None,
        use_cache: bool = True,
    ):
        if type(max_new_tokens) is not int or max_new_tokens < 0:
            raise GenerateError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        self.model, self.tokenizer = model, tokenizer
        self.params = SamplingParams(temperature, top_k, top_p, min_p, repetition_penalty)
        self.stops = StopStrings(stop)
        self.eos = resolve_eos(model, tokenizer, eos_token_ids)
        self.prompt = prompt_ids(model, tokenizer, prompt)
        limit = model.config.max_position_embeddings
        if context_limit is not None:
            if type(context_limit) is not int or context_limit < 1:
                raise GenerateError(f"context_limit must be a positive int, got {context_limit!r}")
            limit = min(limit, context_limit)
        if len(self.prompt) > limit:
            raise GenerateError(f"prompt is {len(self.prompt)} tokens, longer than the context limit of {limit}")
        self.limit, self.max_new, self.use_cache = limit, max_new_tokens, use_cache
        self.rng = np.random.default_rng(seed) if seed is not None else np.random.default_rng()
        self.result = Generation([], "", "length", prompt_ids=list(self.prompt))

    def _logits(self, feed: list[int], caches: list[Any] | None, offset: int) -> np.ndarray:
        self.result.forward_passes += 1
        out = self.model(self._tokens(feed), offset, caches, logits_to_keep=1)
        return np.asarray(_numpy(out)[0, -1], dtype=np.float32)

    def _tokens(self, ids: list[int]) -> Any:
        make = getattr(self.model, "tokens_array", None)
        return make(ids) if make is not None else np.asarray([ids], dtype=np.int64)

    def _prefill(self, caches: list[Any] | None) -> np.ndarray:
        if caches is None:
            return self._logits(self.prompt, None, 0)
        logits = None
        for start in range(0, len(self.prompt), PREFILL_CHUNK):
            logits = self._logits(self.prompt[start : start + PREFILL_CHUNK], caches, start)
        assert logits is not None
        return logits

    def steps(self) -> Iterator[GenerationStep]:
        r = self.result
        if self.max_new == 0:
            r.finish_reason = "length"
            return
        if len(self.prompt) >= self.limit:
            r.finish_reason = "context"
            return
        decoder = _decoder(self.tokenizer)
        caches = self.model.make_cache() if self.use_cache else None
        t0 = time.perf_counter()
        logits = self._prefill(caches)
        r.prompt_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        seq = list(self.prompt)
        while True:
            token = choose(logits, self.params, self.rng, seq)
            if token in self.eos:
                r.finish_reason, r.eos_token_id = "eos", token
                r.generation_seconds = time.perf_counter() - t0
                tail = decoder.flush() if decoder is not None else ""
                r.text += tail
                yield GenerationStep(token, tail, logprob(logits, token), "eos")
                return
            lp = logprob(logits, token)
            r.token_ids.append(token)
            r.logprobs.append(lp)
            seq.append(token)
            delta = decoder.push(token) if decoder is not None else ""
            before = len(r.text)
            r.text += delta
            finish = None
            cut = self.stops.find(r.text, before) if self.stops.stop else None
            if cut is not None:
                finish = "stop"
            elif len(r.token_ids) >= self.max_new:
                finish = "length"
            elif len(seq) >= self.limit:
                finish = "context"
            if finish is not None:
                tail = decoder.flush() if decoder is not None else ""
                r.text += tail
                r.finish_reason = finish
                r.generation_seconds = time.perf_counter() - t0
                if cut is not None:
                    yield GenerationStep(token, delta + tail, lp, finish)
                    r.text = r.text[:cut]
                    return
                yield GenerationStep(token, delta + tail, lp, finish)
                return
            yield GenerationStep(token, delta, lp)
            cached = caches is not None
            logits = self._logits([token], caches, len(seq) - 1) if cached else self._logits(seq, None, 0)


def stream_generate(model: Any, tokenizer: Any, prompt: str | Sequence[int], **kw: Any) -> Iterator[GenerationStep]:
    """Yield one step per generated token; the last step carries the finish reason. When an EOS ends generation
    the last step's ``token_id`` is that EOS (not part of ``Generation.token_ids``) and its text is only what the
    decoder flushed. Concatenated ``text`` deltas equal ``tokenizer.decode(token_ids)`` exactly."""
    yield from Generator(model, tokenizer, prompt, **kw).steps()


def generate(model: Any, tokenizer: Any, prompt: str | Sequence[int], *, max_new_tokens: int, **kw: Any) -> Generation:
    g = Generator(model, tokenizer, prompt, max_new_tokens=max_new_tokens, **kw)
    for _ in g.steps():
        pass
    return g.result


def _decoder(tokenizer: Any) -> Any:
    if tokenizer is None:
        return None
    try:  # fs_tokenizer: a model may emit ids past the tokenizer's vocabulary (padding rows) -> U+FFFD
        return tokenizer.stream_decoder(unknown="replace")
    except TypeError:
        return tokenizer.stream_decoder()


def _numpy(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    try:
        import mlx.core as mx

        if isinstance(x, mx.array):
            return np.array(x.astype(mx.float32))
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(x)
