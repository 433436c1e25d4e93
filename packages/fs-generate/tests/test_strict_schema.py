"""Objects that list their properties admit no other keys unless the schema says so (OpenAI's strict mode, vLLM's
and SGLang's grammar engines): the rewrite itself, and a random model that can no longer pad its answer with junk
keys under a schema that never mentions ``additionalProperties``."""

import json

import pytest

from fs_generate import generate, load
from fs_generate.strict_schema import close_objects


def test_every_object_that_lists_properties_is_closed_and_nothing_else_changes():
    inner = {"type": "object", "properties": {"b": {"type": "integer"}}}
    schema = {
        "type": "object",
        "properties": {"a": inner, "list": {"type": "array", "items": inner}},
        "$defs": {"d": {"properties": {"c": {}}}},
        "anyOf": [inner, {"type": "object"}],
    }
    out = close_objects(schema)
    assert out["additionalProperties"] is False and out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["list"]["items"]["additionalProperties"] is False
    assert out["$defs"]["d"]["additionalProperties"] is False and out["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in out["anyOf"][1]  # no properties listed: JSON mode's object stays open
    assert "additionalProperties" not in schema and "additionalProperties" not in inner  # the caller's is untouched
    said = {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}}
    assert close_objects(said) == said  # a schema that says it keeps its meaning
    assert close_objects({"type": "object", "properties": {}, "patternProperties": {"^x": {}}})["patternProperties"]


@pytest.fixture(scope="module")
def demo():
    return load(None)


def test_a_schema_that_does_not_say_additional_properties_gets_only_its_keys(demo):
    model, tok = demo
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}}}
    for seed in range(4):  # open objects: every one of these ran to the budget adding junk keys (measured)
        out = generate(model, tok, "Describe a city as JSON.", max_new_tokens=64, temperature=1.0, seed=seed,
                       json_schema=schema)  # fmt: skip
        assert out.finish_reason != "length" and set(json.loads(out.text)) <= {"city", "n"}, out.text
