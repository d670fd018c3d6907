"""Tool parameters that are not schemas (issue 14, defect 18): the scripted backend raised
AttributeError on `"properties": {"x": 5}`; validation refuses it, naming the property, and the
scripted backend makes up a reply for any schema without raising."""

from __future__ import annotations

import pytest

from runtime.asset.file import asset_from_dict, repair_asset_dict
from runtime.backends.scripted import example_for_schema
from runtime.problems import AssetError


def _tool_asset(parameters) -> dict:
    return {"version": 1, "start_node": "call", "nodes": [
        {"id": "call", "type": "ToolCall", "tools": [{"name": "open_gate", "parameters": parameters}]}]}


@pytest.mark.parametrize(("parameters", "field", "words"), [
    ({"type": "object", "properties": {"x": 5}}, "tools.0.parameters.properties.x", "not 5"),
    ({"type": "object", "properties": {"gate": {"type": "string"}, "why": "because"}},
     "tools.0.parameters.properties.why", "JSON Schema object"),
    ({"type": "object", "required": "gate"}, "tools.0.parameters", "'required' must be a list"),
])
def test_a_property_that_is_not_a_schema_is_refused_naming_it(parameters, field, words):
    with pytest.raises(AssetError) as info:
        asset_from_dict(_tool_asset(parameters))
    (problem,) = info.value.problems
    assert (problem.node_id, problem.field) == ("call", field)
    assert words in problem.message


def test_the_editor_opens_it_without_that_property():
    opened = repair_asset_dict(_tool_asset({"type": "object", "properties": {"x": 5, "y": {"type": "integer"}}}))
    assert opened.asset.node("call").tools[0].parameters == {"type": "object", "properties": {"y": {"type": "integer"}}}
    assert [p.field for p in opened.problems] == ["tools.0.parameters.properties.x"]


@pytest.mark.parametrize("schema", [
    5, None, [], {"properties": {"x": 5}}, {"properties": 3}, {"enum": []}, {"oneOf": []}, {"anyOf": "x"},
    {"oneOf": [5, {"properties": 3}]}, {"type": []}, {"type": 5}, {"type": [["object"]]},
    {"type": "object", "properties": {"a": {"oneOf": [{"const": 1}, 7]}}},
])
def test_the_scripted_backend_makes_up_a_value_for_any_schema(schema):
    example_for_schema(schema, ["open", "the", "gate"])  # raised AttributeError, IndexError or TypeError


def test_the_scripted_backend_still_fills_ordinary_schemas():
    schema = {"type": "object", "properties": {"gate": {"enum": ["north", "south"]}, "count": {"type": "integer"}}}
    assert example_for_schema(schema, ["open", "south", "gate"]) == {"gate": "south", "count": 3}
