"""Opening an asset the model refuses parts of: the rest opens, and each repair is a problem."""

import json

import pytest

from runtime.asset.file import dumps_asset, load_asset, load_asset_for_editing, repair_asset_dict
from runtime.problems import AssetError
from runtime.resources import examples_dir


@pytest.mark.parametrize("path", sorted(examples_dir().glob("*.json")), ids=lambda p: p.name)
def test_valid_files_open_unchanged(path):
    opened = load_asset_for_editing(path)
    assert opened.problems == []
    assert dumps_asset(opened.asset) == dumps_asset(load_asset(path))


def test_each_refused_part_is_replaced_by_the_smallest_repair():
    raw = {"version": 1, "start_node": "reply", "nodes": [
        {"id": "reply", "type": "GenerateAndSpeak", "max_tokens": 600, "context_size": 256, "max_token": 3},
        {"id": "route", "type": "ClassifyIntent", "intents": [{"name": "hi", "exit": "reply"}, {"exit": "reply"}]},
        {"id": "later", "type": "Generate", "context_size": 128, "temperature": 9.0},
        {"id": "extra", "type": "Remember"},
    ]}
    original = json.dumps(raw)
    opened = repair_asset_dict(raw, "a.json")
    assert json.dumps(raw) == original, "the caller's data is not changed"
    asset = opened.asset
    assert asset.node("reply").max_tokens == 255 and asset.node("reply").context_size == 256
    assert [i.name for i in asset.node("route").intents] == ["hi"]
    assert asset.node("later").max_tokens == 127, "a default over the limit is lowered too"
    assert asset.node("later").temperature == 0.7
    assert asset.node_ids() == ["reply", "route", "later"]
    where = {(p.node_id, p.field) for p in opened.problems}
    assert where == {("reply", "max_tokens"), ("reply", "max_token"), ("route", "intents.1.name"),
                     ("later", "max_tokens"), ("later", "temperature"), ("extra", "")}
    assert all(p.severity == "error" and p.file == "a.json" for p in opened.problems)
    by_field = {p.field: p.message for p in opened.problems if p.node_id == "reply"}
    assert "600" in by_field["max_tokens"] and "255" in by_field["max_tokens"]
    assert "Opened without node 'extra'" in next(p.message for p in opened.problems if p.node_id == "extra")


@pytest.mark.parametrize("text", ["{not json", "[]", '{"version": 99}'])
def test_what_cannot_be_read_as_an_asset_is_still_refused(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(AssetError):
        load_asset_for_editing(path)
