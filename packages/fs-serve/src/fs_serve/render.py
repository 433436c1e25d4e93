"""From a chat request to what the engine runs: the prompt's token ids (the model's own chat template, tools
included) and the constraint that enforces ``response_format`` or a required tool call.

- ``developer`` messages are system messages (the Qwen3 template knows no developer role).
- An assistant message's ``tool_calls`` reach the template as Qwen3 expects them (``function.arguments`` a JSON
  object when it parses, else the text as sent); ``tool`` messages go back through the template as they are.
- ``chat_template_kwargs`` pass through (``{"enable_thinking": false}``).
- ``tool_choice: "none"`` renders no tools (the model is not told about them, so it cannot call one);
  ``"auto"`` (the default with tools) renders them and parses calls out of the output;
  ``"required"`` or a named function also constrains decoding to one well-formed call
  (``fs_generate.tool_calls.tool_call_grammar``), so the model cannot answer in prose instead.
- ``response_format``: ``json_object`` -> the schema ``{"type": "object"}``; ``json_schema`` -> its schema.
- llama-server's top-level ``json_schema`` (a schema) and ``grammar`` (GBNF, converted to Lark by llguidance),
  on both endpoints (``constraint_of``).
"""

import json
from dataclasses import dataclass, field
from typing import Any

from fs_generate.constraints import gbnf_to_lark
from fs_generate.errors import ConstraintError
from fs_generate.tool_calls import tool_call_grammar
from fs_tokenizer import TokenizerError

from .errors import APIError, bad_request
from .protocol import ChatRequest, Message, Sampling, ToolChoiceFunction


@dataclass
class Rendered:
    ids: list[int]
    text: str
    constraint: dict[str, Any] = field(default_factory=dict)  # json_schema= or grammar= for Engine.submit
    constraint_field: str | None = None  # the request field it came from: a compile error's 400 names it
    parse_tools: bool = False  # turn <tool_call> blocks into tool_calls
    in_reasoning: bool = False  # the prompt opened <think>: the output starts inside it


def message_dict(m: Message) -> dict[str, Any]:
    """One request message as the chat template takes it."""
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
    if m.tool_calls:
        calls = []
        for c in m.tool_calls:
            try:
                args: Any = json.loads(c.function.arguments)
            except ValueError:
                args = c.function.arguments
            calls.append({"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": args}})
        out["tool_calls"] = calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    if m.reasoning_content is not None:
        out["reasoning_content"] = m.reasoning_content
    return out


def render_chat(req: ChatRequest, tokenizer: Any) -> Rendered:
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []] if req.tool_choice != "none" else []
    kwargs = dict(req.chat_template_kwargs or {})
    try:
        text = tokenizer.apply_chat_template(
            [message_dict(m) for m in req.messages], add_generation_prompt=True, tools=tools or None, **kwargs
        )
    except TokenizerError as e:
        raise bad_request(f"the chat template could not render these messages: {e}", "messages") from None
    except Exception as e:  # the template itself raised (raise_exception(...), a bad kwarg): the request's fault
        raise bad_request(f"the chat template raised {type(e).__name__}: {e}", "messages") from None
    out = Rendered(tokenizer.encode(text), text, parse_tools=bool(tools))
    tail = text.rstrip()
    out.in_reasoning = tail.endswith("<think>")
    if req.forced_tool():
        chosen = tools
        if isinstance(req.tool_choice, ToolChoiceFunction):
            chosen = [t for t in tools if t["function"]["name"] == req.tool_choice.function.name]
        call, end = tokenizer.token_to_id("<tool_call>"), tokenizer.token_to_id("</tool_call>")
        if call is None or end is None:
            raise bad_request("this model's tokenizer has no <tool_call> tokens; tool_choice cannot force a call")
        out.constraint, out.constraint_field = {"grammar": tool_call_grammar(chosen, call, end)}, "tools"
    elif req.response_format is not None and req.response_format.type != "text":
        rf = req.response_format
        schema = rf.json_schema.schema_ if rf.type == "json_schema" and rf.json_schema else {"type": "object"}
        out.constraint, out.constraint_field = {"json_schema": schema or {"type": "object"}}, "response_format"
    else:
        out.constraint, out.constraint_field = constraint_of(req)
    return out


def constraint_of(req: Sampling) -> tuple[dict[str, Any], str | None]:
    """llama-server's ``json_schema`` / ``grammar`` fields as ``Engine.submit`` keywords, and the field's name."""
    if req.json_schema is not None:
        return {"json_schema": req.json_schema}, "json_schema"
    if req.grammar is not None:
        try:
            return {"grammar": gbnf_to_lark(req.grammar)}, "grammar"
        except ConstraintError as e:
            raise APIError(400, f"grammar: {e}", param="grammar", code="invalid_constraint") from None
    return {}, None
