"""Clipboard text with repeated ids or a type that is not a name."""

from __future__ import annotations

import pytest

from runtime.asset.clipboard import nodes_from_text, prepare_paste
from runtime.asset.model import new_node
from runtime.problems import AssetError


def test_nodes_sharing_an_id_get_distinct_free_ids():
    nodes = [new_node("Generate", "a", default_exit="b"), new_node("Generate", "a", default_exit="a"),
             new_node("Generate", "b")]
    pasted = prepare_paste(nodes, {"a"})
    assert [n.id for n in pasted] == ["a_2", "a_3", "b"]
    assert [n.default_exit for n in pasted] == ["b", "a_2", ""], "exits to the shared id go to the first copy"
    assert [n.id for n in prepare_paste(nodes, set())] == ["a", "a_2", "b"]


@pytest.mark.parametrize("text, where, message", [
    ('[{"id": "a", "type": ["Generate"]}]', "clipboard:a.type", "a node's type is a name, not [\"Generate\"]"),
    ('[{"id": "a", "type": 3}]', "clipboard:a.type", "not 3"),
    ('[{"id": "a"}]', "clipboard:a.type", "a node needs a 'type'"),
    ('[{"id": ["x"], "type": "Nope"}]', "clipboard:nodes[0].type", "unknown node type 'Nope'"),
    ('[{"id": "x\\u0000y", "type": "Nope"}]', "clipboard:'x\\x00y'.type", "unknown node type"),
])
def test_a_type_that_is_not_a_name_is_a_clear_error(text, where, message):
    with pytest.raises(AssetError) as info:
        nodes_from_text(text)
    problem = info.value.problems[0]
    assert str(problem).startswith(where + ": error:"), str(problem)
    assert message in problem.message


@pytest.mark.parametrize("value, says", [
    ("true", "not true"), ('"5"', "not text"), ("9" * 5000, "5,000 digits"), ('"\\ud800"', "lone surrogate"),
])
def test_paste_refuses_the_values_a_file_is_refused_for(value, says):
    field = "title" if "ud800" in value else "max_tokens"
    with pytest.raises(AssetError) as caught:
        nodes_from_text(f'{{"type": "Generate", "id": "g", "{field}": {value}}}')
    (problem,) = caught.value.problems
    assert problem.node_id == "g" and problem.field == field and says in problem.message


def test_paste_of_broken_json_names_line_and_column():
    with pytest.raises(AssetError) as caught:
        nodes_from_text('{"nodes": [')
    assert caught.value.problems[0].message.startswith("not node JSON") and caught.value.problems[0].line == 1
