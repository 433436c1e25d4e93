"""``POST /v1/embeddings`` for Qwen3-Embedding checkpoints: OpenAI's request and response, vectors from
``fs_generate.embedding`` run by the engine's thread between steps (``Engine.embed``).

    {"input": "a cat" | ["a cat", ...] | [9707, ...] | [[9707, ...], ...], "model"?, "dimensions"?,
     "encoding_format": "float" | "base64"}
 -> {"object": "list", "model", "data": [{"object": "embedding", "index": i, "embedding": [...] | "base64"}],
     "usage": {"prompt_tokens", "total_tokens"}}

A text gets tokenizer.json's appended token (Qwen3-Embedding's ``<|endoftext|>``); token ids are taken as given.
``dimensions`` truncates each vector, then renormalizes it (Matryoshka, as Qwen3-Embedding is trained for).
``base64`` is the vector's float32 little-endian bytes, what the openai client decodes with numpy. A server whose
model is not an embedding model (``fs_generate.embedding.is_embedding_model``) answers 400 naming ``model``: a
generation checkpoint read at its last token gives a vector no one trained.
"""

import asyncio
import base64
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from fs_generate import GenerateError
from fs_generate.embedding import ids

from .errors import bad_request
from .protocol import Model, PromptIds
from .runner import Runner

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request

Text = Annotated[str, Field(min_length=1)]


class EmbeddingRequest(Model):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: (
        Text
        | Annotated[list[Text], Field(min_length=1, max_length=MAX_INPUTS)]
        | PromptIds
        | Annotated[list[PromptIds], Field(min_length=1, max_length=MAX_INPUTS)]
    )
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None

    def rows(self, tokenizer: Any, vocab_size: int) -> list[list[int]]:
        x = self.input
        if isinstance(x, str):
            return [ids(tokenizer, x)]
        if isinstance(x[0], int):
            rows = [list(x)]
        elif isinstance(x[0], str):
            return [ids(tokenizer, t) for t in x]  # type: ignore[arg-type]
        else:
            rows = [list(r) for r in x]  # type: ignore[arg-type]
        for i, r in enumerate(rows):
            if any(t >= vocab_size for t in r):  # type: ignore[operator]
                raise bad_request(f"input.{i}: token ids must be below the vocabulary size {vocab_size}", "input")
        return rows  # type: ignore[return-value]


async def embeddings(runner: Runner, req: EmbeddingRequest, state: Any) -> dict[str, Any]:
    if not state.embedding:
        raise bad_request(
            "this server's model is not an embedding model (a sentence-transformers directory with last-token "
            "pooling, such as Qwen3-Embedding, or a headless Qwen3 checkpoint); serve one to get embeddings",
            "model",
            "model_not_embedding",
        )
    rows = req.rows(state.tokenizer, state.model.vocab_size)
    try:
        vectors = await asyncio.wrap_future(runner.engine.embed(rows, req.dimensions))
    except GenerateError as e:
        field = "dimensions" if str(e).startswith("dimensions") else "input"
        raise bad_request(f"{field}: {e}", field) from None
    data = []
    for i, v in enumerate(vectors):
        vec: Any = v.tolist()
        if req.encoding_format == "base64":
            vec = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": i, "embedding": vec})
    n = sum(map(len, rows))
    return {"object": "list", "model": state.config.model_id, "data": data,
            "usage": {"prompt_tokens": n, "total_tokens": n}}  # fmt: skip
