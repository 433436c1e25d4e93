"""``Engine``: many requests in flight over one model, joining and leaving at any step (continuous batching).

    engine = Engine(model, tokenizer, max_batch=16, max_step_tokens=512)
    h = engine.submit("Hello", max_new_tokens=32)       # thread-safe; returns at once
    h.result()                                         # steps the engine here, or waits for engine.start()'s thread

Each ``step()`` asks the scheduler (scheduler.py) which sequences feed how many tokens, packs them into one
``PagedBatch`` - decode tokens and prefill chunks side by side - and runs one ``model.forward_paged`` over the
model's block pool: K/V are written into each sequence's blocks and attention reads them there in place. Every
sequence whose K/V caught up with its tokens then chooses its next token by its own ``Generator`` rules.

Why the output equals ``generate``'s: a request's next token depends only on its own logits and its own seeded
sampler, and on the batch-invariant kernels (the default for kept-weight models) its logits are the same bits
whatever else is in the step, however its prompt was chunked, whether its prefix came from the cache, and after a
preemption's recompute. float32 weights run on BLAS, whose sums depend on the batch: there logits agree to float32
rounding, not bit for bit (docs/engine.md).

Speculative decoding inside the batch (engine_drafts.py): before scheduling, each decoding request that speculates
proposes up to k drafts; its run in the step is ``[pending, d1 … dj]`` with logits for all j + 1 positions,
verified in order by its own rules as ``generate`` verifies them, and its table is trimmed back to the emitted
tokens before any block is published to the prefix cache.
"""

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fs_kvcache import BlockPrefixCache, PagedBatch, identity_string

from .engine_drafts import EngineDrafts
from .engine_loop import EngineLoop
from .errors import ConstraintError, GenerateError
from .generate import Generator
from .kv_bits import KVBits
from .kv_budget import block_pool
from .request import FINISHED, Request, RequestHandle
from .scheduler import Scheduler

log = logging.getLogger(__name__)


