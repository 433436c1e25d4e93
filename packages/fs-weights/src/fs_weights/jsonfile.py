"""Reading the JSON files a checkpoint carries (config, generation config, shard index, headers).

Python's ``json`` recurses once per nesting level, so a hostile ``[[[[...]]]]`` raises ``RecursionError`` from deep
inside the parser, and a merely deep one (a few hundred levels) parses and then breaks whatever walks it later.
Every file fs reads goes through ``parse_json``: UTF-8 checked (byte offset named), syntax checked (line and column
named), nesting bounded by ``MAX_DEPTH``, and every failure is the caller's error class naming the file.
"""

import json
from pathlib import Path
from typing import Any

from .errors import WeightsError
from .regular_file import read_regular

MAX_DEPTH = 64  # real config / index / tokenizer files nest at most 6 levels


def parse_json(
    data: bytes | str, source: str, error: type[Exception] = WeightsError, *, unique_keys: bool = False
) -> Any:
    """The value encoded in ``data`` (the contents of ``source``), or ``error`` naming what is wrong.
    ``unique_keys``: an object with a key twice is refused (``json`` keeps the last silently) - for records whose
    every field is signed or hashed, where two readers must not see two different values."""
    if isinstance(data, bytes):
        data = decode_utf8(data, source, error)
    hook = None
    if unique_keys:

        def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for k, v in pairs:
                if k in out:
                    raise error(f"{source}: key {k!r} appears twice in one object")
                out[k] = v
            return out

    try:
        value = json.loads(data, object_pairs_hook=hook)
    except RecursionError:
        raise error(f"{source}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        raise error(f"{source}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    check_depth(value, source, error)
    return value


def decode_utf8(data: bytes, source: str, error: type[Exception] = WeightsError) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{source}: not valid UTF-8 (byte offset {e.start})") from None


def read_json(path: str | Path, error: type[Exception] = WeightsError) -> Any:
    """``parse_json`` of the file at ``path``; a missing or unreadable file is ``error`` too."""
    return parse_json(read_regular(path, error), str(path), error)


def check_depth(value: Any, source: str, error: type[Exception] = WeightsError, limit: int = MAX_DEPTH) -> None:
    """Iterative (no recursion of its own): containers only, so a flat 150k-entry vocabulary costs one pass. A bare
    scalar (a file holding just ``0``) has no depth to check; its caller refuses its type."""
    stack = [(value, 1)] if type(value) in (dict, list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise error(f"{source}: JSON nested deeper than {limit} levels")
        children = node.values() if type(node) is dict else node
        stack.extend((c, depth + 1) for c in children if type(c) in (dict, list))
