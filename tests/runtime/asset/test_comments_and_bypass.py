"""Asset format version 2: comments (backdrops and notes) and bypassed nodes, in files and at run time."""

from __future__ import annotations

import json

import pytest

from runtime.agent import Agent
from runtime.asset.clipboard import comments_in_text, nodes_from_text, nodes_to_text, prepare_comment_paste
from runtime.asset.file import (
    ASSET_VERSION,
    asset_from_dict,
    dumps_asset,
    load_asset,
    parse_asset,
    repair_asset_dict,
)
from runtime.asset.model import Asset, Comment, new_node
from runtime.asset.validation import validate_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.cli import main
from runtime.events import NodeFinished, NodeStarted
from runtime.problems import AssetError
from runtime.resources import examples_dir
from runtime.suites.file import load_suite
from runtime.suites.run import run_suites
from tests.runtime.conversations import MODEL, asset, node_diag, prompt_of


def two_replies(first_bypassed: bool = True) -> Asset:
    graph = asset(
        ("Generate", "first", {"system_prompt": "first node", "context_size": 512, "max_tokens": 16,
                               "default_exit": "second", "bypassed": first_bypassed}),
        ("Generate", "second", {"system_prompt": "second node", "context_size": 512, "max_tokens": 16}),
    )
    return graph


# --- the node -----------------------------------------------------------------------------------


def test_bypass_port_is_the_default_exit_else_the_fallback_else_the_first_port():
    assert new_node("Generate", "g").bypass_port() == "default_exit"
    classify = new_node("ClassifyIntent", "c", intents=[{"name": "greet", "exit": "g"}], fallback_exit="h")
    assert list(classify.exits()) == ["intent:greet", "fallback_exit"]
    assert classify.bypass_port() == "fallback_exit"
    assert new_node("Generate", "g").bypassed is False


# --- at run time ---------------------------------------------------------------------------------


def test_a_bypassed_node_is_not_run_and_the_turn_passes_along_its_default_exit():
    backend = ScriptedBackend()
    events = []
    result = Agent(two_replies(), backend).run_turn("hello there", on_event=events.append)
    assert result.path == ["first", "second"]
    assert [key for key, _ in backend.calls] == ["second"]  # the bypassed node's backend is never called
    first = node_diag(result.diagnostics, "first")
    assert first.bypassed is True
    assert (first.exit, first.next_node, first.output) == ("default_exit", "second", "")
    assert first.input.prompt == [] and first.tokens.generated == 0
    assert node_diag(result.diagnostics, "second").bypassed is False
    assert result.reply == node_diag(result.diagnostics, "second").output != ""
    started = [e.node for e in events if isinstance(e, NodeStarted)]
    finished = [(e.node, e.exit, e.next_node) for e in events if isinstance(e, NodeFinished)]
    assert started == ["first", "second"]
    assert finished[0] == ("first", "default_exit", "second")


def test_a_bypassed_node_that_runs_normally_when_the_bypass_is_lifted():
    backend = ScriptedBackend()
    result = Agent(two_replies(first_bypassed=False), backend).run_turn("hello there")
    assert [key for key, _ in backend.calls] == ["first", "second"]
    assert node_diag(result.diagnostics, "first").bypassed is False


def test_a_bypassed_classifier_takes_its_fallback_exit():
    graph = asset(
        ("ClassifyIntent", "classify", {"intents": [{"name": "greet", "exit": "hello"}],
                                        "fallback_exit": "chat", "bypassed": True}),
        ("Generate", "hello", {"system_prompt": "greet back", "context_size": 512, "max_tokens": 16}),
        ("Generate", "chat", {"system_prompt": "small talk", "context_size": 512, "max_tokens": 16}),
    )
    backend = ScriptedBackend()
    result = Agent(graph, backend).run_turn("greet you kindly")
    assert result.path == ["classify", "chat"]
    assert [key for key, _ in backend.calls] == ["chat"]
    assert node_diag(result.diagnostics, "classify").exit == "fallback_exit"
    assert result.slots.get("intent", "") == ""


def test_a_bypassed_last_node_ends_the_turn_and_the_reply_is_the_last_run_nodes():
    graph = two_replies(first_bypassed=False)
    graph = graph.model_copy(update={"nodes": [graph.nodes[0], graph.nodes[1].model_copy(update={"bypassed": True})]})
    result = Agent(graph, ScriptedBackend()).run_turn("hello there")
    assert result.path == ["first", "second"]
    assert node_diag(result.diagnostics, "second").next_node == ""
    assert result.reply == node_diag(result.diagnostics, "first").output != ""


