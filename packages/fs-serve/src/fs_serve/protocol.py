"""The request bodies fs-serve accepts, as typed objects (pydantic, strict: ``"1"`` is not an int).

JSON ``null`` is the field left out. A top-level field fs does not implement is refused with a 400 naming it
(``reasoning_effort``, ``prediction``), and so is a value fs cannot honour (``best_of: 3``, ``store: true``):
never silently ignored, so a client cannot believe it got what it asked for. Inside messages and tools unknown
keys are ignored: clients send back the assistant messages they received, with output-only keys
(``refusal``, ``annotations``). Fields that change no output are accepted as they are (``user``, ``metadata``,
``service_tier``, ``prompt_cache_key``: fs caches every prefix anyway). A validation failure becomes OpenAI's
error shape with ``param`` set to the field's dotted path (``messages.0.role``).
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import APIError, bad_request

MAX_N = 16  # choices per request: each is one engine request


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """JSON ``null`` for any field is the field left out (OpenAI's spec marks nearly every field nullable, and
        clients send ``"n": null``, ``"stream": null``): the default applies, a required field is still missing."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class StreamOptions(Model):
    include_usage: bool = False


class FunctionDef(Model):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Model):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(Model):
    name: str


class ToolChoiceFunction(Model):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaFormat(Model):
    name: str = "response"
    schema_: dict[str, Any] = Field(default_factory=lambda: {}, alias="schema")
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(Model):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> "ResponseFormat":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError('response_format type "json_schema" needs a json_schema object')
        return self


class TextPart(Model):
    type: Literal["text"]
    text: str


class FunctionCall(Model):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCallIn(Model):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


TokenBias = Annotated[float, Field(ge=-100.0, le=100.0, allow_inf_nan=False)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0, allow_inf_nan=False)]


