"""Chat templates rendered in the Jinja environment ``transformers`` uses, so the text is byte-identical.

Same sandbox, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, the JSON-faithful ``tojson`` filter,
``raise_exception``, ``strftime_now``, ``dict`` and a ``namespace`` that refuses underscore names; the
special tokens (``eos_token``, ...) are visible to the template, and message keys whose value is None are
dropped first, as transformers does.
"""

import json
import time
import traceback
from collections.abc import Iterator, Sequence
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


MAX_RENDER_CHARS = 16 << 20  # a rendered prompt beyond this is a runaway template, not a conversation
MAX_RANGE = 10_000  # range() items, and items built by `*`; real templates loop over messages and tools
MAX_STEPS = 1_000_000  # range() iterations, calls and attribute reads per render
RENDER_SECONDS = 10.0


class _Budget:
    """What one render may spend; every sandbox hook charges it, so nested loops and recursion end in an error."""

    def __init__(self) -> None:
        self.steps, self.deadline = 0, time.monotonic() + RENDER_SECONDS

    def charge(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > MAX_STEPS or (self.steps % 1024 == 0 and time.monotonic() > self.deadline):
            raise jinja2.exceptions.SecurityError(
                f"chat template exceeded its budget ({MAX_STEPS} steps or {RENDER_SECONDS:.0f} s)"
            )


class _LimitedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox plus resource limits: bounded ranges, bounded `*`/`**`, a step budget."""

    intercepted_binops = frozenset(["*", "**"])
    budget = _Budget()

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.budget.charge()
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
            raise jinja2.exceptions.SecurityError(f"chat template: exponent {right} is too large")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_RANGE:
                    raise jinja2.exceptions.SecurityError(f"chat template: repetition to {len(seq) * n} items")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self.budget.charge()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.budget.charge()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.budget.charge()
        return super().getitem(obj, argument)


def _range(env: _LimitedSandbox) -> Any:
    def limited(*args: int) -> Iterator[int]:
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise jinja2.exceptions.SecurityError(f"chat template: range of {len(r)} items (limit {MAX_RANGE})")
        for i in r:
            env.budget.charge()
            yield i

    return limited


def environment() -> "_LimitedSandbox":
    env = _LimitedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols])
    env.globals["range"] = _range(env)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env


class ChatTemplate:
    def __init__(self, source: str, special_tokens: dict[str, str]):
        self.env = environment()
        try:
            self.template = self.env.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TokenizerError(f"chat_template does not compile: {e.message} (line {e.lineno})") from None
        except (RecursionError, MemoryError, ValueError, TypeError) as e:
            raise TokenizerError(f"chat_template does not compile: {type(e).__name__}: {e}") from None
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
        self.env.budget = _Budget()
        out, size = [], 0
        try:
            for chunk in self.template.generate(
                messages=chat,
                tools=list(tools) if tools is not None else None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **{**self.special_tokens, **kwargs},
            ):
                size += len(chunk)
                if size > MAX_RENDER_CHARS:
                    raise jinja2.exceptions.SecurityError(f"chat template output exceeds {MAX_RENDER_CHARS} characters")
                out.append(chunk)
        except jinja2.exceptions.SecurityError as e:
            raise TokenizerError(f"chat template stopped{_line(e)}: {e}") from None
        except jinja2.TemplateError as e:
            raise TokenizerError(f"chat template rejected the messages{_line(e)}: {e.message or e}") from None
        except Exception as e:  # the template is code from the model's files: any failure is its error, not ours
            raise TokenizerError(f"chat template failed{_line(e)}: {type(e).__name__}: {e}") from None
        return "".join(out)


def _line(e: BaseException) -> str:
    """`` at line N`` of the template, from jinja's rewritten traceback (frames named ``<template>``)."""
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == "<template>"]
    return f" at line {lines[-1]}" if lines else ""


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
