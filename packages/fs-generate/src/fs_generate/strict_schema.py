"""JSON schemas made strict the way OpenAI's strict mode and vLLM's / SGLang's grammar engines read them: an object
schema that lists its ``properties`` admits no other keys unless it says so.

Why: JSON Schema's default (``additionalProperties`` absent = any extra key allowed) lets a small model append junk
keys until its token budget ends, so the client gets nothing it can parse - langchain's ``bind_tools``, instructor's
JSON_SCHEMA mode and ``llm --schema`` all send schemas without the keyword. Contract: ``close_objects(schema)``
returns a copy in which every object schema with ``properties`` and none of ``additionalProperties``,
``patternProperties``, ``unevaluatedProperties`` gets ``"additionalProperties": false``; a schema that sets one of
them keeps its meaning, and an object without ``properties`` (``{"type": "object"}``, JSON mode) stays open.

    close_objects({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}}})
    -> {"type": "object", "properties": {"a": {... "additionalProperties": false}}, "additionalProperties": false}
"""

import copy
from typing import Any

OPEN_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
MAP_KEYWORDS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema
LIST_KEYWORDS = ("anyOf", "oneOf", "allOf", "prefixItems")  # [schema, ...]
ONE_KEYWORDS = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def close_objects(schema: Any) -> Any:
    """A strict copy of ``schema`` (see the module's contract); anything that is not a dict is returned as is."""
    out = copy.deepcopy(schema)
    stack = [out]
    while stack:  # iterative: a schema's depth is bounded by the caller, not by Python's stack
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("properties"), dict) and not any(k in node for k in OPEN_KEYWORDS):
            node["additionalProperties"] = False
        for k in MAP_KEYWORDS:
            if isinstance(node.get(k), dict):
                stack.extend(node[k].values())
        for k in LIST_KEYWORDS:
            if isinstance(node.get(k), list):
                stack.extend(node[k])
        for k in ONE_KEYWORDS:
            value = node.get(k)
            stack.extend(value if isinstance(value, list) else [value])
    return out
