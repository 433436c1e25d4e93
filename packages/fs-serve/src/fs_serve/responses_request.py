"""``POST /v1/responses``'s request body (OpenAI's Responses API), and its meaning as a chat request.

Why a translation and not a second pipeline: a Responses request says what a chat request says - messages, tools,
a forced call, a JSON schema, a budget - in other words. Mapped onto ``ChatRequest`` it goes through the very
same chat template, constraints, engine and output parser, so the two endpoints cannot drift apart.

    input: "Hi"                                     -> messages [{"role": "user", "content": "Hi"}]
    instructions: "Be brief"                        -> a system message first
    {"type": "message", "role", "content"}          -> that message (input_text / output_text parts joined)
    {"type": "function_call", "call_id", "name", "arguments"}   -> an assistant message's tool_calls
    {"type": "function_call_output", "call_id", "output"}       -> a tool message
    {"type": "reasoning", ...}                      -> the next assistant message's reasoning_content
    tools: [{"type": "function", "name", ...}]      -> tools: [{"type": "function", "function": {...}}]
    text.format json_schema / json_object           -> response_format
    max_output_tokens                               -> max_completion_tokens
    reasoning.effort "none" / "minimal"             -> chat_template_kwargs enable_thinking false

Refused with a 400 naming the field: ``previous_response_id`` and ``conversation`` (fs stores no responses),
``store: true``, ``background: true``, ``include`` values other than ``message.output_text.logprobs``,
``reasoning.summary`` (fs returns the reasoning text itself, not a summary), non-text input parts (images, files)
and any field not listed here.
"""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from .protocol import ChatRequest, Model, Penalty

LOGPROBS = "message.output_text.logprobs"


class TextPart(Model):
    type: Literal["input_text", "output_text", "text"]
    text: str


class MessageItem(Model):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(Model):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(Model):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[TextPart]

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


class ReasoningText(Model):
    text: str


class ReasoningItem(Model):
    type: Literal["reasoning"]
    summary: list[ReasoningText] = Field(default_factory=list)
    content: list[ReasoningText] = Field(default_factory=list)


Item = Annotated[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem, Field(discriminator="type")]


class FunctionTool(Model):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedTool(Model):
    type: Literal["function"]
    name: str


class TextFormat(Model):
    type: Literal["text", "json_object", "json_schema"]
    name: str = "response"
    schema_: dict[str, Any] = Field(default_factory=lambda: {}, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextConfig(Model):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the only level a model without the knob honours


class Reasoning(Model):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: str | None = None  # any value is refused: fs returns the reasoning text, not a summary


class ResponsesRequest(Model):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    input: Annotated[str, Field(min_length=1)] | Annotated[list[Item], Field(min_length=1)]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedTool | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    reasoning: Reasoning | None = None
    stream: bool = False
    include: list[Literal["message.output_text.logprobs"]] | None = None
    # vLLM's extras, as on chat completions
    seed: Annotated[int, Field(ge=0)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # accepted, changing nothing fs outputs
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    truncation: Literal["disabled"] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _typed_items(cls, data: Any) -> Any:
        """OpenAI's short form of an input message, ``{"role", "content"}``, has no ``type``: it is a message."""
        items = data.get("input") if isinstance(data, dict) else None
        if isinstance(items, list):
            data = dict(data, input=[{"type": "message", **i} if isinstance(i, dict) and "type" not in i and "role" in i
                                     else i for i in items])  # fmt: skip
        return data

    @model_validator(mode="after")
    def _supported(self) -> "ResponsesRequest":
        if self.reasoning is not None and self.reasoning.summary is not None:
            raise ValueError("reasoning.summary is not supported: fs returns the reasoning text itself (content)")
        if self.previous_response_id is not None:
            raise ValueError(
                "previous_response_id is not supported: fs-serve stores no responses; send the whole conversation "
                "in input (the prior output items as they came back)"
            )
        if self.store:
            raise ValueError("store true is not supported: fs-serve keeps no responses (send store: false)")
        if self.background:
            raise ValueError("background true is not supported: fs-serve answers while the request is open")
        return self

    def chat(self) -> ChatRequest:
        """This request as the chat request that means the same (module docstring)."""
        body: dict[str, Any] = {"messages": self._messages(), "stream": False}
        for name in ("model", "temperature", "top_p", "seed", "top_k", "min_p", "repetition_penalty",
                     "presence_penalty", "frequency_penalty", "parallel_tool_calls"):  # fmt: skip
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        if self.max_output_tokens is not None:
            body["max_completion_tokens"] = self.max_output_tokens
        if self.tools:
            body["tools"] = [{"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                             for t in self.tools]  # fmt: skip
        if isinstance(self.tool_choice, NamedTool):
            body["tool_choice"] = {"type": "function", "function": {"name": self.tool_choice.name}}
        elif self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        fmt = self.text.format if self.text is not None else None
        if fmt is not None and fmt.type != "text":
            rf: dict[str, Any] = {"type": fmt.type}
            if fmt.type == "json_schema":
                rf["json_schema"] = {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}
            body["response_format"] = rf
        if self.logprobs():
            body["logprobs"], body["top_logprobs"] = True, self.top_logprobs or 0
        kwargs = dict(self.chat_template_kwargs or {})
        if self.reasoning is not None and self.reasoning.effort in ("none", "minimal"):
            kwargs.setdefault("enable_thinking", False)
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        return ChatRequest.model_validate({k: v for k, v in body.items() if v is not None})

    def logprobs(self) -> bool:
        return LOGPROBS in (self.include or []) or bool(self.top_logprobs)

    def _messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": self.instructions}] if self.instructions else []
        if isinstance(self.input, str):
            return [*out, {"role": "user", "content": self.input}]
        reasoning = None
        for item in self.input:
            last = out[-1] if out else None
            if isinstance(item, MessageItem):
                msg: dict[str, Any] = {"role": item.role, "content": item.text()}
                if item.role == "assistant" and reasoning is not None:
                    msg["reasoning_content"], reasoning = reasoning, None
                out.append(msg)
            elif isinstance(item, FunctionCallItem):
                call = {"id": item.call_id, "type": "function",
                        "function": {"name": item.name, "arguments": item.arguments}}  # fmt: skip
                if last is None or last["role"] != "assistant":  # calls in a row belong to one assistant turn
                    last = {"role": "assistant", "content": ""}
                    if reasoning is not None:
                        last["reasoning_content"], reasoning = reasoning, None
                    out.append(last)
                last.setdefault("tool_calls", []).append(call)
            elif isinstance(item, FunctionCallOutputItem):
                out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
            else:
                reasoning = "".join(p.text for p in item.content) or None
        return out
