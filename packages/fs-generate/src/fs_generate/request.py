"""One request inside the engine (``Request``) and the caller's side of it (``RequestHandle``).

A request's tokens are ``gen.seq``: its prompt, then every token it has generated. Its block table holds K/V for
the first ``table.length`` of them. Each step feeds some of the rest; when the table catches up with the sequence,
the step's logits choose the next token through the same ``Generator`` rules ``generate`` uses (sampling with the
request's own seeded generator, EOS set, stop strings, budget) - which is why the engine's output for a request is
``generate``'s output for it, token for token.

States: waiting (no blocks) -> running (a table) -> finished; a preempted request goes back to waiting with its
blocks freed and its tokens kept, and recomputes their K/V when it runs again (its sampler state is untouched, so
the next token it draws is the one it would have drawn).
"""

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .errors import GenerateError
from .generate import Generator
from .outputs import Generation, GenerationStep

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"
log = logging.getLogger("fs_generate.engine")


class Request:
    def __init__(self, rid: int, gen: Generator, handle: "RequestHandle"):
        self.id, self.gen, self.handle = rid, gen, handle
        self.state = WAITING
        self.table: Any = None  # fs_kvcache.BlockTable while running
        self.cancelled = False
        self.admitted = False  # it ran once (a preempted request's cached-token report is its first admission's)
        self.forward_passes = 0
        self.published = 0  # full blocks of its table already offered to the prefix cache
        self.block_keys: list[bytes] = []  # the prefix cache's key of each full block of its tokens (they persist)
        self.submitted = time.perf_counter()
        self.drafts: list[int] = []  # speculative decoding: guesses after its pending token, for the next step
        self.spec: dict[str, Any] = {}  # the keyword arguments it was submitted with (a lockstep follower rebuilds it)

    @property
    def remaining(self) -> int:
        """Tokens of the sequence whose K/V are not in the table yet (1 while decoding)."""
        return len(self.gen.seq) - (self.table.length if self.table is not None else 0)


class RequestHandle:
    """What ``Engine.submit`` returns. Thread-safe: the engine's thread fills it, any thread reads it."""

    def __init__(self, step_engine: Callable[[], bool], background: Callable[[], bool], cancel: Callable[[], None]):
        self._step_engine, self._background, self._cancel = step_engine, background, cancel
        self._cond = threading.Condition()
        self._steps: list[GenerationStep] = []
        self._result: Generation | None = None
        self._error: GenerateError | None = None
        self._watchers: list[Callable[[], None]] = []

    # --- filled by the engine -------------------------------------------------------------------------------

    def _push(self, step: GenerationStep) -> None:
        with self._cond:
            self._steps.append(step)
            self._cond.notify_all()
            watchers = list(self._watchers)
        self._notify(watchers)

    def _finish(self, result: Generation | None, error: str | GenerateError | None = None) -> None:
        """``error``: why the request failed; a ``GenerateError`` keeps its class (a ``ConstraintError`` is the
        request's fault, anything else the server's)."""
        with self._cond:
            self._result = result
            self._error = GenerateError(error) if isinstance(error, str) else error
            self._cond.notify_all()
            watchers = list(self._watchers)
        self._notify(watchers)

    @staticmethod
    def _notify(watchers: list[Callable[[], None]]) -> None:
        for fn in watchers:
            try:
                fn()
            except Exception:  # a subscriber's bug must not fail the engine's step for every request
                log.exception("a request subscriber raised")

    # --- the caller's side ----------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._result is not None or self._error is not None

    def cancel(self) -> None:
        """Stop this request at the next step and free its blocks; idempotent, harmless once finished."""
        if not self.done:
            self._cancel()

    def _wait(self, ready: Callable[[], bool], deadline: float | None) -> None:
        """Until ``ready()``: wait on the engine's thread, or step the engine here when none runs."""
        while True:
            with self._cond:
                if ready() or self.done:
                    return
                if self._background():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError("the request did not finish in time")
                    self._cond.wait(0.5 if left is None else min(left, 0.5))  # notified; wakes to recheck the thread
                    continue
            if not self._step_engine() and not self.done and not ready():
                raise GenerateError("the engine went idle with this request unfinished")

    def result(self, timeout: float | None = None) -> Generation:
        """The finished ``Generation`` (``finish_reason == "cancelled"`` after a cancel). Steps the engine when it is
        not running in a background thread; raises ``TimeoutError`` after ``timeout`` seconds otherwise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wait(lambda: False, deadline)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def subscribe(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` after each new step and once at the end, from the engine's thread (keep it short: an event
        loop's ``call_soon_threadsafe``). Called once at once when the request is already done."""
        with self._cond:
            self._watchers.append(fn)
            done = self.done
        if done:
            fn()

    def poll(self, start: int) -> tuple[list[GenerationStep], bool]:
        """Without waiting: the steps from index ``start`` on, and whether the request is finished (then
        ``result()`` returns at once, or raises its error)."""
        with self._cond:
            return self._steps[start:], self.done

    def _has(self, n: int) -> bool:
        return len(self._steps) > n

    def stream(self) -> Iterator[GenerationStep]:
        """Every step of this request from its first (however late this is called), as ``stream_generate``."""
        i = 0
        while True:
            self._wait(functools.partial(self._has, i), None)
            with self._cond:
                if i < len(self._steps):
                    step = self._steps[i]
                elif self._error is not None:
                    raise self._error
                else:
                    return
            i += 1
            yield step
