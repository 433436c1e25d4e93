"""``POST /v1/responses``: the request translated to chat (responses_request.py), run on the engine exactly as a
chat completion is, its one choice's deltas turned into Responses items and events (responses_events.py).

Streamed, each event is an SSE message ``event: <type>`` / ``data: <json>`` (OpenAI's framing; there is no
``[DONE]``: ``response.completed`` is the last event). A failure after the stream began
is a ``response.failed`` event carrying the error. Not streamed, the body is the response object of the last event.
"""

import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from fs_generate.stopping import resolve_eos

from .choices import ChoiceStream
from .errors import APIError
from .render import render_chat
from .respond import collect_counted, sampling_job
from .responses_events import ResponseEvents
from .responses_request import ResponsesRequest
from .runner import Runner

if TYPE_CHECKING:
    from .app import State


def sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


async def respond_responses(request: Request, state: "State", runner: Runner, req: ResponsesRequest) -> Response:
    arrived = time.perf_counter()
    chat = req.chat()
    r = render_chat(chat, state.tokenizer)
    job = sampling_job(chat, r.ids, state, chat.top_logprobs or 0) | r.constraint
    (handle,) = runner.submit([job], r.constraint_field)
    stream = ChoiceStream(0, state.tokenizer, [], chat=True, tools=r.parse_tools, in_reasoning=r.in_reasoning,
                          forced=chat.forced_tool())  # fmt: skip
    out = ResponseEvents(req, state.config.model_id, state.tokenizer, req.logprobs())
    eos = resolve_eos(state.model, state.tokenizer, None)
    reasoning: list[str] = []

    async def events() -> AsyncIterator[dict[str, Any]]:
        for e in out.start():
            yield e
        async for _, steps, result in runner.follow([handle], arrived, r.constraint_field):
            delta = stream.feed(steps, eos) if steps else None
            if result is not None:
                last, finish = stream.finish(result)
                for d in (delta, last):
                    reasoning.append((d or {}).get("reasoning_content", ""))
                    for e in out.feed(d):
                        yield e
                thought = "".join(reasoning)
                for e in out.finish(finish, result, len(state.tokenizer.encode(thought)) if thought else 0):
                    yield e
                return
            reasoning.append((delta or {}).get("reasoning_content", ""))
            for e in out.feed(delta):
                yield e

    if req.stream:

        async def body() -> AsyncIterator[str]:
            outcome = "cancelled"
            try:
                async for e in events():
                    yield sse(e)
                outcome = "ok"
            except APIError as e:
                outcome = "error"
                out.status = "failed"
                failed = out.event("response.failed", response=out.response() | {"error": e.body()["error"]})
                yield sse(failed)
            finally:
                state.metrics.requests.labels("responses", outcome).inc()

        return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    last: dict[str, Any] = {}

    async def collect() -> None:
        nonlocal last
        async for e in events():
            last = e

    gone = await collect_counted(request, state, "responses", collect())
    return gone or JSONResponse(last["response"])
