"""Copy and paste as JSON in the asset's node format."""

from __future__ import annotations

import json

import pytest

from runtime.asset.clipboard import nodes_from_text, nodes_to_text, prepare_paste
from runtime.asset.file import asset_to_dict, load_asset
from runtime.asset.model import new_node
from runtime.problems import AssetError
from runtime.resources import examples_dir


def test_round_trip_in_the_file_format():
    nodes = [new_node("Generate", "a", default_exit="b"), new_node("Summarize", "b")]
    text = nodes_to_text(nodes)
    asset = asset_to_dict(load_asset(examples_dir() / "chat.json"))
    assert list(json.loads(text)["nodes"][0])[:2] == ["id", "type"]
    assert list(json.loads(text)["nodes"][0])[:3] == list(asset["nodes"][0])[:3]
    assert nodes_from_text(text) == nodes


def test_whole_asset_list_or_single_node_paste():
    example = (examples_dir() / "intent_router.json").read_text()
    assert len(nodes_from_text(example)) == 4
    single = json.dumps(json.loads(example)["nodes"][0])
    assert [n.id for n in nodes_from_text(single)] == ["classify"]
    assert len(nodes_from_text(json.dumps(json.loads(example)["nodes"]))) == 4


def test_bad_text_names_node_and_field():
    with pytest.raises(AssetError) as err:
        nodes_from_text('[{"id": "x", "type": "Generate", "max_tokens": 0}]')
    (problem,) = err.value.problems
    assert (problem.node_id, problem.field) == ("x", "max_tokens")
    with pytest.raises(AssetError):
        nodes_from_text("not json")
    with pytest.raises(AssetError) as err:
        nodes_from_text('[{"id": "y", "type": "Nope"}]')
    assert "unknown node type" in err.value.problems[0].message


def test_paste_gets_free_ids_and_keeps_its_inner_exits():
    nodes = [new_node("Generate", "a", default_exit="b"), new_node("Generate", "b", default_exit="outside"),
             new_node("Generate", "c", default_exit="gone")]
    pasted = prepare_paste(nodes, {"a", "b", "outside"})
    assert [n.id for n in pasted] == ["a_2", "b_2", "c"]
    assert pasted[0].default_exit == "b_2"
    assert pasted[1].default_exit == "outside", "an exit to a node that exists stays"
    assert pasted[2].default_exit == "", "an exit to a node that does not exist ends the turn"
    assert pasted[0].position == (40.0, 40.0)
