"""One request's rules around the decode step: sampling parameters, EOS, budget, context limit, stop strings.

``stream_generate`` yields a ``GenerationStep`` per token; ``generate`` collects them into a ``Generation``
(outputs.py); ``generate_batch`` (batch_generate.py) decodes several prompts with one forward pass per step. The
tokens themselves come from step.py's ``generate_step`` (one request) or from one batched call per step. The
uncached path (``use_cache=False``: recompute the growing prefix every step) is kept as the oracle.
"""

import dataclasses
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from fs_kvcache import DenseKVCache
from fs_model import CausalLM

from . import keywords, speculative
from .constraints import make_constraint
from .draft_model import DraftModel
from .errors import GenerateError
from .kv_bits import KVBits
from .outputs import Generation, GenerationStep
from .penalties import Penalties
from .reused_prefix import KVPrefix
from .sampling import SamplingParams, choose, logprob, penalized, top_logprobs
from .step import PREFILL_CHUNK, generate_step
from .stopping import StopStrings, resolve_eos
from .token_text import prompt_ids, text_decoder
from .user_hooks import UserHooks

ROTATING_KEEP = 4  # positions a rotating cache never drops (mlx-lm's: the attention sinks at the start)


class Generator:
    """One request's state and rules. ``steps()`` runs it alone; ``generate_batch`` drives several through
    ``start`` / ``accept`` with one forward pass per step for all of them."""

    def __init__(
        self,
        model: CausalLM,
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
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        logit_bias: Any = None,
        context_limit: int | None = None,
        use_cache: bool = True,
        prefix_cache: Any = None,
        json_schema: Any = None,
        regex: str | None = None,
        grammar: str | None = None,
        top_logprobs: int = 0,
        max_kv_size: int | None = None,
        kv_bits: int | None = None,
        kv_group_size: int = 64,
        quantized_kv_start: int = 0,
        prompt_lookup_num_tokens: int = 0,
        draft_model: Any = None,
        num_draft_tokens: int = 3,
        sampler: Any = None,
        logits_processors: Any = None,
    ):
        if type(max_new_tokens) is not int or max_new_tokens < 0:
            raise GenerateError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if type(top_logprobs) is not int or not 0 <= top_logprobs <= 20:
            raise GenerateError(f"top_logprobs must be an int in [0, 20], got {top_logprobs!r}")
        self.top_logprobs = top_logprobs
        self._tops: tuple[tuple[int, float], ...] = ()  # the last sample's likeliest tokens
        if seed is not None and (type(seed) is not int or seed < 0):
            raise GenerateError(f"seed must be a non-negative int (or None), got {seed!r}")
        self.model, self.tokenizer = model, tokenizer
        self.params = SamplingParams(temperature, top_k, top_p, min_p, repetition_penalty)
        self.penalties = Penalties.make(model.vocab_size, presence_penalty, frequency_penalty, logit_bias)
        own = (temperature, top_k, top_p, min_p) != (0.0, 0, 1.0, 0.0)
        self.hooks = UserHooks.make(sampler, logits_processors, model.vocab_size, own)  # user_hooks.py
        self.stops = StopStrings(stop)
        self.eos = resolve_eos(model, tokenizer, eos_token_ids)
        self.prompt = prompt_ids(model, tokenizer, prompt)
        # at most one of json_schema / regex / grammar: a mask over the vocabulary before every choice
        self.constraint = make_constraint(tokenizer, model.vocab_size, self.eos, json_schema, regex, grammar)
        limit = model.config.max_position_embeddings
        if context_limit is not None:
            if type(context_limit) is not int or context_limit < 1:
                raise GenerateError(f"context_limit must be a positive int, got {context_limit!r}")
            limit = min(limit, context_limit)
        if len(self.prompt) > limit:
            raise GenerateError(f"prompt is {len(self.prompt)} tokens, longer than the context limit of {limit}")
        if prefix_cache is not None and not use_cache:
            raise GenerateError("prefix_cache needs use_cache=True")
        if max_kv_size is not None:
            if type(max_kv_size) is not int or max_kv_size <= ROTATING_KEEP:
                raise GenerateError(f"max_kv_size must be an int > {ROTATING_KEEP}, got {max_kv_size!r}")
            if prefix_cache is not None or not use_cache:
                raise GenerateError("max_kv_size (a rotating cache) needs use_cache=True and no prefix_cache")
        self.max_kv_size = max_kv_size
        # mlx-lm's --kv-bits: dense caches become quantized once they hold quantized_kv_start positions
        self.kv_bits = KVBits(kv_bits, kv_group_size, quantized_kv_start) if kv_bits is not None else None
        if self.kv_bits is not None:
            self.kv_bits.check(model)
            if max_kv_size is not None or not use_cache or not isinstance(prefix_cache, (KVPrefix, type(None))):
                raise GenerateError(
                    "kv_bits (a quantized cache) needs use_cache=True, no max_kv_size and no prefix cache"
                    " (a prompt-cache file is fine)"
                )
        # speculative decoding (speculative.py): k drafts from the context or from a draft model, verified in one pass
        self.drafter, self.num_draft = self._drafter(prompt_lookup_num_tokens, draft_model, num_draft_tokens)
        if self.drafter is not None and not use_cache:
            raise GenerateError("speculative decoding needs use_cache=True")
        self.limit, self.max_new, self.use_cache, self.prefix_cache = limit, max_new_tokens, use_cache, prefix_cache
        self.rng = np.random.default_rng(seed)
        self.result = Generation([], "", "length", prompt_ids=list(self.prompt))
        self.seq = list(self.prompt)
        self.decoder = text_decoder(tokenizer)
        self.done = False
        self.reused = 0  # prompt tokens whose prefill a prefix cache saved
        self.caches: list[Any] | None = None  # the per-layer caches while and after ``steps()`` runs
        self._t0 = 0.0

    def _drafter(self, lookup: int, draft_model: Any, k: int) -> tuple[speculative.Drafter | None, int]:
        speculative.check(self.model, lookup)
        if draft_model is None:
            return (speculative.prompt_lookup, lookup) if lookup else (None, 0)
        if lookup:
            raise GenerateError("draft_model and prompt_lookup_num_tokens are two draft sources: choose one")
        speculative.check(self.model, k, "num_draft_tokens", low=1)
        return (draft_model if isinstance(draft_model, DraftModel) else DraftModel(draft_model, self.model)), k

    def room(self) -> int:
        """Tokens this request may still emit after the next one (drafts past that could never be used)."""
        return max(0, min(self.max_new - len(self.result.token_ids), self.limit - len(self.seq)) - 1)

    # --- the rules, one token at a time ---------------------------------------------------------------------

    def start(self) -> bool:
        """False when the request ends before any forward pass (zero budget, prompt already at the limit)."""
        if self.max_new == 0 or len(self.prompt) >= self.limit:
            self.result.finish_reason = "length" if self.max_new == 0 else "context"
            self.done = True
            return False
        return True

    def sample(self, logits: np.ndarray) -> int:
        """The next token from ``logits [V]`` under this request's sampling parameters, seed and constraint."""
        if self.top_logprobs:  # of the raw logits, as the chosen token's logprob
            self._tops = top_logprobs(logits, self.top_logprobs)
        logits = self.penalties.apply(logits, self.result.token_ids)  # OpenAI's bias and additive penalties
        hooks = self.hooks
        if hooks is not None:
            logits = hooks.process(self.seq, logits)
        if hooks is not None and hooks.sampler is not None:
            logits = penalized(logits, self.params, self.seq)
            return hooks.sample(self.constraint.mask(logits) if self.constraint is not None else logits)
        if self.constraint is not None:
            logits = self.constraint.mask(logits)
        return choose(logits, self.params, self.rng, self.seq)

    def accept(self, logits: np.ndarray) -> GenerationStep:
        """Choose the next token from ``logits [V]`` and apply every stop rule; sets ``done`` at the end."""
        token = self.sample(logits)
        return self._with_tops(self.take(token, logprob(logits, token)))

    def _with_tops(self, step: GenerationStep) -> GenerationStep:
        return dataclasses.replace(step, top_logprobs=self._tops) if self.top_logprobs else step

    def take(self, token: int, lp: float) -> GenerationStep:
        """Apply every stop rule to the chosen ``token``; sets ``done`` at the end."""
        r = self.result
        if token in self.eos:
            r.finish_reason, r.eos_token_id = "eos", token
            return self._finish(GenerationStep(token, "", lp, "eos"))
        c = self.constraint
        if c is not None:
            if token in c.ends:  # the grammar's end with EOS switched off: complete output, nothing appended
                r.finish_reason = "stop"
                return self._finish(GenerationStep(token, "", lp, "stop"))
            c.accept(token)
        r.token_ids.append(token)
        r.logprobs.append(lp)
        self.seq.append(token)
        delta = self.decoder.push(token) if self.decoder is not None else ""
        before = len(r.text)
        r.text += delta
        cut = self.stops.find(r.text, before) if self.stops.stop else None
        if cut is not None:
            r.finish_reason = "stop"
            step = self._finish(GenerationStep(token, delta, lp, "stop"))
            r.text = r.text[:cut]
            return step
        if c is not None and c.stopped:  # the grammar admits nothing more
            r.finish_reason = "stop"
            return self._finish(GenerationStep(token, delta, lp, "stop"))
        if len(r.token_ids) >= self.max_new or len(self.seq) >= self.limit:
            r.finish_reason = "length" if len(r.token_ids) >= self.max_new else "context"
            return self._finish(GenerationStep(token, delta, lp, r.finish_reason))
        return GenerationStep(token, delta, lp)

    def _finish(self, step: GenerationStep) -> GenerationStep:
        tail = self.decoder.flush() if self.decoder is not None else ""
        self.result.text += tail
        self.result.generation_seconds = time.perf_counter() - self._t0
        self.done = True
        return GenerationStep(step.token_id, step.text + tail, step.logprob, step.finish_reason)

    # --- running one request --------------------------------------------------------------------------------

    def _caches(self) -> tuple[list[Any] | None, int]:
        """Fresh caches, or caches resuming the longest prefix the prefix cache holds; (caches, reused tokens)."""
        if not self.use_cache:
            return None, 0
        if self.max_kv_size is not None:  # mlx-lm's --max-kv-size: the first tokens, then a sliding window
            return self.model.make_cache("rotating", max_size=self.max_kv_size, keep=ROTATING_KEEP), 0  # type: ignore[call-arg]
        if self.prefix_cache is not None:
            n, state = self.prefix_cache.match(self.prompt[:-1])  # the last prompt token must be fed for logits
            if n:
                return [DenseKVCache(key_values=kv) for kv in state], n
        return self.model.make_cache(), 0

    def steps(self) -> Iterator[GenerationStep]:
        if not self.start():
            return
        t0 = time.perf_counter()
        caches, self.reused = self._caches()
        self.caches = caches  # kept: a chat continues the next turn from them
        self.result.cached_tokens = self.reused
        fed = len(self.prompt) - self.reused
        spec = None
        tokens: Iterator[tuple[int, float, bool]]
        if self.drafter is not None and caches is not None:
            spec = speculative.Speculation(
                self.model, self.prompt[self.reused :], caches, self.sample, lambda: self.seq, self.num_draft,
                self.reused, self.drafter, self.room, self.kv_bits,
            )  # fmt: skip
            tokens = spec.tokens()
        else:
            plain = generate_step(
                self.model, self.prompt[self.reused :], caches, self.sample, offset=self.reused, after_pass=self.kv_bits
            )
            tokens = ((t, lp, False) for t, lp in plain)
        try:
            for i, (token, lp, drafted) in enumerate(tokens):
                if i == 0:  # the prompt is in the caches now
                    self.result.prompt_seconds = time.perf_counter() - t0
                    self._t0 = time.perf_counter()
                    self.result.forward_passes = -(-fed // PREFILL_CHUNK) if caches is not None else 1
                    if self.prefix_cache is not None and caches is not None:
                        self.prefix_cache.insert(self.prompt, [c.key_values for c in caches])
                else:
                    self.result.forward_passes += 1
                if spec is not None:
                    self.result.forward_passes = spec.passes
                    self.result.drafted_tokens, self.result.accepted_tokens = spec.drafted, spec.accepted
                step = self._with_tops(self.take(token, lp))
                if drafted:
                    step = dataclasses.replace(step, from_draft=True)
                if self.done and spec is not None:
                    spec.settle()  # before the last step: a caller that stops reading there finds plain's caches
                yield step
                if self.done:
                    return
        finally:  # done, or the caller stopped early (a chat's Ctrl-C): no draft stays in the caches past the
            if spec is not None:  # emitted tokens, which then hold what a plain run's would
                spec.settle()


def stream_generate(
    model: CausalLM, tokenizer: Any, prompt: str | Sequence[int], **kw: Any
) -> Iterator[GenerationStep]:
    """Yield one step per generated token; the last step carries the finish reason. When an EOS ends generation
    the last step's ``token_id`` is that EOS (not part of ``Generation.token_ids``) and its text is only what the
    decoder flushed. Concatenated ``text`` deltas equal ``tokenizer.decode(token_ids)`` exactly. Keywords: as
    ``generate``'s."""
    yield from Generator(model, tokenizer, prompt, **keywords.resolve("stream_generate", kw)).steps()


def generate(model: CausalLM, tokenizer: Any, prompt: str | Sequence[int], **kw: Any) -> Generation:
    """The whole generation at once. Keywords: ``Generator``'s (``max_new_tokens`` required), and mlx-lm's
    ``max_tokens=`` / ``temp=`` for the same things (keywords.py)."""
    g = Generator(model, tokenizer, prompt, **keywords.resolve("generate", kw))
    for _ in g.steps():
        pass
    return g.result
