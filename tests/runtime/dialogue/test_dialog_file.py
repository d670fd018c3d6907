"""The dialog history file: round trips, clear errors, and export-then-import giving the same future prompts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.agent import Agent
from runtime.dialogue.dialog_file import (
    HistoryError,
    dumps_history,
    history_from_dict,
    load_history,
    parse_history,
    save_history,
    written_tree,
)
from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Summary, ToolExchange, Turn
from tests.runtime.conversations import asset, backend, player_lines, prompt_of, words


def sample() -> SavedDialog:
    turns = [
        Turn("hello", [Reply("npc", "hi there")]),
        Turn("stock?", [ToolExchange("lookup", "check_stock", {"item": "arrows"}, "240"), Reply("npc", "240 arrows")]),
        Turn("hmm", [Reply("think", "secret", replay=False), Reply("npc", "yes?")]),
    ]
    return SavedDialog(DialogHistory(turns, [Summary("They met.", 0, 1, "sum")]), {"npc": 1}, {"mood": "calm", "n": 2},
                       {"npc": "You are Mira."})


def test_round_trip_is_exact(tmp_path):
    saved = sample()
    path = tmp_path / "dialog.json"
    save_history(saved, path)
    loaded = load_history(path)
    # A history that kept no tree is saved as one branch (its earlier states reconstructed).
    assert loaded == replace(saved, tree=written_tree(saved))
    assert dumps_history(loaded) == path.read_text(encoding="utf-8")
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["format"] == "parley-dialog" and raw["version"] == 4 and raw["summaries"][0]["text"] == "They met."


def test_a_seeded_file_needs_only_turns():
    saved = parse_history('{"turns": [{"player": "hi", "entries": [{"node": "npc", "text": "hello"}]}]}')
    assert saved.history.turns == [Turn("hi", [Reply("npc", "hello", True)])]
    assert saved.windows == {} and saved.history.summaries == []


@pytest.mark.parametrize("text, where, message", [
    ("{", "<history>:1:2", "malformed JSON"),
    ("[]", "<history>", "a JSON object, not an array"),
    ('{"turns": [{"player": 3}]}', "turns.0.player", "string"),
    ('{"turns": [{"player": "a", "entries": [{"kind": "note"}]}]}', "turns.0.entries.0", "'reply' or 'tool'"),
    ('{"turns": [{"player": "a", "entries": [{"kind": "tool", "node": "x", "tool": "t"}]}]}',
     "turns.0.entries.0.result", "missing"),
    ('{"turns": [], "summaries": [{"text": "s", "covered_through": 0, "folded_turns": 1}]}',
     "summaries.0.covered_through", "0 turns lead to here"),
    ('{"turns": [{"player": "a"}], "windows": {"npc": 5}}', "windows.npc", "starts at turn 5, but 1 turn leads to here"),
    ('{"format": "something-else"}', "format", "not a Parley dialog history"),
    ('{"version": 9}', "version", "reads up to version 4"),
    ('{"turns": [], "tunrs": []}', "tunrs", "unknown key"),
    ('{"turns": [{"player": "a", "entries": [{"kind": "reply", "node": "bad id!", "text": "x"}]}]}',
     "turns.0.entries.0.node", "pattern"),
])
def test_bad_history_files_get_errors_naming_the_field(text, where, message):
    with pytest.raises(HistoryError) as info:
        parse_history(text)
    problem = info.value.problems[0]
    assert problem.severity == "error"
    assert message in problem.message or message in str(info.value)
    if where:
        assert where in str(problem)


def test_unreadable_files_are_clear_errors(tmp_path):
    with pytest.raises(HistoryError, match="cannot read the file"):
        load_history(tmp_path / "missing.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HistoryError, match="not UTF-8"):
        load_history(tmp_path / "bin.json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
entry = st.fixed_dictionaries({"kind": st.sampled_from(["reply", "tool", "x"]), "node": st.sampled_from(["npc", "", "1"]),
                               "text": json_values, "tool": json_values, "result": json_values, "replay": json_values})
history_like = st.fixed_dictionaries(
    {"turns": st.lists(st.fixed_dictionaries({"player": json_values, "entries": st.lists(entry, max_size=3)}), max_size=3)},
    optional={"summaries": st.lists(st.dictionaries(st.sampled_from(["text", "covered_through", "folded_turns", "node"]),
                                                    json_values), max_size=2),
              "windows": json_values, "variables": json_values, "format": json_values, "version": json_values},
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values, history_like))
def test_malformed_history_is_a_clear_error_never_another_exception(raw):
    try:
        saved = history_from_dict(raw, "fuzz.json")
    except HistoryError as exc:
        assert exc.problems and all(p.file == "fuzz.json" and p.message for p in exc.problems)
    else:
        # Whatever loads, dumps and loads again to the same thing.
        assert parse_history(dumps_history(saved)) == saved


@settings(max_examples=200)
@given(st.text(max_size=60))
def test_any_text_is_a_history_or_a_clear_error(text):
    try:
        parse_history(text)
    except HistoryError as exc:
        assert exc.problems


def test_deep_nesting_is_a_clear_error():
    with pytest.raises(HistoryError, match="nested too deeply|malformed"):
        parse_history("[" * 100_000 + "]" * 100_000)


def graph():
    return asset(
        ("Generate", "npc", {"context_size": 700, "max_tokens": 100, "system_prompt": "You are {{vars.x}} Mira",
                             "template": "Mood: {{vars.mood}}", "default_exit": "summarize"}),
        ("Summarize", "summarize", {"context_size": 1000, "max_summary_tokens": 60, "trigger_tokens": 300,
                                    "keep_recent_turns": 2}),
        variables={"mood": "calm"},
    )


def test_export_then_import_gives_the_same_future_prompts(tmp_path):
    lines = player_lines(45, seed=31, low=5, high=40)
    first = Agent(graph(), backend({"npc": 20, "summarize": 30}))
    for line in lines[:30]:
        first.run_turn(line)
    first.set_variable("mood", "wary")
    first.set_system_prompt("npc", "You are Mira, now suspicious.")
    assert first.history.summaries and first.windows["npc"] > 0
    save_history(first.export_dialog(), tmp_path / "dialog.json")

    second = Agent(graph(), backend({"npc": 20, "summarize": 30}))
    second.import_dialog(load_history(tmp_path / "dialog.json"))
    for line in lines[30:]:
        a = first.run_turn(line)
        b = second.run_turn(line)
        for node_id in ("npc", "summarize"):
            assert prompt_of(a.diagnostics, node_id) == prompt_of(b.diagnostics, node_id)
        assert a.diagnostics.nodes[0].trim == b.diagnostics.nodes[0].trim
    assert first.windows == second.windows
    assert first.history == second.history


def test_import_refuses_system_prompts_for_nodes_the_asset_lacks():
    agent = Agent(graph(), backend())
    saved = SavedDialog(system_prompts={"ghost": "boo"})
    with pytest.raises(HistoryError, match="system_prompts.ghost"):
        agent.import_dialog(saved, "d.json")
    assert agent.system_prompts == {}


def test_seed_edit_and_truncate_history():
    agent = Agent(graph(), backend({"npc": 3, "summarize": 5}))
    agent.seed_history([Turn("first", [Reply("npc", "one")]), Turn("second", [Reply("npc", "two")])])
    result = agent.run_turn("third")
    contents = [m[1] for m in prompt_of(result.diagnostics, "npc")]
    assert contents[1:5] == ["first", "one", "second", "two"]
    agent.edit_turn(0, player="FIRST (edited)")
    contents = [m[1] for m in prompt_of(agent.run_turn("fourth").diagnostics, "npc")]
    assert contents[1] == "FIRST (edited)"
    agent.truncate_history(1)
    contents = [m[1] for m in prompt_of(agent.run_turn("fifth").diagnostics, "npc")]
    assert contents[1:3] == ["FIRST (edited)", "one"] and contents[-1].endswith("fifth")
    assert len(agent.history.turns) == 2


def test_failed_import_changes_nothing():
    agent = Agent(graph(), backend({"npc": 3}))
    agent.run_turn("hello")
    before = agent.export_dialog()
    with pytest.raises(HistoryError):
        agent.import_dialog(SavedDialog(system_prompts={"summarize": "x"}))  # not a generating node
    assert agent.export_dialog() == before
    assert words(2, "a") == "a0 a1"
