"""An ``Engine`` over several ranks of an ``mx.distributed`` group, every rank running the same steps.

With a tensor-parallel model (``load_model(..., tensor_group=g)``) every forward pass is a collective: each rank
must call it with the same batch, in the same order. The scheduler is deterministic - its decisions follow from
what was submitted and cancelled before each step, and from the logits, which are the same bits on every rank -
so the ranks stay in step if they see the same submissions and cancellations at the same step. Rank 0 (the
leader) owns the requests: at every step it broadcasts what arrived since the last one (each new request's
prompt ids and sampling arguments, each cancelled request's id) as JSON, and then all ranks take that step. The
others (followers) have no callers; ``follow()`` rebuilds each request from the broadcast and steps until the
leader says stop. Their K/V pools are the same size (the smallest default over the group, unless given). The
leader steps while idle too (``Engine``'s loop polls every 50 ms), which is the heartbeat.

A rank that dies leaves the others blocked in a collective. ``Watchdog`` bounds that: when no step completes
within ``timeout`` seconds, it prints which rank is stuck and exits the process (status 3), so a launcher sees the
failure instead of a hang.
"""

import json
import logging
import os
import sys
import threading
import time
from typing import Any

import numpy as np

from .engine import Engine
from .errors import GenerateError
from .generate import Generator
from .kv_budget import default_kv_budget
from .request import FINISHED, Request

log = logging.getLogger(__name__)
WATCHDOG_EXIT = 3


def broadcast(data: bytes, group: Any) -> bytes:
    """Rank 0's ``data`` on every rank (others pass b""): its length, then its bytes, each as one all-sum in
    which the other ranks add zeros."""
    import mlx.core as mx

    lead = group.rank() == 0
    n = mx.distributed.all_sum(mx.array([len(data) if lead else 0], dtype=mx.int32), group=group)
    size = int(np.array(n)[0])
    if size == 0:
        return b""
    mine = np.frombuffer(data, np.uint8).astype(np.int32) if lead else np.zeros(size, np.int32)
    out = mx.distributed.all_sum(mx.array(mine), group=group)
    return np.array(out).astype(np.uint8).tobytes()


class Watchdog:
    """Exits the process when ``beat()`` has not been called for ``timeout`` seconds."""

    def __init__(self, timeout: float, rank: int):
        self.timeout, self.rank, self.last = timeout, rank, time.monotonic()
        threading.Thread(target=self._watch, name="fs-lockstep-watchdog", daemon=True).start()

    def beat(self) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            if time.monotonic() - self.last > self.timeout:
                print(
                    f"fs: rank {self.rank}: no engine step completed in {self.timeout:.0f} s - another rank has "
                    "died or is stuck; exiting",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(WATCHDOG_EXIT)


def agreed_kv_budget(model: Any, group: Any, max_batch: int, block_size: int, kv_format: tuple[int, ...] = ()) -> int:
    """The default K/V pool every rank can hold: each rank's own default (``default_kv_budget``), the smallest
    over the group - the ranks must allocate the same pool, or memory pressure would preempt differently."""
    import mlx.core as mx

    token_bytes = model.kv_block_bytes(block_size, *kv_format) // block_size
    mine, _ = default_kv_budget(token_bytes, model.config.max_position_embeddings, max_batch)
    every = mx.distributed.all_gather(mx.array([mine >> 20], dtype=mx.int32), group=group)
    return int(np.array(every).min()) << 20


class LockstepEngine(Engine):
    def __init__(self, model: Any, tokenizer: Any, *, group: Any, watchdog_s: float = 30.0, **kw: Any):
        if kw.get("kv_budget_bytes") is None:
            fmt = (kw["kv_bits"], kw.get("kv_group_size", 64)) if kw.get("kv_bits") is not None else ()
            kw["kv_budget_bytes"] = agreed_kv_budget(
                model, group, kw.get("max_batch", 16), kw.get("block_size", 16), fmt
            )
        super().__init__(model, tokenizer, **kw)
        self.group, self.rank = group, group.rank()
        self.watchdog = Watchdog(watchdog_s, self.rank)
        self._stopped = False

    def submit(self, prompt: Any, **kw: Any) -> Any:
        if self.rank != 0:
            raise GenerateError("only rank 0 takes requests; the other ranks follow()")
        if kw.get("sampler") is not None or kw.get("logits_processors"):
            raise GenerateError("sampler= and logits_processors= cannot reach the other ranks (a callable is not data)")
        return super().submit(prompt, **kw)

    def between_steps(self, work: Any) -> Any:
        raise GenerateError(
            "scoring a prompt (echo, perplexity) and embeddings are not available under tensor parallelism yet: "
            "every rank would have to run them in lockstep; serve the model on one process for them"
        )

    def step(self) -> bool:
        """Rank 0: broadcast what arrived, then take the step everyone takes."""
        with self._step_lock:
            if self._stopped:
                return False
            with self._lock:
                incoming, cancels, self._incoming, self._cancels = self._incoming, self._cancels, [], []
            news = {
                "submit": [[r.id, r.gen.prompt, r.spec] for r in incoming],
                "cancel": [r.id for r in cancels],
            }
            broadcast(json.dumps(news).encode(), self.group)
            busy = self._advance(incoming, cancels)
            self.watchdog.beat()
            return busy

    def stop(self) -> None:
        """Stop the loop, then tell the followers to return from ``follow()``."""
        super().stop()
        with self._step_lock:
            if not self._stopped and self.rank == 0:
                broadcast(json.dumps({"stop": True}).encode(), self.group)
            self._stopped = True

    def follow(self) -> None:
        """A follower's whole life: take each step the leader broadcasts, until it says stop."""
        if self.rank == 0:
            raise GenerateError("rank 0 leads (submit / start); follow() is for the other ranks")
        known: dict[int, Request] = {}
        while True:
            news = json.loads(broadcast(b"", self.group))
            if news.get("stop"):
                return
            incoming = []
            for rid, prompt, spec in news["submit"]:
                req = self._request(rid, Generator(self.model, self.tokenizer, prompt, **spec))
                req.spec = spec
                req.gen.start()
                known[rid] = req
                incoming.append(req)
            cancels = [known[rid] for rid in news["cancel"] if rid in known]
            self._advance(incoming, cancels)
            self.watchdog.beat()
            for rid in [rid for rid, r in known.items() if r.state == FINISHED]:
                del known[rid]
