"""History files that the format used to let through, and text that is not text (lone surrogates)."""

from __future__ import annotations

import json

import pytest

from runtime.dialogue.dialog_file import (
    HistoryError,
    dumps_history,
    load_history,
    parse_history,
    save_history,
)
from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Turn
from runtime.dialogue.tree import AgentState, ConversationTree


@pytest.mark.parametrize("raw, where, message", [
    ({"variables": {"a.b": 1}}, "h.json:variables.'a.b'", "not a valid name"),
    ({"variables": {"": 1}}, "h.json:variables.''", "not a valid name"),
    ({"variables": {"x\n": 1}}, "h.json:variables.'x\\n'", "not a valid name"),
    ({"windows": {"a\x00b": 0}}, "h.json:windows.'a\\x00b'", "a node id is"),
    ({"system_prompts": {"n.x": "hi"}}, "h.json:system_prompts.'n.x'", "a node id is"),
    ({"version": -1}, "h.json:version", "a history's version is 1, 2, 3"),
    ({"version": 0}, "h.json:version", "a history's version is 1, 2, 3"),
    ({"branches": {"start": {"variables": {"x\n": 1}}}}, "h.json:branches.start.variables.'x\\n'", "not a valid name"),
])
def test_names_and_versions_the_format_refuses(raw, where, message):
    with pytest.raises(HistoryError) as info:
        parse_history(json.dumps(raw), "h.json")
    problem = info.value.problems[0]
    assert str(problem).startswith(where + ": error:"), str(problem)
    assert message in problem.message
    assert "\n" not in str(problem) and "\x00" not in str(problem), "names are escaped, never printed raw"


def test_a_lone_surrogate_in_a_history_file_is_refused_naming_the_field(tmp_path):
    """Defect 4 (reading): the loaded text later failed tokenizing and saving. It is refused, by field."""
    path = tmp_path / "h.json"
    path.write_text('{"turns": [{"player": "ok"}, {"player": "bad \\ud800 line"}], '
                    '"variables": {"mood": "\\udfff"}}', encoding="utf-8")
    with pytest.raises(HistoryError) as info:
        load_history(path)
    where = [str(p).split(": error:")[0] for p in info.value.problems]
    assert where == [f"{path}:turns.1.player", f"{path}:variables.mood"]
    assert "lone surrogate ('\\ud800' at character 4)" in info.value.problems[0].message


def test_a_lone_surrogate_in_the_dialog_is_written_as_a_replacement_character(tmp_path):
    """Defect 4 (writing): an asset's "\\ud800" escape can reach a reply; saving raised UnicodeEncodeError.
    It is written as U+FFFD, so the file is UTF-8 and loads again."""
    saved = SavedDialog(DialogHistory([Turn("hi \ud800", [Reply("npc", "yes \udc80!")])]), variables={"v": "\ud83d"})
    path = tmp_path / "h.json"
    save_history(saved, path)
    loaded = load_history(path)
    assert loaded.history.turns == [Turn("hi \ufffd", [Reply("npc", "yes \ufffd!")])]
    assert loaded.variables == {"v": "\ufffd"}
    dumps_history(saved).encode("utf-8")


def test_windows_for_unknown_nodes_are_found_in_the_state_and_every_branch():
    from runtime.dialogue.dialog_file import unknown_node_problems

    tree = ConversationTree(AgentState(windows={"gone": 0}))
    tree.add(None, Turn("hi"), AgentState(windows={"npc": 0, "also\ngone": 1}))
    saved = SavedDialog(DialogHistory([Turn("hi")]), windows={"npc": 1, "ghost": 1}, tree=tree)
    problems = unknown_node_problems(saved, {"npc"}, "h.json")
    assert [f"{p.file}:{p.field}" for p in problems] == [
        "h.json:windows.ghost", "h.json:start.windows.gone",
        "h.json:turns[id 0].state.windows.'also\\ngone'"]
    assert unknown_node_problems(saved, {"npc", "ghost", "gone", "also\ngone"}) == []