def test_comments_never_reach_a_prompt():
    plain = two_replies(first_bypassed=False)
    commented = plain.model_copy(update={"comments": [
        Comment(id="why", kind="note", title="Why", text="SECRET designer note about the guard", position=(0, 0)),
        Comment(id="group", kind="backdrop", title="Replies", color=(200, 10, 10), position=(-50, -50),
                size=(900, 500)),
    ]})
    one = Agent(plain, ScriptedBackend()).run_turn("hello there").diagnostics
    two = Agent(commented, ScriptedBackend()).run_turn("hello there").diagnostics
    for node in ("first", "second"):
        assert prompt_of(one, node) == prompt_of(two, node)
    assert "SECRET" not in two.model_dump_json()


# --- in files ------------------------------------------------------------------------------------


def v1_file(**extra) -> dict:
    return {"version": 1, "name": "Old", "default_model": MODEL, "start_node": "a",
            "nodes": [{"id": "a", "type": "Generate", "system_prompt": "hi", "default_exit": ""}], **extra}


def test_a_version_1_file_migrates_to_version_2_unchanged_otherwise():
    assert ASSET_VERSION == 2
    loaded = asset_from_dict(v1_file())
    assert loaded.version == 2 and loaded.comments == [] and loaded.nodes[0].bypassed is False
    saved = json.loads(dumps_asset(loaded))
    assert saved["version"] == 2
    assert "comments" not in saved and "bypassed" not in saved["nodes"][0]  # written only when used


def test_a_version_1_file_cannot_hold_the_new_fields_through_the_migration_only():
    # The migration adds nothing: a version 1 file with comments is read as version 2 would read it.
    loaded = asset_from_dict(v1_file(comments=[{"id": "n", "kind": "note", "text": "kept"}]))
    assert loaded.comments[0].text == "kept"


@pytest.mark.parametrize("name", sorted(p.stem for p in examples_dir().glob("*.json")))
def test_every_example_still_loads(name):
    path = examples_dir() / f"{name}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    loaded = load_asset(path)
    assert loaded.version == ASSET_VERSION
    assert raw.get("version", 0) <= ASSET_VERSION


def test_comments_and_bypass_round_trip_byte_for_byte_in_a_stable_key_order():
    graph = two_replies().model_copy(update={"comments": [
        Comment(id="group", kind="backdrop", title="Replies", color=(10, 20, 30), position=(-10.5, 4.0),
                size=(320.0, 200.0), metadata={"z": 1}),
        Comment(id="note", kind="note", text="line one\nline two", position=(5, 6)),
    ]})
    text = dumps_asset(graph)
    raw = json.loads(text)
    assert list(raw)[-3:] == ["metadata", "nodes", "comments"]
    assert list(raw["nodes"][0])[:4] == ["id", "type", "title", "bypassed"]
    assert raw["nodes"][0]["bypassed"] is True and "bypassed" not in raw["nodes"][1]
    assert list(raw["comments"][0]) == ["id", "kind", "title", "text", "color", "position", "size", "metadata"]
    assert raw["comments"][0]["color"] == [10, 20, 30]
    again = parse_asset(text)
    assert again == graph
    assert dumps_asset(again) == text


@pytest.mark.parametrize("comment, field, words", [
    ({"id": "c", "kind": "note", "color": [0, 0, 256]}, "comments.1.color", "0-255"),
    ({"id": "c", "kind": "note", "color": [0, True, 0]}, "comments.1.color.1", "not true"),
    ({"id": "c", "kind": "note", "color": [0, 0]}, "comments.1.color.2", "missing"),
    ({"id": "c", "kind": "note", "size": [0, 10]}, "comments.1.size", "above 0"),
    ({"id": "c", "kind": "note", "position": [0, float("nan")]}, "comments.1.position.1", "finite"),
    ({"id": "c", "kind": "sticker"}, "comments.1.kind", "'backdrop' or 'note'"),
    ({"id": "c d", "kind": "note"}, "comments.1.id", ""),
    ({"kind": "note"}, "comments.1.id", "missing"),
    ({"id": "ok", "kind": "note"}, "comments.1.id", "unique"),
    ({"id": "c", "kind": "note", "colour": [1, 2, 3]}, "comments.1.colour", "unknown key"),
])
def test_bad_comment_values_are_located_errors(comment, field, words):
    raw = v1_file(version=2, comments=[{"id": "ok", "kind": "note"}, comment])
    with pytest.raises(AssetError) as caught:
        asset_from_dict(raw, "npc.json")
    problems = caught.value.problems
    assert [p.field for p in problems] == [field], problems
    assert problems[0].file == "npc.json" and words in problems[0].message
    assert str(problems[0]).startswith(f"npc.json:{field}: error:")


