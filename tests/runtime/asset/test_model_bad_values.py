"""Asset files with values the model alone let through or choked on (issue 14, defects 4, 6 and 12):
each is a clear error naming the node and field, and the editor opens the rest to fix it."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from runtime.asset.file import (
    asset_from_dict,
    dumps_asset,
    load_asset,
    load_asset_for_editing,
    parse_asset,
    problems_from_validation,
    save_asset,
)
from runtime.asset.model import Asset, new_node
from runtime.cli import main as parley
from runtime.problems import AssetError


def _asset_json(**node_fields) -> dict:
    node = {"id": "reply", "type": "Generate", **node_fields}
    return {"version": 1, "start_node": "reply", "nodes": [node]}


def _where(exc: AssetError) -> set[tuple[str, str]]:
    return {(p.node_id, p.field) for p in exc.problems}


# --- defect 6: an integer of 5,000 digits ---------------------------------------------------------

HUGE = "9" * 5000


def test_a_5000_digit_integer_is_an_error_naming_node_and_field(tmp_path):
    """Defect 6: json.loads raised ValueError ("Exceeds the limit for integer string conversion")."""
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_asset_json(max_tokens=1)).replace('"max_tokens": 1', f'"max_tokens": {HUGE}'))
    with pytest.raises(AssetError) as info:
        load_asset(path)
    (problem,) = info.value.problems
    assert (problem.node_id, problem.field) == ("reply", "max_tokens")
    assert "5,000 digits" in problem.message and problem.file == str(path)


def test_a_5000_digit_integer_anywhere_is_found(tmp_path):
    text = json.dumps({**_asset_json(), "metadata": {"notes": [1, 2]}}).replace("[1, 2]", f"[1, -{HUGE}]")
    with pytest.raises(AssetError) as info:
        parse_asset(text, "a.json")
    assert _where(info.value) == {("", "metadata.notes.1")}


def test_the_editor_opens_a_file_with_a_5000_digit_integer_with_the_field_reset(tmp_path):
    """Defect 6: the editor exited on open."""
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_asset_json(seed=3, title="kept")).replace('"seed": 3', f'"seed": {HUGE}'))
    opened = load_asset_for_editing(path)
    assert opened.asset.node("reply").seed == 1 and opened.asset.node("reply").title == "kept"
    (problem,) = opened.problems
    assert (problem.node_id, problem.field) == ("reply", "seed") and "5,000 digits" in problem.message
    assert "default 1" in problem.message


def test_parley_validate_reports_a_5000_digit_integer_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_asset_json(max_tokens=1)).replace('"max_tokens": 1', f'"max_tokens": {HUGE}'))
    assert parley(["validate", str(path)]) == 1
    out = capsys.readouterr()
    assert f"{path}:reply.max_tokens: error: a number of 5,000 digits" in out.out
    assert "Traceback" not in out.err


def test_a_huge_python_integer_in_memory_is_refused_too():
    with pytest.raises(AssetError) as info:
        asset_from_dict(_asset_json(seed=10**5000))
    assert _where(info.value) == {("reply", "seed")}


# --- defect 12: NaN and infinite positions, true as a number ---------------------------------------


def test_a_position_of_nan_and_infinity_is_refused(tmp_path):
    """Defect 12: [NaN, 1e309] was accepted and the canvas raised on every repaint."""
    path = tmp_path / "nan.json"
    path.write_text('{"version": 1, "start_node": "reply", "nodes": '
                    '[{"id": "reply", "type": "Generate", "position": [NaN, 1e309]}]}')
    with pytest.raises(AssetError) as info:
        load_asset(path)
    assert _where(info.value) == {("reply", "position.0"), ("reply", "position.1")}
    assert all("finite" in p.message for p in info.value.problems)


def test_the_editor_opens_a_nan_position_at_the_default(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text('{"version": 1, "start_node": "reply", "nodes": '
                    '[{"id": "reply", "type": "Generate", "position": [NaN, 5]}]}')
    opened = load_asset_for_editing(path)
    assert opened.asset.node("reply").position == (0.0, 0.0)
    assert [(p.node_id, p.field) for p in opened.problems] == [("reply", "position.0")]
    assert all(math.isfinite(v) for v in opened.asset.node("reply").position)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("context_size", True, "whole number, not true"),
    ("temperature", False, "a number, not false"),
    ("max_tokens", "12", "not text"),
    ("temperature", float("inf"), "finite"),
])
def test_true_false_and_text_are_not_numbers(field, value, words):
    """Defect 12: `context_size: true` was accepted as 1."""
    with pytest.raises(AssetError) as info:
        asset_from_dict(_asset_json(**{field: value}))
    assert _where(info.value) == {("reply", field)}, "only the refused field, not what `true` as 1 would break"
    assert words in info.value.problems[0].message


def test_variables_may_be_true_or_false_but_not_nan():
    assert asset_from_dict({**_asset_json(), "variables": {"met": True, "gold": 3.5}}).variables["met"] is True
    with pytest.raises(AssetError) as info:
        asset_from_dict({**_asset_json(), "variables": {"gold": float("nan")}})
    assert _where(info.value) == {("", "variables.gold")}


def test_whole_floats_still_read_as_whole_numbers():
    assert asset_from_dict(_asset_json(context_size=2048.0)).node("reply").context_size == 2048


# --- defect 4: lone surrogates -------------------------------------------------------------------


def test_a_lone_surrogate_in_a_file_is_refused_naming_node_and_field(tmp_path):
    """Defect 4: "\\ud800" loaded, then failed tokenizing, diagnostics and saving."""
    path = tmp_path / "odd.json"
    path.write_text('{"version": 1, "start_node": "reply", "nodes": '
                    '[{"id": "reply", "type": "Generate", "system_prompt": "You are \\ud800 Mira"}]}')
    with pytest.raises(AssetError) as info:
        load_asset(path)
    (problem,) = info.value.problems
    assert (problem.node_id, problem.field) == ("reply", "system_prompt")
    assert "lone surrogate ('\\ud800' at character 8)" in problem.message


def test_a_lone_surrogate_in_a_key_or_node_id_is_named_safely(tmp_path, capsys):
    path = tmp_path / "odd.json"
    path.write_text('{"version": 1, "start_node": "a", "metadata": {"n\\udc00": 1}, "nodes": '
                    '[{"id": "a\\ud800", "type": "Generate"}]}')
    assert parley(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "metadata.'n\\udc00': error: the name holds a lone surrogate" in out
    assert "nodes[0].id: error: the text holds a lone surrogate" in out


def test_the_editor_opens_a_lone_surrogate_as_a_replacement_character(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text('{"version": 1, "start_node": "reply", "nodes": '
                    '[{"id": "reply", "type": "Generate", "system_prompt": "a\\ud800b"}]}')
    opened = load_asset_for_editing(path)
    assert opened.asset.node("reply").system_prompt == "a\ufffdb"
    assert [(p.node_id, p.field) for p in opened.problems] == [("reply", "system_prompt")]
    assert "unchanged until you save" in opened.problems[0].message


def test_an_asset_holding_a_lone_surrogate_saves_and_opens_again(tmp_path):
    """Defect 4: saving raised UnicodeEncodeError (an editor field or a recovery file can hold one)."""
    asset = Asset(start_node="reply", nodes=[new_node("Generate", "reply", system_prompt="odd \ud800 text")])
    path = tmp_path / "saved.json"
    save_asset(asset, path)
    assert load_asset(path).node("reply").system_prompt == "odd \ufffd text"
    assert "\ud800" not in dumps_asset(asset)


def test_the_examples_have_no_refused_values():
    from runtime.resources import examples_dir

    for path in examples_dir().glob("*.json"):
        assert load_asset_for_editing(path).problems == []



@pytest.mark.parametrize(("node_metadata", "asset_metadata", "where", "words"), [
    ({"notes": [1, {"w": math.inf}]}, {}, ("reply", "metadata"), "notes[1].w is inf, which JSON cannot hold"),
    ({}, {"": math.nan}, ("", "metadata"), "the value is nan, which JSON cannot hold"),
])
def test_metadata_holding_nan_or_infinity_is_refused_by_key(node_metadata, asset_metadata, where, words) -> None:
    """Found by the asset fuzzer: metadata {"": Infinity} loaded, and was then saved as null (lost)."""
    data = _asset_json(metadata=node_metadata)
    data["metadata"] = asset_metadata
    with pytest.raises(AssetError) as caught:
        parse_asset(json.dumps(data), "a.json")
    assert where in _where(caught.value) and words in str(caught.value)


def test_metadata_nested_past_what_an_asset_can_be_saved_with_is_refused() -> None:
    """Issue 39: metadata nested 300 deep validated and chatted, then `parley bundle` (and saving) failed
    with a traceback: pydantic writes no deeper than about 250 levels."""
    deep: dict = {}
    inner = deep
    for _ in range(300):
        inner["x"] = inner = {}
    data = _asset_json(metadata={"layout": [deep]})
    with pytest.raises(AssetError) as caught:
        parse_asset(json.dumps(data), "a.json")
    assert ("reply", "metadata") in _where(caught.value) and "nests deeper than 64 levels" in str(caught.value)
    inner = kept = {}
    for _ in range(60):  # what a designer's data needs, and more: kept, and saved as it is
        inner["x"] = inner = {}
    asset = parse_asset(json.dumps(_asset_json(metadata=kept)), "a.json")
    assert parse_asset(dumps_asset(asset), "a.json") == asset


@pytest.mark.parametrize(("where", "change", "words"), [
    ("node", {"position": [1e308, 0.0]}, "within 1e+08 of 0"),
    ("comment", {"position": [0.0, -1e308]}, "within 1e+08 of 0"),
    ("comment", {"size": [1e308, 100.0]}, "a size on the canvas is within 1e+08"),
])
def test_canvas_geometry_past_what_the_editor_can_draw_is_refused(where, change, words) -> None:
    """Issue 39: an asset with comment geometry of 1e308 validated, then crashed the editor (SIGSEGV)."""
    data = _asset_json()
    if where == "node":
        data["nodes"][0].update(change)
    else:
        data["comments"] = [{"id": "c", "kind": "note", **change}]
    with pytest.raises(AssetError) as caught:
        parse_asset(json.dumps(data), "a.json")
    assert words in str(caught.value)


def test_an_asset_holds_at_most_2000_comments() -> None:
    """Issue 39: 100,000 comments took over 3 minutes to open."""
    data = _asset_json()
    data["comments"] = [{"id": f"c{i}", "kind": "note", "position": [i * 10.0, 0.0]} for i in range(2001)]
    with pytest.raises(AssetError) as caught:
        parse_asset(json.dumps(data), "a.json")
    assert "comments" in str(caught.value) and "2000" in str(caught.value)
    data["comments"] = data["comments"][:2000]
    assert len(parse_asset(json.dumps(data), "a.json").comments) == 2000


def test_finite_metadata_round_trips() -> None:
    data = _asset_json(metadata={"big": 1e308, "list": [0.5, -2.0, {"deep": [1e-300]}]})
    asset = parse_asset(json.dumps(data), "a.json")
    assert parse_asset(dumps_asset(asset), "a.json") == asset


@pytest.mark.parametrize("field, value", [
    ("max_tokens", True), ("context_size", False), ("temperature", True), ("seed", False),
    ("temperature", math.nan), ("top_p", math.inf), ("position", (math.nan, 0.0)), ("position", (True, 1.0)),
])
def test_number_fields_refuse_bools_and_nan_when_built_in_memory(field, value):
    with pytest.raises(ValidationError) as caught:
        new_node("Generate", "g", **{field: value})
    (problem,) = problems_from_validation(caught.value, {"nodes": [{"id": "g", field: value}]}, "")
    assert problem.field == field and ("not true" in problem.message or "not false" in problem.message
                                       or "finite" in problem.message)


def test_assignment_refuses_bools_and_nan_too():
    node = new_node("Generate", "g")
    with pytest.raises(ValidationError):
        node.max_tokens = True
    with pytest.raises(ValidationError):
        node.temperature = math.nan
    with pytest.raises(ValidationError):
        Asset(version=True)
    node.temperature = 1  # an int is a number
    assert node.temperature == 1.0 and new_node("Generate", "h", position=[1, 2]).position == (1.0, 2.0)
