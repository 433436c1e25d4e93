"""The ASGI app: OpenAI's routes on Starlette, the engine behind them.

    app = create_app(lambda: load(None), ServeConfig(model_id="fs-demo"))   # uvicorn.run(app, ...)

The model loads in a thread once the app starts, so ``/health`` answers 503 ``{"status": "loading"}`` at once and
200 ``{"status": "ok"}`` when requests can be served. Every route but ``/health`` needs the API key when one is set
(``Authorization: Bearer KEY``, compared in constant time). Each request is: read the body (at most
``max_body_bytes``: 413), validate it (400 naming the field), render it (chat template, constraint), submit its
choices (429 when full), then stream or collect the choices' deltas. Anything unexpected is a 500 whose body says
to look at the log, never a traceback.
"""

import asyncio
import hmac
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fs_generate import Engine
from fs_generate.stopping import resolve_eos

from .choices import ChoiceStream
from .errors import APIError, bad_request
from .metrics import CONTENT_TYPE, Metrics
from .protocol import ChatRequest, CompletionRequest, Sampling, parse
from .render import render_chat
from .runner import Runner

log = logging.getLogger("fs_serve")


@dataclass
class ServeConfig:
    model_id: str = "fs-demo"  # the one id /v1/models lists and requests must name (or omit)
    max_batch: int = 16
    max_queue: int = 64  # engine requests waiting beyond max_batch before 429
    max_step_tokens: int = 512
    kv_budget_bytes: int | None = None
    api_key: str | None = None
    max_body_bytes: int = 4 << 20
    defaults: dict[str, Any] = field(default_factory=dict)  # sampling defaults (generation_config.json)


class State:
    def __init__(self, config: ServeConfig):
        self.config = config
        self.status, self.error = "loading", ""
        self.model: Any = None
        self.tokenizer: Any = None
        self.engine: Engine | None = None
        self.runner: Runner | None = None
        self.metrics = Metrics(lambda: self.engine.stats() if self.engine is not None else None)
        self.created = int(time.time())

    def load(self, loader: Callable[[], tuple[Any, Any]]) -> None:
        try:
            self.model, self.tokenizer = loader()
            c = self.config
            engine = Engine(
                self.model,
                self.tokenizer,
                max_batch=c.max_batch,
                max_step_tokens=c.max_step_tokens,
                kv_budget_bytes=c.kv_budget_bytes,
            )
            engine.start()
            self.engine, self.runner = engine, Runner(engine, c.max_queue, self.metrics)
            self.status = "ok"
            log.info("serving %s", c.model_id)
        except Exception as e:
            self.status, self.error = "error", f"{type(e).__name__}: {e}"
            log.error("the model failed to load: %s", self.error)

    def ready(self) -> Runner:
        if self.status != "ok" or self.runner is None:
            msg = "the model is still loading"
            if self.status != "loading":
                msg = f"the model failed to load: {self.error}"
            raise APIError(503, msg, code="model_" + self.status, headers={"Retry-After": "1"})
        return self.runner


