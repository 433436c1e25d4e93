"""``echo: true`` on ``/v1/completions``: every choice starts with the prompt itself, and with ``logprobs`` the
prompt's tokens come first in ``logprobs`` - each with its log-probability given the tokens before it (the first
token's is ``null``: nothing predicts it) and its ``top_logprobs`` - then the generated tokens as usual.

Why: lm-evaluation-harness's loglikelihood and perplexity tasks send ``echo: true, logprobs: 1, max_tokens: 0``
(or 1) and sum ``token_logprobs`` over the continuation; without echo a server cannot answer them at all.

The numbers come from ``Engine.score`` (fs_generate.scoring), run in the engine's own thread between steps: the
same function ``fs-perplexity`` uses, so the server and the command line cannot disagree.
"""

import asyncio
from typing import Any

from fs_generate import GenerateError

from .errors import bad_request
from .runner import Runner


async def echo(runner: Runner, ids: list[int], logprobs: int | None, tokenizer: Any) -> dict[str, Any]:
    """The first delta of each choice of this prompt: its text, and (when ``logprobs`` is set) its entries."""
    delta: dict[str, Any] = {"text": tokenizer.decode(ids)}
    if logprobs is None:
        return delta
    try:
        (scored,) = await asyncio.wrap_future(runner.engine.score([ids], logprobs))
    except GenerateError as e:
        raise bad_request(f"echo: {e}", "echo") from None
    tops = scored.top_logprobs or [()] * len(ids)
    delta["logprobs"] = list(zip(ids, scored.logprobs, tops, strict=True))
    return delta
