"""Chat templates rendered in the Jinja environment ``transformers`` uses, so the text is byte-identical.

Same sandbox, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, the JSON-faithful ``tojson`` filter,
``raise_exception``, ``strftime_now``, ``dict`` and a ``namespace`` that refuses underscore names; the
special tokens (``eos_token``, ...) are visible to the template, and message keys whose value is None are
dropped first, as transformers does.
"""

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import TokenizerError

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _Dict:
    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot store underscore attribute {name!r}")


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (transformers uses it for masks)."""

    tags = {"generation"}  # noqa: RUF012 - jinja reads this class attribute

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return str(caller())


def environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env


class ChatTemplate:
    def __init__(self, source: str, special_tokens: dict[str, str]):
        try:
            self.template = environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TokenizerError(f"chat_template does not compile: {e.message} (line {e.lineno})") from None
        self.special_tokens = special_tokens

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        add_generation_prompt: bool = False,
        tools: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        chat = [_normalize(i, m) for i, m in enumerate(_check_list(messages))]
        if tools is not None and not all(isinstance(t, dict) for t in tools):
            raise TokenizerError("tools must be a list of JSON-schema dicts")
        try:
            return self.template.render(
                messages=chat,
                tools=list(tools) if tools is not None else None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **{**self.special_tokens, **kwargs},
            )
        except jinja2.TemplateError as e:
            raise TokenizerError(f"chat template rejected the messages: {e.message or e}") from None
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            raise TokenizerError(f"chat template failed on these messages: {type(e).__name__}: {e}") from None


def _check_list(messages: Any) -> list[Any]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TokenizerError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    return list(messages)


def _normalize(i: int, m: Any) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise TokenizerError(f"message {i} is a {type(m).__name__}, expected a dict with 'role' and 'content'")
    m = {k: v for k, v in m.items() if v is not None}
    if not isinstance(m.get("role"), str):
        raise TokenizerError(f"message {i} has no 'role' (str): {m!r}")
    if "content" not in m and "tool_calls" not in m:
        raise TokenizerError(f"message {i} ({m['role']}) has no 'content'")
    reasoning = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
    if reasoning is not None:
        m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
    return m