def create_app(loader: Callable[[], tuple[Any, Any]], config: ServeConfig | None = None) -> Starlette:
    state = State(config or ServeConfig())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        threading.Thread(target=state.load, args=(loader,), name="fs-serve-load", daemon=True).start()
        yield
        if state.runner is not None:  # shutting down: whatever is still in flight stops at the next step
            state.runner.cancel_all()
        if state.engine is not None:
            await asyncio.to_thread(state.engine.stop)

    def endpoint(fn: Callable[[Request], Any], *, auth: bool = True) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            try:
                if auth:
                    check_key(request, state.config.api_key)
                return await fn(request)
            except APIError as e:
                return e.response()
            except Exception:
                log.exception("unexpected error in %s", request.url.path)
                return APIError(500, "internal server error; the server log has the details").response()

        return handle

    async def health(request: Request) -> Response:
        if state.status == "ok":
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": state.status, "message": state.error or "loading the model"}, status_code=503)

    async def metrics(request: Request) -> Response:
        return Response(state.metrics.text(), media_type=CONTENT_TYPE)

    async def models(request: Request) -> Response:
        card = {"id": state.config.model_id, "object": "model", "created": state.created, "owned_by": "fs"}
        return JSONResponse({"object": "list", "data": [card]})

    async def chat(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        req = parse(ChatRequest, body)
        runner = state.ready()
        check_model(req, state.config.model_id)
        r = render_chat(req, state.tokenizer)
        job = sampling_job(req, r.ids, state, req.top_logprobs or 0) | r.constraint
        make = lambda i: ChoiceStream(  # noqa: E731
            i, state.tokenizer, req.stops(), chat=True, tools=r.parse_tools, in_reasoning=r.in_reasoning
        )
        return await respond(request, runner, req, "chat", [job], make, req.logprobs)

    async def completions(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        req = parse(CompletionRequest, body)
        runner = state.ready()
        check_model(req, state.config.model_id)
        jobs = []
        for p in req.prompts():
            ids = state.tokenizer.encode(p) if isinstance(p, str) else p
            if isinstance(p, list) and any(i >= state.model.vocab_size for i in p):
                raise bad_request(f"prompt token ids must be below the vocabulary size {state.model.vocab_size}")
            jobs.append(sampling_job(req, ids, state, req.logprobs or 0))
        make = lambda i: ChoiceStream(i, state.tokenizer, req.stops(), chat=False, tools=False, in_reasoning=False)  # noqa: E731
        return await respond(request, runner, req, "completion", jobs, make, req.logprobs is not None)

    async def respond(request, runner, req, kind, jobs, make, logprobs) -> Response:  # type: ignore[no-untyped-def]
        from .responses import Reply

        arrived = time.perf_counter()
        n = req.n
        expanded = []
        for job in jobs:
            for j in range(n):
                seed = job["seed"] + j if job["seed"] is not None and n > 1 else job["seed"]
                expanded.append(job | {"seed": seed})
        handles = runner.submit(expanded)
        eos = resolve_eos(state.model, state.tokenizer, None)
        reply = Reply(kind, state.config.model_id, state.tokenizer, logprobs)
        streams = [make(i) for i in range(len(handles))]
        endpoint_name = "chat" if kind == "chat" else "completions"

        async def events() -> AsyncIterator[tuple[int, dict[str, Any] | None, str | None]]:
            async for i, steps, result in runner.follow(handles, arrived):
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

        outcome = "error"
        try:
            await until_disconnect(request, collect())
            outcome = "ok"
        except _Disconnected:
            outcome = "cancelled"
            return Response(status_code=499)
        finally:
            state.metrics.requests.labels(endpoint_name, outcome).inc()
        return JSONResponse(reply.whole(list(zip(per_choice, finishes, strict=True))))

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        what = "route" if exc.status_code == 404 else "method"
        return APIError(exc.status_code, f"no such {what}: {request.method} {request.url.path}").response()

    routes = [
        Route("/health", endpoint(health, auth=False), methods=["GET"]),
        Route("/metrics", endpoint(metrics), methods=["GET"]),
        Route("/v1/models", endpoint(models), methods=["GET"]),
        Route("/v1/chat/completions", endpoint(chat), methods=["POST"]),
        Route("/v1/completions", endpoint(completions), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    app.state.fs = state
    return app


# --- the pieces each request goes through ---------------------------------------------------------------------


def check_key(request: Request, key: str | None) -> None:
    if key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise APIError(401, "a valid API key is needed: Authorization: Bearer <key>", code="invalid_api_key")


async def read_json(request: Request, limit: int) -> Any:
    size = request.headers.get("content-length", "")
    if size.isdigit() and int(size) > limit:
        raise APIError(413, f"the request body is {size} bytes; the limit is {limit}", code="body_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise APIError(413, f"the request body is over the limit of {limit} bytes", code="body_too_large")
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise bad_request(f"the request body is not valid JSON: {e}", code="invalid_json") from None


def check_model(req: Sampling, model_id: str) -> None:
    if req.model and req.model != model_id:
        raise APIError(404, f"model {req.model!r} is not served here; this server has {model_id!r}", param="model",
                       code="model_not_found")  # fmt: skip


def sampling_job(req: Sampling, ids: list[int], state: State, top_logprobs: int) -> dict[str, Any]:
    """``Engine.submit`` keyword arguments for one prompt. Unset sampling fields take the model's defaults
    (generation_config.json, as vLLM does), else OpenAI's; ``max_tokens`` is capped by the room the context has."""
    room = state.model.config.max_position_embeddings - len(ids)
    if room <= 0:
        ctx = state.model.config.max_position_embeddings
        raise bad_request(f"the prompt is {len(ids)} tokens; the model's context is {ctx}", "messages",
                          "context_length_exceeded")  # fmt: skip
    budget = req.budget()  # type: ignore[attr-defined]
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
        "seed": req.seed,
        "stop": req.stops(),
        "top_logprobs": top_logprobs,
    }


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
