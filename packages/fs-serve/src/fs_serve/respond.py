"""One request's life after validation: its choices submitted to the engine, their deltas streamed as SSE
chunks or collected into one response, the client's disconnect turned into a cancellation.

A job is ``Engine.submit``'s keyword arguments for one prompt (``sampling_job``); ``n`` choices of it are ``n``
engine requests, choice ``j`` seeded ``seed + j``. Both forms consume the same ``events()``: per choice, the delta
of its new steps, and its finish reason once it ends.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from fs_generate.stopping import resolve_eos

from .choices import ChoiceStream
from .errors import APIError, bad_request
from .protocol import Sampling
from .responses import Reply
from .runner import Runner

if TYPE_CHECKING:
    from .app import State


def sampling_job(req: Sampling, ids: list[int], state: "State", top_logprobs: int) -> dict[str, Any]:
    """``Engine.submit`` keyword arguments for one prompt. Unset sampling fields take the model's defaults
    (generation_config.json, as vLLM does), else OpenAI's; ``max_tokens`` is capped by the room the context has."""
    room = state.model.config.max_position_embeddings - len(ids)
    if room <= 0:
        ctx = state.model.config.max_position_embeddings
        raise bad_request(f"the prompt is {len(ids)} tokens; the model's context is {ctx}", "messages",
                          "context_length_exceeded")  # fmt: skip
    budget = req.budget()
    d = state.config.defaults
    top_k = req.top_k if req.top_k is not None else d.get("top_k", 0)
    return {
        "prompt": ids,
        "max_new_tokens": room if budget is None else min(budget, room),
        "temperature": req.temperature if req.temperature is not None else d.get("temperature", 1.0),
        "top_p": req.top_p if req.top_p is not None else d.get("top_p", 1.0),
        "top_k": max(0, top_k),
        "min_p": req.min_p if req.min_p is not None else d.get("min_p", 0.0),
        "repetition_penalty": req.repetition_penalty,
        "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty,
        "logit_bias": req.bias(),
        "seed": req.seed,
        "stop": req.stops(),
        "top_logprobs": top_logprobs,
        "eos_token_ids": [] if req.ignore_eos else None,
    }


async def respond(
    request: Request,
    state: "State",
    runner: Runner,
    req: Sampling,
    kind: str,
    jobs: list[dict[str, Any]],
    make: Callable[[int], ChoiceStream],
    logprobs: bool,
    constraint_field: str | None = None,
    preface: list[dict[str, Any]] | None = None,
) -> Response:
    """Submit every job's ``n`` choices, then stream their chunks or answer with the whole response. ``preface``:
    per job, a first delta every choice of it starts with (``echo``: the prompt and its logprobs)."""
    arrived = time.perf_counter()
    n = req.n
    expanded = []
    for job in jobs:
        for j in range(n):
            seed = job["seed"] + j if job["seed"] is not None and n > 1 else job["seed"]
            expanded.append(job | {"seed": seed})
    handles = runner.submit(expanded, constraint_field)
    eos = resolve_eos(state.model, state.tokenizer, None)
    reply = Reply(kind, state.config.model_id, state.tokenizer, logprobs)
    streams = [make(i) for i in range(len(handles))]
    endpoint_name = "chat" if kind == "chat" else "completions"

    async def events() -> AsyncIterator[tuple[int, dict[str, Any] | None, str | None]]:
        for i in range(len(handles)):
            if preface:
                yield i, preface[i // n], None
        async for i, steps, result in runner.follow(handles, arrived, constraint_field):
            delta = streams[i].feed(steps, eos) if steps else None
            if result is None:
                if delta:
                    yield i, delta, None
                continue
            last, finish = streams[i].finish(result)
            merged = _merge(delta, last)
            reply.finished(i // n, result)
            yield i, merged, finish

    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        async def sse() -> AsyncIterator[str]:
            offsets = [0] * len(handles)
            outcome = "cancelled"
            try:
                if kind == "chat":
                    for i in range(len(handles)):
                        yield reply.chunk(i, {"role": "assistant", "content": ""})
                async for i, delta, finish in events():
                    yield reply.chunk(i, delta or {}, finish, offsets[i])
                    offsets[i] += len((delta or {}).get("text", ""))
                if include_usage:
                    yield reply.usage_chunk()
                outcome = "ok"
            except APIError as e:
                outcome = "error"
                yield reply.sse(e.body())
            finally:
                state.metrics.requests.labels(endpoint_name, outcome).inc()
            yield "data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    per_choice: list[list[dict[str, Any]]] = [[] for _ in handles]
    finishes = ["stop"] * len(handles)

    async def collect() -> None:
        async for i, delta, finish in events():
            if delta:
                per_choice[i].append(delta)
            if finish:
                finishes[i] = finish

    gone = await collect_counted(request, state, endpoint_name, collect())
    return gone or JSONResponse(reply.whole(list(zip(per_choice, finishes, strict=True))))


async def collect_counted(request: Request, state: "State", endpoint_name: str, work: Any) -> Response | None:
    """Run ``work`` unless the client goes away first (then the 499 to answer); its outcome counted in /metrics."""
    outcome = "error"
    try:
        await until_disconnect(request, work)
        outcome = "ok"
    except _Disconnected:
        outcome = "cancelled"
        return Response(status_code=499)
    finally:
        state.metrics.requests.labels(endpoint_name, outcome).inc()
    return None


def _merge(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    if not a or not b:
        return a or b
    out = dict(a)
    for k, v in b.items():
        out[k] = out[k] + v if k in out else v
    return out


class _Disconnected(Exception):
    pass


async def until_disconnect(request: Request, work: Any) -> None:
    """Run ``work`` unless the client goes away first (then it is cancelled, which cancels its requests)."""

    async def gone() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if task not in done:
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task
        raise _Disconnected
    task.result()
