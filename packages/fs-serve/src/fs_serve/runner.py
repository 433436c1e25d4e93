"""The engine in its own thread, and the event loop's side of it.

The event loop never computes: it submits requests (``Engine.submit`` only checks and queues), then waits on an
``asyncio.Event`` that the engine's thread sets (``RequestHandle.subscribe`` -> ``call_soon_threadsafe``) each time
a request gets a token. Admission is bounded: at most ``max_batch + max_queue`` engine requests in flight (a chat
request with ``n`` choices is ``n`` of them); past that, 429 with ``Retry-After``. Whatever ends a follower early -
a client that disconnects (the task is cancelled), a server shutting down - cancels its requests, so the engine
stops decoding for nobody at its next step.
"""

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

from fs_generate import Engine, GenerateError, Generation, GenerationStep, RequestHandle
from fs_generate.errors import ConstraintError

from .errors import APIError, bad_request
from .metrics import Metrics


class Runner:
    def __init__(self, engine: Engine, max_queue: int, metrics: Metrics):
        self.engine, self.metrics = engine, metrics
        self.capacity = engine.scheduler.max_batch + max_queue
        self.in_flight = 0  # touched only on the event loop
        self.live: set[RequestHandle] = set()
        self._live_lock = threading.Lock()  # cancel_all may come from a signal handler's timer thread

    def submit(self, jobs: list[dict[str, Any]], constraint_field: str | None = None) -> list[RequestHandle]:
        """Queue every job (``Engine.submit`` keyword arguments) or none: a bad one is the request's 400 (a
        constraint that does not compile names ``constraint_field``, the request field it came from)."""
        if self.in_flight + len(jobs) > self.capacity:
            raise APIError(
                429,
                f"the server is at capacity ({self.capacity} requests in flight or queued); retry shortly",
                code="queue_full",
                headers={"Retry-After": "1"},
            )
        handles: list[RequestHandle] = []
        try:
            for kw in jobs:
                handles.append(self.engine.submit(**kw))
        except GenerateError as e:
            for h in handles:
                h.cancel()
            if isinstance(e, ConstraintError):
                raise constraint_refused(e, constraint_field) from None
            raise bad_request(str(e)) from None
        self.in_flight += len(handles)
        with self._live_lock:
            self.live.update(handles)
        return handles

    async def follow(
        self, handles: list[RequestHandle], arrived: float, constraint_field: str | None = None
    ) -> AsyncIterator[tuple[int, list[GenerationStep], Generation | None]]:
        """``(choice index, new steps, the Generation once finished)`` as tokens arrive; a request that failed in
        the engine raises ``APIError(500)``. Leaving early (break, cancellation) cancels what is unfinished."""
        loop, wake = asyncio.get_running_loop(), asyncio.Event()

        def notify() -> None:  # the engine's thread
            with suppress(RuntimeError):  # the loop closed (shutdown): nobody is listening
                loop.call_soon_threadsafe(wake.set)

        for h in handles:
            h.subscribe(notify)
        seen, finished, last = [0] * len(handles), [False] * len(handles), [0.0] * len(handles)
        try:
            while not all(finished):
                await wake.wait()
                wake.clear()
                for i, h in enumerate(handles):
                    if finished[i]:
                        continue
                    steps, done = h.poll(seen[i])
                    seen[i] += len(steps)
                    self._timing(i, steps, arrived, last)
                    result = None
                    if done:
                        finished[i] = True
                        try:
                            result = h.result()
                        except ConstraintError as e:  # the request's schema gave out mid-way: its fault, a 400
                            raise constraint_refused(e, constraint_field) from None
                        except GenerateError as e:
                            raise APIError(500, f"generation failed: {e}", code="generation_failed") from None
                        self._count(result)
                    if steps or done:
                        yield i, steps, result
        finally:
            with self._live_lock:
                self.live.difference_update(handles)
            for h in handles:
                h.cancel()
            self.in_flight -= len(handles)

    def _timing(self, i: int, steps: list[GenerationStep], arrived: float, last: list[float]) -> None:
        if not steps:
            return
        now = time.perf_counter()
        if last[i] == 0.0:
            self.metrics.ttft.observe(now - arrived)
            steps = steps[1:]
        elif steps:
            gap = (now - last[i]) / len(steps)
            for _ in steps:
                self.metrics.tpot.observe(gap)
        last[i] = now

    def _count(self, g: Generation) -> None:
        self.metrics.prompt_tokens.inc(len(g.prompt_ids))
        self.metrics.generation_tokens.inc(len(g.token_ids))
        self.metrics.cached_tokens.inc(g.cached_tokens)

    def cancel_all(self) -> None:
        """Stop everything in flight (any thread): each stream ends at once with what it has."""
        with self._live_lock:
            live = list(self.live)
        for h in live:
            h.cancel()


def constraint_refused(e: ConstraintError, field: str | None) -> APIError:
    """The 400 for a constraint the engine refused, naming the request field it came from."""
    field = field or e.kind
    return APIError(400, f"{field}: {e}", param=field, code="invalid_constraint")
