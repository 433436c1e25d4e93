"""The ASGI app: OpenAI's routes on Starlette, the engine behind them.

    app = create_app(lambda: load(None), ServeConfig(model_id="fs-demo"))   # uvicorn.run(app, ...)

The model loads in a thread once the app starts, so ``/health`` answers 503 ``{"status": "loading"}`` at once and
200 ``{"status": "ok"}`` when requests can be served at warm speed: after ``fs_generate.warm_up`` has paid the
first run's kernel compile and thread contests. Every route but ``/health`` needs the API key when one is set
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
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from fs_generate import Engine
from fs_generate.embedding import is_embedding_model
from fs_generate.warm_up import warm_up

from .choices import ChoiceStream
from .echo import echo
from .embeddings import EmbeddingRequest, embeddings
from .errors import APIError, bad_request
from .metrics import CONTENT_TYPE, Metrics
from .protocol import ChatRequest, CompletionRequest, parse
from .render import constraint_of, render_chat
from .respond import respond, sampling_job
from .responses_request import ResponsesRequest
from .responses_route import respond_responses
from .runner import Runner
from .tokenize import detokenize, tokenize, tokenizer_info
from .transport import Framing

log = logging.getLogger("fs_serve")
# the chat page may run its own inline script and call this origin, nothing else: no external request can leave it
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'"


@dataclass
class ServeConfig:
    model_id: str = "fs-demo"  # the id /v1/models lists first and every response carries
    aliases: tuple[str, ...] = ()  # other names a request may give for the same model (--served-model-name A B)
    max_batch: int = 16
    max_queue: int = 64  # engine requests waiting beyond max_batch before 429
    max_step_tokens: int = 512
    kv_budget_bytes: int | None = None
    kv_bits: int | None = None  # the pool keeps K/V as affine codes (llama-server's -ctk/-ctv q8_0, vLLM's fp8)
    kv_group_size: int = 64
    api_key: str | None = None
    max_body_bytes: int = 4 << 20
    defaults: dict[str, Any] = field(default_factory=dict)  # sampling defaults (generation_config.json)
    group: Any = None  # an mx.distributed group: this server is rank 0 of a tensor-parallel LockstepEngine
    watchdog_s: float = 30.0  # distributed: exit when no step completes this long (a peer died)
    allowed_origins: list[str] = field(default_factory=list)  # CORS: browser pages on these origins may call
    ui: bool = True  # the chat page at / (--no-ui turns it off, as llama-server's --no-webui)
    # speculative decoding: the Engine's keywords (draft_model, num_draft_tokens, prompt_lookup_num_tokens), made
    # from the loaded model and tokenizer in the loading thread (a draft model loads there too)
    speculation: Callable[[Any, Any], dict[str, Any]] | None = None


class State:
    def __init__(self, config: ServeConfig):
        self.config = config
        self.status, self.error = "loading", ""
        self.stage = "loading the model"  # what /health says while loading
        self.model: Any = None
        self.tokenizer: Any = None
        self.engine: Engine | None = None
        self.runner: Runner | None = None
        self.embedding = False  # the model is an embedding model: /v1/embeddings answers
        self.metrics = Metrics(lambda: self.engine.stats() if self.engine is not None else None)
        self.created = int(time.time())

    def load(self, loader: Callable[[], tuple[Any, Any]]) -> None:
        try:
            self.model, self.tokenizer = loader()
            self.embedding = is_embedding_model(getattr(self.model, "path", ""))
            c = self.config
            spec = c.speculation(self.model, self.tokenizer) if c.speculation is not None else {}
            engine = make_engine(self.model, self.tokenizer, c, **spec)
            if c.group is None:  # ranks in lockstep take only rank 0's steps: no warm-up of their own
                self.stage = "warming up (a first run on this machine compiles the CPU kernels)"
                log.info(self.stage)
                log.info("warmed up in %.1f s", warm_up(engine))
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


def make_engine(model: Any, tokenizer: Any, c: ServeConfig, **speculation: Any) -> Engine:
    """The engine the config asks for; under a group, every rank must make it with the same arguments."""
    kw: dict[str, Any] = dict(
        max_batch=c.max_batch, max_step_tokens=c.max_step_tokens, kv_budget_bytes=c.kv_budget_bytes,
        kv_bits=c.kv_bits, kv_group_size=c.kv_group_size, **speculation,
    )  # fmt: skip
    if c.group is None:
        return Engine(model, tokenizer, **kw)
    from fs_generate.lockstep import LockstepEngine

    return LockstepEngine(model, tokenizer, group=c.group, watchdog_s=c.watchdog_s, **kw)


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

    page = (resources.files("fs_serve") / "ui" / "index.html").read_text(encoding="utf-8")

    async def chat_page(request: Request) -> Response:  # the browser page (ui/index.html); the API calls need the key
        return HTMLResponse(page, headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP})

    async def health(request: Request) -> Response:
        if state.status == "ok":
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": state.status, "message": state.error or state.stage}, status_code=503)

    async def metrics(request: Request) -> Response:
        return Response(state.metrics.text(), media_type=CONTENT_TYPE)

    names = (state.config.model_id, *state.config.aliases)

    def card(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": state.created, "owned_by": "fs"}

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [card(n) for n in names]})

    async def one_model(request: Request) -> Response:
        name = request.path_params["name"]
        check_model(name, names)
        return JSONResponse(card(name))

    async def chat(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        req = parse(ChatRequest, body)
        runner = state.ready()
        check_model(req.model, names)
        r = render_chat(req, state.tokenizer)
        job = sampling_job(req, r.ids, state, req.top_logprobs or 0) | r.constraint
        make = lambda i: ChoiceStream(  # noqa: E731
            i,
            state.tokenizer,
            req.stops(),
            chat=True,
            tools=r.parse_tools,
            in_reasoning=r.in_reasoning,
            forced=req.forced_tool(),
        )
        return await respond(request, state, runner, req, "chat", [job], make, req.logprobs, r.constraint_field)

    async def completions(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        req = parse(CompletionRequest, body)
        runner = state.ready()
        check_model(req.model, names)
        constraint, field = constraint_of(req)
        jobs = []
        for p in req.prompts():
            ids = state.tokenizer.encode(p) if isinstance(p, str) else p
            if isinstance(p, list) and any(i >= state.model.vocab_size for i in p):
                raise bad_request(f"prompt token ids must be below the vocabulary size {state.model.vocab_size}")
            jobs.append(sampling_job(req, ids, state, req.logprobs or 0) | constraint)
        preface = [await echo(runner, j["prompt"], req.logprobs, state.tokenizer) for j in jobs] if req.echo else None
        make = lambda i: ChoiceStream(i, state.tokenizer, req.stops(), chat=False, tools=False, in_reasoning=False)  # noqa: E731
        logprobs = req.logprobs is not None
        return await respond(request, state, runner, req, "completion", jobs, make, logprobs, field, preface)

    async def responses(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        req = parse(ResponsesRequest, body)
        runner = state.ready()
        check_model(req.model, names)
        return await respond_responses(request, state, runner, req)

    async def embeddings_route(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        req = parse(EmbeddingRequest, body)
        runner = state.ready()
        check_model(req.model, names)
        outcome = "error"
        try:
            out = await embeddings(runner, req, state)
            outcome = "ok"
        finally:
            state.metrics.requests.labels("embeddings", outcome).inc()
        return JSONResponse(out)

    async def tokenize_route(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        state.ready()
        return JSONResponse(tokenize(body, state.tokenizer, state.model.config.max_position_embeddings))

    async def detokenize_route(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        state.ready()
        return JSONResponse(detokenize(body, state.tokenizer, state.model.vocab_size))

    async def tokenizer_info_route(request: Request) -> Response:
        state.ready()
        return JSONResponse(tokenizer_info(state.tokenizer, state.model.config.max_position_embeddings))

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        what = "route" if exc.status_code == 404 else "method"
        return APIError(exc.status_code, f"no such {what}: {request.method} {request.url.path}").response()

    routes = [
        Route("/health", endpoint(health, auth=False), methods=["GET"]),
        *([Route("/", endpoint(chat_page, auth=False), methods=["GET"])] if state.config.ui else []),
        Route("/metrics", endpoint(metrics), methods=["GET"]),
        Route("/v1/models", endpoint(models), methods=["GET"]),
        Route("/v1/models/{name:path}", endpoint(one_model), methods=["GET"]),
        Route("/v1/chat/completions", endpoint(chat), methods=["POST"]),
        Route("/v1/completions", endpoint(completions), methods=["POST"]),
        Route("/v1/responses", endpoint(responses), methods=["POST"]),  # the Responses API (responses_route.py)
        Route("/v1/embeddings", endpoint(embeddings_route), methods=["POST"]),  # embedding checkpoints only
        Route("/chat/completions", endpoint(chat), methods=["POST"]),  # mlx_lm.server's and llama-server's aliases
        Route("/completions", endpoint(completions), methods=["POST"]),
        Route("/tokenize", endpoint(tokenize_route), methods=["POST"]),  # llama-server's (tokenize.py)
        Route("/detokenize", endpoint(detokenize_route), methods=["POST"]),
        Route("/tokenizer_info", endpoint(tokenizer_info_route), methods=["GET"]),  # vLLM's (lm-eval asks it)
    ]
    middleware = [Middleware(Framing)]
    if state.config.allowed_origins:  # Starlette's own CORS: preflights answered before routing (and the key check)
        middleware.append(Middleware(CORSMiddleware, allow_origins=state.config.allowed_origins,
                                     allow_methods=["GET", "POST"], allow_headers=["*"]))  # fmt: skip
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found},
                    middleware=middleware)  # fmt: skip
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


def check_model(name: str | None, served: tuple[str, ...]) -> None:
    """A request may omit the model or give any served name; another name is a 404 naming what is served."""
    if name and name not in served:
        have = ", ".join(map(repr, served))
        raise APIError(404, f"model {name!r} is not served here; this server has {have}", param="model",
                       code="model_not_found")  # fmt: skip
