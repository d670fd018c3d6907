"""Load, save, migrate: deterministic, atomic, and every bad input gives a clear error."""

import json
import os
import re

import pytest

from runtime.asset.file import ASSET_VERSION, dumps_asset, load_asset, parse_asset, save_asset
from runtime.problems import AssetError
from runtime.resources import examples_dir

EXAMPLES = sorted(p for p in examples_dir().glob("*.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_load_then_save_is_byte_identical(path, tmp_path):
    asset = load_asset(path)
    out = tmp_path / path.name
    save_asset(asset, out)
    # An example still at version 1 saves as the current version and otherwise unchanged: the
    # migration from 1 to 2 adds nothing (comments and bypassed nodes are written only when used).
    expected = re.sub(rb'^\{\n  "version": 1,', b'{\n  "version": %d,' % ASSET_VERSION, path.read_bytes())
    assert out.read_bytes() == expected
    save_asset(load_asset(out), out)
    assert out.read_bytes() == expected


def test_save_orders_keys_stably(tmp_path):
    asset = parse_asset(json.dumps({
        "nodes": [{"max_tokens": 10, "type": "Generate", "id": "g"}], "start_node": "g", "version": 1,
    }))
    text = dumps_asset(asset)
    node = json.loads(text)["nodes"][0]
    assert list(node)[:3] == ["id", "type", "title"]
    assert next(iter(json.loads(text))) == "version"
    assert dumps_asset(parse_asset(text)) == text


def test_save_is_atomic_and_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "a.json"
    target.write_text("old", encoding="utf-8")
    asset = parse_asset('{"version": 1}')

    def boom(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        save_asset(asset, target)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temp file left behind


def test_malformed_json_names_line_and_column():
    with pytest.raises(AssetError) as info:
        parse_asset('{"version": 1,\n  "nodes": [,]}', "x.json")
    (problem,) = info.value.problems
    assert (problem.line, problem.column) == (2, 13)
    assert str(problem).startswith("x.json:2:13: error: malformed JSON")


def test_field_errors_name_the_node_and_field():
    text = json.dumps({"version": 1, "nodes": [
        {"id": "reply", "type": "Generate", "context_size": 256, "max_tokens": 300},
        {"id": "ask", "type": "ClassifyIntent", "intents": [{"name": "a b"}]},
        {"id": "odd", "type": "Whisper"},
        {"id": "typo", "type": "Generate", "temprature": 1},
        {"id": "wrongtype", "type": "Generate", "max_tokens": "many"},
    ]})
    with pytest.raises(AssetError) as info:
        parse_asset(text, "a.json")
    where = [p.where for p in info.value.problems]
    assert "a.json:reply.max_tokens" in where
    assert "a.json:ask.intents.0.name" in where
    assert "a.json:odd" in where
    assert "a.json:typo.temprature" in where
    assert "a.json:wrongtype.max_tokens" in where
    messages = " ".join(p.message for p in info.value.problems)
    assert "unknown node type 'Whisper'" in messages


def test_unreadable_and_non_utf8_files(tmp_path):
    with pytest.raises(AssetError, match="cannot read"):
        load_asset(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"name": "\xff"}')
    with pytest.raises(AssetError, match="not UTF-8"):
        load_asset(bad)


def test_not_an_object():
    with pytest.raises(AssetError, match="JSON object"):
        parse_asset("[1, 2]")


def test_unversioned_drafts_are_migrated():
    old = {"agent": {"name": "Old", "start_node": "g"}, "nodes": [{"id": "g", "type": "Generate", "position": {"x": 5, "y": 6}}]}
    asset = parse_asset(json.dumps(old))
    assert asset.version == ASSET_VERSION and asset.name == "Old" and asset.node("g").position == (5.0, 6.0)


def test_newer_version_is_refused_clearly():
    with pytest.raises(AssetError, match="version 99"):
        parse_asset('{"version": 99}')


def test_metadata_round_trips():
    text = dumps_asset(parse_asset(json.dumps({"version": 1, "metadata": {"b": 1, "a": [1, {"z": None}]}})))
    assert json.loads(text)["metadata"] == {"b": 1, "a": [1, {"z": None}]}