class Engine(EngineLoop):
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch: int = 16,
        max_step_tokens: int = 512,
        kv_budget_bytes: int | None = None,
        block_size: int = 16,
        prefix_cache: bool = True,
        draft_model: Any = None,
        num_draft_tokens: int = 3,
        prompt_lookup_num_tokens: int = 0,
        kv_bits: int | None = None,
        kv_group_size: int = 64,
    ):
        for name, v in (("max_batch", max_batch), ("max_step_tokens", max_step_tokens), ("block_size", block_size)):
            if type(v) is not int or v < 1:
                raise GenerateError(f"{name} must be a positive int, got {v!r}")
        if not hasattr(model, "forward_paged"):
            raise GenerateError(
                f"the {getattr(model, 'backend', type(model).__name__)} backend has no paged forward pass; "
                "the engine runs on the numpy backend (load_model(..., backend='numpy'))"
            )
        self.model, self.tokenizer = model, tokenizer
        self.drafts = EngineDrafts(model, draft_model, num_draft_tokens, prompt_lookup_num_tokens)
        # kv_bits: the pool keeps K/V as affine codes from the first position, written before any pass reads them
        # (vLLM's --kv-cache-dtype and llama.cpp's -ctk do the same; mlx-lm's late conversion is generate()'s)
        self.kv_bits = KVBits(kv_bits, kv_group_size) if kv_bits is not None else None
        if self.kv_bits is not None:
            self.kv_bits.check(model)
        self.pool, self.store, self.kv_budget_note = block_pool(model, kv_budget_bytes, block_size, max_batch,
                                                                self.kv_bits)  # fmt: skip
        identity = identity_string(
            weights=getattr(model, "weights_digest", "") or getattr(model, "path", ""),
            kv_dtype=getattr(model, "kv_dtype", ""),
            block_size=block_size,
            kv_bits=f"{kv_bits}/{kv_group_size}" if kv_bits is not None else "",
        )
        self.prefix = BlockPrefixCache(self.pool, identity) if prefix_cache else None
        self.scheduler = Scheduler(self.pool, self.prefix, self.store.copy, max_batch, max_step_tokens)
        EngineLoop.__init__(self)
        self._incoming: list[Request] = []
        self._cancels: list[Request] = []
        self._ids = 0
        self.counters = dict(forward_passes=0, prefill_tokens=0, decode_tokens=0, finished=0, cancelled=0, failed=0,
                             drafted_tokens=0, accepted_tokens=0)  # fmt: skip

    # --- requests -------------------------------------------------------------------------------------------

    def submit(
        self,
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
        logit_bias: Mapping[int, float] | None = None,
        logprobs: bool = False,
        json_schema: Any = None,
        regex: str | None = None,
        grammar: str | None = None,
        top_logprobs: int = 0,
        prompt_lookup_num_tokens: int | None = None,
        sampler: Any = None,
        logits_processors: Any = None,
    ) -> RequestHandle:
        """Queue a request (checked here: a bad argument raises ``GenerateError`` in the caller's thread).
        ``logprobs``: accepted for the server's sake; every ``Generation`` carries its tokens' log-probabilities.
        ``prompt_lookup_num_tokens``: None is the engine's; a request's own k > 0 drafts from its context (in place
        of the engine's draft model, if it has one), 0 turns prompt lookup off for it. ``sampler`` /
        ``logits_processors``: mlx-lm's hooks (user_hooks.py), called on the engine's thread for this request."""
        lookup = self.drafts.lookup(prompt_lookup_num_tokens)
        spec = dict(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            seed=seed,
            stop=list(stop),
            eos_token_ids=list(eos_token_ids) if isinstance(eos_token_ids, Iterable) else eos_token_ids,
            repetition_penalty=repetition_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            logit_bias=logit_bias,
            json_schema=json_schema,
            regex=regex,
            grammar=grammar,
            top_logprobs=top_logprobs,
            prompt_lookup_num_tokens=lookup,
        )
        hooks = dict(sampler=sampler, logits_processors=logits_processors)  # callables: not in the JSON-safe spec
        gen = Generator(self.model, self.tokenizer, prompt, **spec, **hooks, **self.drafts.keywords(lookup))
        spec["logit_bias"] = gen.penalties.pairs()  # checked, and JSON-safe for a lockstep peer
        with self._lock:
            self._ids += 1
            rid = self._ids
        req = self._request(rid, gen)
        req.spec = spec
        if not gen.start():  # zero budget, or a prompt already at the context limit: done without a pass
            req.state = FINISHED
            req.handle._finish(gen.result)
            return req.handle
        with self._lock:
            self._incoming.append(req)
        self._wake.set()
        return req.handle

    def _request(self, rid: int, gen: Generator) -> Request:
        handle = RequestHandle(self.step, self.running_in_background, lambda: self._cancel(req))
        req = Request(rid, gen, handle)
        return req

    def _cancel(self, req: Request) -> None:
        with self._lock:
            self._cancels.append(req)
        self._wake.set()

    # --- the loop -------------------------------------------------------------------------------------------

    def step(self) -> bool:
        """One scheduler iteration: cancels, admission, one forward pass, each finished sequence's next token.
        Returns False when nothing is waiting or running."""
        with self._step_lock:
            with self._lock:
                incoming, cancels, self._incoming, self._cancels = self._incoming, self._cancels, [], []
                calls, self._calls = self._calls, []
            for call in calls:
                call()
            return self._advance(incoming, cancels) or bool(calls)

    def _advance(self, incoming: list[Request], cancels: list[Request]) -> bool:
        """``step`` after taking what arrived: admit ``incoming``, apply ``cancels``, schedule, run one pass."""
        self.scheduler.waiting.extend(incoming)
        for r in cancels:
            if r.state != FINISHED:
                r.gen.result.finish_reason = "cancelled"
                self._finish(r, cancelled=True)
        self.drafts.propose(self.scheduler.running, lambda r, why: self._finish(r, error=why))
        plan, refused = self.scheduler.schedule()
        for r, why in refused:
            self._finish(r, error=why)
        if not plan:
            return bool(self.scheduler.waiting or self.scheduler.running)
        self._run(plan)
        return True

    def _run(self, plan: list[tuple[Request, int]]) -> None:
        runs, keep = [], []
        for r, n in plan:
            d = max(0, n - r.remaining)  # drafts fed after its pending token
            start = r.table.length
            runs.append((r.table, [*r.gen.seq[start : start + n - d], *r.drafts[:d]]))
            keep.append(1 + d)
        try:
            logits = self.model.forward_paged(PagedBatch.pack(runs, keep), self.store)
        except Exception as e:  # a failing pass fails its requests, never the engine
            log.exception("engine step failed")
            for r, _ in plan:
                self._finish(r, error=f"the forward pass failed: {type(e).__name__}: {e}")
            return
        self.counters["forward_passes"] += 1
        now = time.perf_counter()
        row = 0
        for (r, n), k in zip(plan, keep, strict=True):
            rows, row = logits[row : row + k], row + k
            start = r.table.length
            prompt_fed = max(0, min(start + n, len(r.gen.prompt)) - start)
            self.counters["prefill_tokens"] += prompt_fed
            self.counters["decode_tokens"] += n - prompt_fed
            r.table.advance(n)
            r.forward_passes += 1
            if k == 1:
                self._publish(r)
                if r.remaining:  # more of its prompt (or recompute) to feed first
                    continue
            if not r.gen.result.token_ids and r.gen._t0 == 0.0:  # its first token: the prompt is in the blocks
                r.gen.result.prompt_seconds = now - r.submitted
                r.gen._t0 = now
            self._choose(r, rows, r.drafts[: k - 1])

    def _choose(self, r: Request, rows: np.ndarray, drafts: list[int]) -> None:
        """The next token from each row in turn by ``r``'s own rules, on while it confirms the draft fed after it;
        then its table is trimmed back to the emitted tokens (the last one pending) and published."""
        res = r.gen.result
        res.drafted_tokens += len(drafts)
        self.counters["drafted_tokens"] += len(drafts)
        for i, z in enumerate(rows):
            try:
                step = r.gen.accept(z)
            except ConstraintError as e:  # the request's own constraint gave out mid-way: its fault, its error
                self._finish(r, error=e)
                return
            except Exception as e:  # one request's rules failing (a decoder) fail only it
                self._finish(r, error=f"{type(e).__name__}: {e}")
                return
            hit = i < len(drafts) and step.token_id == drafts[i]
            if hit:
                step = dataclasses.replace(step, from_draft=True)
                res.accepted_tokens += 1
                self.counters["accepted_tokens"] += 1
            r.handle._push(step)
            if r.gen.done:
                self._finish(r)
                return
            if not hit:
                break
        if drafts:
            r.table.trim(r.table.length - (len(r.gen.seq) - 1))
            self._publish(r)
        r.drafts = []

    def _publish(self, r: Request) -> None:
        """Each block that just filled becomes findable at once (prompt or answer, vLLM's automatic prefix caching):
        a request arriving mid-prefill shares the blocks already done, a follow-up turn the whole conversation."""
        full = r.table.length // self.pool.block_size
        if self.prefix is not None and full > r.published:
            done = r.gen.seq[: r.table.length]
            self.prefix.publish(done, r.table.blocks, self.prefix.extend_keys(r.block_keys, done))
            r.published = full

    def _finish(self, r: Request, *, cancelled: bool = False, error: str | GenerateError | None = None) -> None:
        self.scheduler.remove(r)
        self.drafts.release(r)
        r.state = FINISHED
        res = r.gen.result
        res.cached_tokens, res.forward_passes = r.gen.reused, r.forward_passes
        if r.gen._t0:
            res.generation_seconds = time.perf_counter() - r.gen._t0
        self.counters["failed" if error else "cancelled" if cancelled else "finished"] += 1
        r.handle._finish(None if error else res, error)

    def _fail_all(self, why: str) -> None:
        with self._step_lock:
            for r in [*self.scheduler.running, *self.scheduler.waiting]:
                self._finish(r, error=why)

    # --- what it is doing -----------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        cached = self.prefix.cached_blocks if self.prefix is not None else 0
        with self._lock:
            incoming = len(self._incoming)
        return {
            **self.counters,
            "cached_tokens": self.scheduler.cached_tokens,
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting) + incoming,
            "preempted": self.scheduler.preempted,
            "kv_blocks_used": self.pool.num_blocks - self.pool.free_blocks - cached,
            "kv_blocks_cached": cached,
            "kv_blocks_total": self.pool.num_blocks,
            "block_size": self.pool.block_size,
            "kv_budget_bytes": self.store.nbytes,
            "kv_bits": self.kv_bits.bits if self.kv_bits is not None else None,
        }