def test_a_bad_bypassed_value_is_located_at_the_node():
    raw = v1_file(version=2)
    raw["nodes"][0]["bypassed"] = "sometimes"
    with pytest.raises(AssetError) as caught:
        asset_from_dict(raw)
    assert [(p.node_id, p.field) for p in caught.value.problems] == [("a", "bypassed")]


def test_opening_for_editing_repairs_bad_comments_and_keeps_their_text():
    raw = v1_file(version=2, comments=[
        {"id": "a", "kind": "note", "text": "first"},
        {"id": "a", "kind": "note", "text": "same id", "color": [1, 2, 300]},
        {"kind": "sticker", "text": "no id, bad kind"},
        "not a comment",
    ])
    repaired = repair_asset_dict(raw, "npc.json")
    comments = repaired.asset.comments
    assert [c.text for c in comments] == ["first", "same id", "no id, bad kind"]
    assert len({c.id for c in comments}) == 3
    assert comments[1].color == (60, 70, 90) and comments[2].kind == "note"
    fields = {p.field for p in repaired.problems}
    assert {"comments.1.id", "comments.1.color", "comments.2.id", "comments.2.kind", "comments.3"} <= fields
    assert all(p.severity == "error" and "unchanged until you save" in p.message for p in repaired.problems)


# --- validation ----------------------------------------------------------------------------------


def test_validation_warns_about_a_bypassed_node_at_its_bypassed_field():
    problems = validate_asset(two_replies())
    bypass = [p for p in problems if p.field == "bypassed"]
    assert [(p.severity, p.node_id, p.message) for p in bypass] == [
        ("warning", "first", "bypassed: turns pass along its next exit without running it")]
    assert not [p for p in validate_asset(two_replies(first_bypassed=False)) if p.field == "bypassed"]
    classify = asset(("ClassifyIntent", "c", {"intents": [{"name": "greet", "exit": ""}], "bypassed": True}))
    (warning,) = [p for p in validate_asset(classify) if p.field == "bypassed"]
    assert warning.message == "bypassed: turns pass along its fallback exit without running it"


def test_a_bypassed_node_whose_way_on_leads_back_to_it_is_an_error():
    """Issue 39: a bypassed Classify Intent whose fallback is itself validated, then every turn failed."""
    own = asset(("ClassifyIntent", "c", {"intents": [{"name": "greet", "exit": ""}], "fallback_exit": "c",
                                         "bypassed": True}))
    (loop,) = [p for p in validate_asset(own) if p.field == "bypassed"]
    assert (loop.severity, loop.node_id) == ("error", "c")
    assert "leads back to it through bypassed nodes only (c -> c)" in loop.message
    two = asset(("Generate", "a", {"default_exit": "b", "bypassed": True}),
                ("Generate", "b", {"default_exit": "a", "bypassed": True}))
    assert {(p.severity, p.node_id) for p in validate_asset(two) if p.field == "bypassed"} == {
        ("error", "a"), ("error", "b")}
    # a loop through a node that runs is a graph's own business (max_steps_per_turn ends it)
    runs = asset(("Generate", "a", {"default_exit": "b", "bypassed": True}), ("Generate", "b", {"default_exit": "a"}))
    assert [p.severity for p in validate_asset(runs) if p.field == "bypassed"] == ["warning"]


# --- suites: coverage and reports ----------------------------------------------------------------

SUITE = """\
asset: npc.json
cases:
  - name: talks
    turns:
      - say: "hello there"
        expect:
          visits: [first, second]
          exits: {first: default_exit}
"""