class Sampling(Model):
    """The fields both endpoints share (and the top level, where an unknown field is refused)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=0)] | None = None
    n_predict: Annotated[int, Field(ge=-1)] | None = None  # llama-server's name for max_tokens; -1: no limit
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None  # -1 or 0: off (vLLM's and llama.cpp's spellings)
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0)] | None = None
    presence_penalty: Penalty | None = None  # OpenAI's additive penalties over the answer so far (penalties.py)
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, TokenBias] | None = None  # {"token id": bias}, ids as strings (JSON keys)
    seed: Annotated[int, Field(ge=0)] | None = None
    stop: str | Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=16)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    user: str | None = None
    ignore_eos: bool = False  # vLLM's and llama-server's extra: run to max_tokens (benchmarks)
    grammar: Annotated[str, Field(min_length=1)] | None = None  # llama-server's GBNF (llguidance converts it)
    json_schema: dict[str, Any] | None = None  # llama-server's schema constraint, as response_format's
    # accepted, and changing nothing fs outputs:
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None  # fs caches every prompt's prefix blocks
    cache_prompt: bool | None = None  # llama-server's; the same
    store: bool | None = None  # true asks OpenAI to keep the answer; fs keeps nothing (refused)
    adapters: str | None = None  # mlx_lm.server's per-request LoRA adapter (refused: one adapter, fused at load)

    @model_validator(mode="after")
    def _unsupported(self) -> "Sampling":
        if self.stop == "":
            raise ValueError("stop strings must be non-empty")
        if self.store:
            raise ValueError("store true is not supported: fs-serve keeps no responses")
        if self.adapters is not None:
            raise ValueError(
                "adapters (a per-request LoRA adapter) is not supported: fs-serve fuses one adapter into the weights "
                "at start (fs-serve --adapter-path DIR); run one server per adapter"
            )
        for token in self.logit_bias or {}:
            if not token.isdigit() or len(token) > 9:
                raise ValueError(f"logit_bias keys must be token ids as decimal strings, got {token!r}")
        return self

    def bias(self) -> dict[int, float] | None:
        return {int(k): v for k, v in self.logit_bias.items()} if self.logit_bias else None

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def budget(self) -> int | None:
        if self.max_tokens is None and self.n_predict is not None:
            return None if self.n_predict < 0 else self.n_predict
        return self.max_tokens


class ChatRequest(Sampling):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=0)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "ChatRequest":
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("tool_choice needs tools")
        named = self.tool_choice.function.name if isinstance(self.tool_choice, ToolChoiceFunction) else None
        if named is not None and named not in {t.function.name for t in self.tools or []}:
            raise ValueError(f"tool_choice names {named!r}, which is not in tools")
        rf = self.response_format is not None and self.response_format.type != "text"
        pairs = (("response_format", rf), ("grammar", self.grammar), ("json_schema", self.json_schema),
                 ("tool_choice", self.forced_tool()))  # fmt: skip
        given = [name for name, v in pairs if v]
        if len(given) > 1:
            raise ValueError(f"{given[0]} and {given[1]} cannot both constrain the output; give one")
        return self

    def forced_tool(self) -> bool:
        return self.tool_choice == "required" or isinstance(self.tool_choice, ToolChoiceFunction)

    def budget(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else super().budget()


PromptIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(Sampling):
    prompt: (
        Annotated[str, Field(min_length=1)] | PromptIds | list[Annotated[str, Field(min_length=1)]] | list[PromptIds]
    )
    logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @model_validator(mode="after")
    def _supported(self) -> "CompletionRequest":
        if self.suffix:
            raise ValueError("suffix is not supported")
        if self.best_of not in (None, self.n):
            raise ValueError("best_of is not supported (it must equal n)")
        if isinstance(self.prompt, list) and not self.prompt:
            raise ValueError("prompt must not be empty")
        return self

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], int):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


def parse(cls: type[Model], body: Any) -> Any:
    """``body`` (decoded JSON) as ``cls``, or a 400 naming the first offending field."""
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {type(body).__name__}")
    where = lone_surrogate(body)
    if where is not None:
        raise APIError(400, f"{where}: holds a lone UTF-16 surrogate escape (\\ud800-\\udfff unpaired), which is "
                       "not text; send valid Unicode", param=where, code="invalid_unicode")  # fmt: skip
    try:
        return cls.model_validate(body)
    except ValidationError as e:
        # the deepest error: of a union (``str | list[Item]``) the member the body came closest to matching
        err = max(e.errors(), key=lambda x: len(_path(x["loc"])))
        param = ".".join(_path(err["loc"])) or None
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "fs-serve does not implement this field; leave it out (docs/serve.md lists every field it takes)"
        elif param is None and (head := msg.split(" ", 1)[0].rstrip(":")).split(".")[0] in cls.model_fields:
            param = head  # a cross-field rule's message names its field first
        text = msg if param is None or msg.startswith(param) else f"{param}: {msg}"
        raise APIError(400, text, param=param, code="invalid_value") from None


TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}


def _path(loc: tuple[Any, ...]) -> list[str]:
    """A validation error's location without pydantic's union-member tags (``constrained-str``, ``list[...]``)."""
    return [str(p) for p in loc if isinstance(p, int) or not (p in TYPE_TAGS or any(c in p for c in "[]-"))]


def lone_surrogate(value: Any) -> str | None:
    """The dotted path of the first string (or key) holding an unpaired surrogate, or None. JSON's ``"\\ud800"``
    escape decodes to one; no tokenizer can encode it, and it is no character a model could have been sent."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    return path or "body"
        elif isinstance(node, dict):
            for k, v in node.items():
                sub = f"{path}.{k}" if path else str(k)
                if isinstance(k, str) and lone_surrogate(k) is not None:  # the path itself is printable, escaped
                    return sub.encode("utf-8", "backslashreplace").decode("utf-8")
                stack.append((v, sub))
        elif isinstance(node, list):
            stack.extend((v, f"{path}.{i}") for i, v in enumerate(node))
    return None
