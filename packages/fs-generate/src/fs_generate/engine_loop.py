"""The engine's threads: one step at a time whoever runs it, an optional background thread that steps while there
is work, and work handed to that thread between two steps (``Engine.score`` / ``embed``: the model is never entered
from two threads, and an MLX model stays on its thread).

    engine.start()             # a daemon thread steps the engine; submit from any thread, result() waits on it
    engine.between_steps(fn)   # -> Future: fn() in the engine's thread before its next step (here, when no thread)
    engine.stop()              # after the current step; requests in flight stay queued
"""

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from .embedding import embed as embed_rows
from .scoring import Scored, check_rows
from .scoring import score as score_rows

log = logging.getLogger("fs_generate.engine")
T = TypeVar("T")


class EngineLoop:
    """The base of ``Engine``: it provides ``model``, ``step`` (one scheduler iteration, under ``_step_lock``, taking
    the work queued in ``_calls``) and ``_fail_all``."""

    model: Any

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards what other threads queue: requests, cancels, _calls
        self._step_lock = threading.Lock()  # one step at a time, whoever runs it
        self._calls: list[Callable[[], None]] = []  # work for the engine's thread between steps (score)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def step(self) -> bool:
        raise NotImplementedError

    def _fail_all(self, why: str) -> None:
        raise NotImplementedError

    def between_steps(self, work: Callable[[], T]) -> "Future[T]":
        """Run ``work`` in the engine's thread before its next step (here and now when no thread runs it)."""
        done: Future[T] = Future()

        def call() -> None:
            try:
                done.set_result(work())
            except Exception as e:  # delivered to the caller, never the engine's loop
                done.set_exception(e)

        if not self.running_in_background():
            with self._step_lock:
                call()
            return done
        with self._lock:
            self._calls.append(call)
        self._wake.set()
        return done

    def run_until_idle(self) -> None:
        while self.step():
            pass

    # --- a background thread --------------------------------------------------------------------------------

    def running_in_background(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Run the loop in a daemon thread; ``submit`` from any thread, ``result``/``stream`` wait on it."""
        if self.running_in_background():
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="fs-engine", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                busy = self.step()
            except Exception:  # a bug must not leave every waiting caller hanging
                log.exception("engine loop failed; failing the requests in flight")
                self._fail_all("the engine failed; see its log")
                busy = False
            if not busy:
                self._wake.wait(0.05)

    def stop(self) -> None:
        """Stop the background thread after its current step; requests in flight stay queued (``result`` steps
        them, or ``start`` again)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._thread = None

    def score(self, rows: Sequence[Sequence[int]], top_logprobs: int = 0) -> "Future[list[Scored]]":
        """``scoring.score`` on this engine's model, run by the engine's own thread between two steps (the model
        is never entered from two threads, and an MLX model stays on its thread). Rows are checked here."""
        ids: list[list[int]] = [list(r) for r in rows]
        check_rows(self.model, ids, top_logprobs)  # a bad row raises here, in the caller's thread
        return self.between_steps(lambda: score_rows(self.model, ids, top_logprobs))

    def embed(self, rows: Sequence[Sequence[int]], dimensions: int | None = None) -> "Future[np.ndarray]":
        """``embedding.embed`` on this engine's model, between two steps as ``score`` is."""
        ids: list[list[int]] = [list(r) for r in rows]
        return self.between_steps(lambda: embed_rows(self.model, ids, dimensions))