def test_suites_report_a_bypassed_node_as_bypassed_not_as_run(tmp_path, capsys):
    (tmp_path / "npc.json").write_text(dumps_asset(two_replies()), encoding="utf-8")
    (tmp_path / "npc.suite.yaml").write_text(SUITE, encoding="utf-8")
    report = run_suites([load_suite(tmp_path / "npc.suite.yaml")], ScriptedBackend)
    (result,) = report.results
    assert result.passed, result.failures
    assert result.visits == {"second": 1} and result.bypassed == {"first": 1}
    assert result.exits[("first", "default_exit")] == 1  # the exit was taken
    (coverage,) = report.coverage.values()
    assert coverage.only_bypassed == ["first"] and coverage.never_visited == []
    # 2 nodes and 2 exits; 'first' did not run, so it is not covered
    assert coverage.percent == 75.0
    checks = [c.message for t in result.turns for c in t.checks]
    assert "visits first (took first (bypassed) \u2192 second)" in checks
    assert "first takes default_exit (took default_exit, bypassed)" in checks

    out_json = tmp_path / "out.json"
    assert main(["test", str(tmp_path / "npc.suite.yaml"), "--backend", "scripted", "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    assert "bypassed: first: turns passed it 1 time without running it" in printed
    data = json.loads(out_json.read_text(encoding="utf-8"))["coverage"][str(tmp_path / "npc.json")]
    assert data["bypassed"] == {"first": 1} and data["nodes"] == {"first": 0, "second": 1}


# --- the clipboard -------------------------------------------------------------------------------


def test_copy_and_paste_carry_bypassed_nodes_and_comments():
    graph = two_replies()
    note = Comment(id="note", kind="note", text="why", position=(10, 20))
    text = nodes_to_text(graph.nodes, [note])
    raw = json.loads(text)
    assert raw["nodes"][0]["bypassed"] is True and "bypassed" not in raw["nodes"][1]
    assert list(raw["comments"][0]) == ["id", "kind", "title", "text", "color", "position", "size", "metadata"]
    assert [n.bypassed for n in nodes_from_text(text)] == [True, False]
    assert comments_in_text(text) == [note]
    assert "comments" not in json.loads(nodes_to_text(graph.nodes))
    assert comments_in_text(nodes_to_text(graph.nodes)) == [] and comments_in_text("not json") == []
    # a whole asset's text pastes its comments too
    assert comments_in_text(dumps_asset(graph.model_copy(update={"comments": [note]}))) == [note]
    pasted = prepare_comment_paste([note, note], {"note"}, (5.0, 5.0))
    assert [(c.id, c.position) for c in pasted] == [("note_2", (15.0, 25.0)), ("note_3", (15.0, 25.0))]
    assert pasted[0].text == "why"


def test_bad_pasted_comments_are_located_errors():
    text = json.dumps({"nodes": [], "comments": [
        {"id": "a", "kind": "note"}, {"id": "b", "kind": "note", "color": [1, True, 3]},
        {"id": "c", "kind": "sticker"}]})
    with pytest.raises(AssetError) as caught:
        comments_in_text(text)
    assert [p.field for p in caught.value.problems] == ["comments.1.color.1"]
    with pytest.raises(AssetError) as caught:
        comments_in_text(text.replace("true", "2"))
    assert [(p.field, p.file) for p in caught.value.problems] == [("comments.2.kind", "clipboard")]


# --- on the real model ---------------------------------------------------------------------------


@pytest.mark.model
def test_a_bypassed_generate_on_the_sample_model_leaves_only_the_second_nodes_prompt(sample_model):
    from runtime.backends.llama import LlamaBackend

    graph = asset(
        ("Generate", "first", {"system_prompt": "You are a grumpy troll. Answer in one word.", "context_size": 512,
                               "max_tokens": 16, "default_exit": "second", "bypassed": True}),
        ("Generate", "second", {"system_prompt": "You are a friendly innkeeper. Answer briefly.", "context_size": 512,
                                "max_tokens": 24}),
    ).model_copy(update={"default_model": str(sample_model), "comments": [
        Comment(id="note", kind="note", text="The troll is bypassed while we tune the innkeeper.")]})
    backend = LlamaBackend(str(sample_model.parent))
    try:
        result = Agent(graph, backend).run_turn("Good evening! Is there a room for the night?")
    finally:
        backend.close()
    assert result.path == ["first", "second"]
    first, second = node_diag(result.diagnostics, "first"), node_diag(result.diagnostics, "second")
    assert first.bypassed and first.input.prompt == [] and first.output == "" and first.tokens.prompt == 0
    assert first.exit == "default_exit" and first.next_node == "second"
    assert not second.bypassed and second.tokens.prompt > 0 and second.tokens.generated > 0
    prompts = [m.content for n in result.diagnostics.nodes for m in n.input.prompt]
    assert any("innkeeper" in p for p in prompts)
    assert not any("troll" in p for p in prompts), "the bypassed node's prompt never reaches the model"
    assert result.reply == second.output and result.reply.strip()
