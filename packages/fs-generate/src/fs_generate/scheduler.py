"""What runs in the next engine step: a decode token for every running sequence, prefill chunks with the rest.

Each step spends at most ``max_step_tokens`` tokens (vLLM's chunked prefill, nano-vllm's block manager):

1. Running sequences, oldest first: a decoding one takes 1 token, a partly prefilled one the next chunk of its
   prompt. A decode token may need a new block; when none is free (nor evictable from the prefix cache), the newest
   running sequence is preempted - its blocks freed, it goes back to the front of the queue to recompute later.
   A decoding sequence with drafts (speculative decoding) adds as many of them as the budget and the free blocks
   allow: a guess never preempts anyone, nor evicts the prefix cache.
2. Waiting requests, first come first served, while ``max_batch`` and the budget allow: the prefix cache lends the
   longest cached run of the prompt's full blocks, and the request is admitted when blocks for the rest of its
   prompt (not its whole ``max_new_tokens``) are free or evictable; its first chunk runs in this same step.

The head of the queue waits when it does not fit (no overtaking, so a long prompt cannot starve). A prompt that
could not fit even in an empty pool is refused with a clear error instead of waiting forever.
"""

from collections import deque
from typing import Any

from fs_kvcache import BlockPool, BlockTable

from .request import RUNNING, WAITING, Request

# Positions a sequence's table takes side by side in the pool when it grows (``BlockTable``'s run): one tile of
# fs-model's CPU attention (cpu/attention_calls.TILE), which reads adjacent blocks as one run. Decode rows that grow
# together otherwise interleave their blocks one by one: an int4 engine run of engine_serving's workload (Zen 5,
# 2026-12-07, two alternating pairs) took 35.9-36.5 ms a batch-8 decode pass with runs, 37.9-39.0 without.
RUN_POSITIONS = 64


class Scheduler:
    def __init__(self, pool: BlockPool, prefix: Any, copy: Any, max_batch: int, max_step_tokens: int):
        self.pool, self.prefix, self.copy = pool, prefix, copy
        self.max_batch, self.max_step_tokens = max_batch, max_step_tokens
        self.run = max(1, RUN_POSITIONS // pool.block_size)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the newest last
        self.preempted = 0
        self.cached_tokens = 0

    def schedule(self) -> tuple[list[tuple[Request, int]], list[tuple[Request, str]]]:
        """-> (this step's (request, tokens to feed) in order, requests refused with why)."""
        plan: list[tuple[Request, int]] = []
        budget = self.max_step_tokens
        for r in list(self.running):
            if budget == 0:
                break
            if r.state != RUNNING:  # preempted below, while making room for an older one
                continue
            n = min(r.remaining, budget)
            if not self._reserve(r, n, plan):
                continue
            n += self._drafts(r, budget - n)
            plan.append((r, n))
            budget -= n
        refused: list[tuple[Request, str]] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_batch:
            r = self.waiting[0]
            fits, why = self._admit(r)
            if why:
                self.waiting.popleft()
                refused.append((r, why))
                continue
            if not fits:
                break
            self.waiting.popleft()
            n = min(r.remaining, budget)
            plan.append((r, n))
            budget -= n
        return plan, refused

    def _reserve(self, r: Request, n: int, plan: list[tuple[Request, int]]) -> bool:
        """Blocks for ``r``'s next ``n`` tokens, preempting newer sequences for them; False if ``r`` itself went."""
        while r.table.needed(n) > r.table.available():
            victim = self.running[-1]
            self.preempt(victim)
            plan[:] = [(q, m) for q, m in plan if q is not victim]
            if victim is r:
                return False
        r.table.reserve(n, self.copy)
        return True

    def _drafts(self, r: Request, budget: int) -> int:
        """How many of a decoding ``r``'s drafts join its token (cut to ``budget`` and the free blocks; reserved)."""
        if r.remaining != 1:
            r.drafts = []
        d = min(len(r.drafts), budget)
        while d and r.table.needed(1 + d) > self.pool.free_blocks:
            d -= 1
        del r.drafts[d:]
        if d:
            r.table.reserve(1 + d, self.copy)
        return d

    def _admit(self, r: Request) -> tuple[bool, str]:
        """Start ``r`` if blocks for the rest of its prompt are available -> (admitted, why it never can be)."""
        seq = r.gen.seq
        held = self.prefix.lookup(seq[:-1]) if self.prefix is not None else []  # the last token is always fed
        table = BlockTable(self.pool, self.prefix, held, self.run)
        rest = len(seq) - table.length
        if table.needed(rest) > table.available():
            table.release()
            total = -(-len(seq) // self.pool.block_size)
            if total > self.pool.num_blocks:
                return False, (
                    f"the sequence needs {total} KV blocks of {self.pool.block_size} positions but the pool has "
                    f"{self.pool.num_blocks} (raise kv_budget_bytes)"
                )
            return False, ""
        table.reserve(rest, self.copy)
        r.table, r.state = table, RUNNING
        self.running.append(r)
        if not r.admitted:  # a preempted request's second admission recomputes; its report keeps the first
            self.cached_tokens += table.length
            r.gen.reused, r.admitted = table.length, True
        return True, ""

    def preempt(self, r: Request) -> None:
        """Free ``r``'s blocks and queue it first, to recompute its tokens' K/V when there is room."""
        self.running.remove(r)
        r.table.release()
        r.table, r.state, r.published = None, WAITING, 0
        self.waiting.appendleft(r)
        self.preempted += 1

    def remove(self, r: Request) -> None:
        """``r`` is finished or cancelled: out of every queue, its blocks back (the prefix cache keeps its own)."""
        if r in self.running:
            self.running.remove(r)
        if r in self.waiting:
            self.waiting.remove(r)
        if r.table is not None:
            r.table.release()
            r.table = None
