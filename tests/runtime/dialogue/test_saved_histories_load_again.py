"""What Parley saves, it reads again (issue 20): each turn written once, never a file over the read
limit, every state of the tree checked, load then save the identity, the branch last followed kept,
and a file another process wrote since is not replaced."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.dialogue import dialog_file
from runtime.dialogue.dialog_file import (
    HistoryConflict,
    HistoryError,
    dumps_history,
    file_stamp,
    load_history,
    parse_history,
    save_history,
)
from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Summary, ToolExchange, Turn
from runtime.dialogue.tree import AgentState, ConversationTree


def branching() -> SavedDialog:
    """Two alternatives of turn 1, the older one followed last; a summary; windows."""
    s = Summary("They met.", 0, 1, "sum")
    tree = ConversationTree(AgentState(variables={"mood": "calm"}))
    a = tree.add(None, Turn("hello", [Reply("npc", "hi")]), AgentState((), {"npc": 0}, {"mood": "calm"}))
    b = tree.add(a, Turn("stock?", [Reply("npc", "UNIQUE-REPLY-TEXT")]), AgentState((s,), {"npc": 1}, {"mood": "calm"}))
    c = tree.add(a, Turn("stock?", [Reply("npc", "other")]), AgentState((s,), {"npc": 1}, {"mood": "wary"}))
    tree.select(c)
    tree.select(b)  # back to the older alternative: the one followed last from turn a
    return SavedDialog(DialogHistory(tree.turns(), [s]), {"npc": 1}, {"mood": "calm"}, {}, 0, tree)


def v2_text(saved: SavedDialog) -> dict:
    """A version 2 file of ``saved``, as the previous Parley wrote it (no followed branches)."""
    raw = json.loads(dumps_history(saved))
    states, records, turns = {None: raw["start"]}, {}, []
    for t in raw["turns"]:
        states[t["id"]] = state = {**states[t.get("parent")], **t.get("state", {})}
        records[t["id"]] = t
        turns.append({"id": t["id"], "parent": t.get("parent"), "player": t["player"], "entries": t["entries"],
                      "edited": t.get("edited", False), "exact": t.get("exact", True), "state": state})
    current = states[raw["current"]]
    return {"format": "parley-dialog", "version": 2, "seed_salt": raw["seed_salt"],
            "turns": [{"player": records[i]["player"], "entries": records[i]["entries"]} for i in saved.tree.path()],
            "summaries": [raw["summaries"][i] for i in current["summaries"]], "windows": current["windows"],
            "variables": raw["variables"], "system_prompts": raw["system_prompts"],
            "branches": {"start": raw["start"], "summaries": raw["summaries"], "turns": turns, "current": raw["current"]}}


# --- item 5: each turn once, and never a file the reader would refuse ------------------------


def test_each_turn_is_written_once_and_compactly():
    text = dumps_history(branching())
    assert text.count("UNIQUE-REPLY-TEXT") == 1, "the current branch is not written twice"
    assert "\n  " not in text, "not pretty-printed: one turn per line"
    assert len([line for line in text.splitlines() if line.startswith('{"id":')]) == 3, "one line per turn"


def test_a_history_over_the_read_limit_is_not_written_and_the_old_file_is_kept(tmp_path, monkeypatch):
    path = tmp_path / "h.json"
    save_history(branching(), path)
    before = path.read_bytes()
    limit = len(before) + 10
    monkeypatch.setattr(dialog_file, "MAX_HISTORY_BYTES", limit)
    bigger = branching()
    bigger.variables["notes"] = "x" * 100
    with pytest.raises(HistoryError) as info:
        save_history(bigger, path)
    assert "not written" in str(info.value) and "cannot be read back" in str(info.value) and str(path) in str(info.value)
    assert path.read_bytes() == before, "the only copy is kept"
    assert not [p for p in tmp_path.iterdir() if p.name != "h.json"], "no temporary file left"


def test_the_writer_and_the_reader_share_one_limit():
    from runtime.files.reading import MAX_INPUT_BYTES

    assert dialog_file.MAX_HISTORY_BYTES == MAX_INPUT_BYTES


def test_a_grown_version_1_history_stays_under_its_size_plus_the_new_turn(tmp_path):
    """The reported case in small: a version 1 file, one turn more, saved: about its size, not twice."""
    turns = [{"player": f"line {i}", "entries": [{"node": "npc", "text": "w " * 200}]} for i in range(200)]
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps({"version": 1, "turns": turns}, indent=2), encoding="utf-8")
    saved = load_history(v1)
    saved.tree.select(saved.tree.add(saved.tree.current, Turn("one more", [Reply("npc", "yes")]),
                                     saved.tree.state_after(saved.tree.current)))
    out = tmp_path / "out.json"
    save_history(saved, out)
    assert out.stat().st_size < v1.stat().st_size


# --- item 12 and 13: every state of the tree is checked -----------------------------------------


def test_a_start_state_naming_a_summary_past_the_end_is_a_located_error():
    raw = v2_text(branching())
    raw["branches"]["start"]["summaries"] = [5]
    with pytest.raises(HistoryError) as info:
        parse_history(json.dumps(raw), "h.json")
    assert "h.json:branches.start.summaries.0" in str(info.value) and "names summary 5" in str(info.value)
    v3 = json.loads(dumps_history(branching()))
    v3["start"]["summaries"] = [5]
    with pytest.raises(HistoryError, match=r"h.json:start.summaries.0: error: names summary 5"):
        parse_history(json.dumps(v3), "h.json")


def test_a_branch_state_covering_turns_that_are_not_there_is_refused():
    raw = json.loads(json.dumps(v2_text(branching())))  # its own copy of the summaries
    raw["branches"]["summaries"][0]["covered_through"] = 10**9
    with pytest.raises(HistoryError) as info:
        parse_history(json.dumps(raw), "h.json")
    assert "branches.summaries.0.covered_through" in str(info.value) and "1000000000" in str(info.value)
    v3 = json.loads(dumps_history(branching()))
    v3["summaries"][0]["covered_through"] = 10**9
    with pytest.raises(HistoryError, match=r"h.json:summaries.0.covered_through \(in turns.1.state.summaries\)"):
        parse_history(json.dumps(v3), "h.json")
    v3 = json.loads(dumps_history(branching()))
    v3["turns"][0]["state"] = {"windows": {"npc": 7}}
    with pytest.raises(HistoryError, match=r"h.json:turns.0.state.windows.npc: error: the window starts at turn 7"):
        parse_history(json.dumps(v3), "h.json")


def test_parents_with_larger_ids_than_their_children_save_and_load_again():
    raw = {"format": "parley-dialog", "version": 2, "turns": [{"player": "a"}, {"player": "b"}],
           "branches": {"turns": [{"id": 9, "player": "a"}, {"id": 2, "parent": 9, "player": "b"}], "current": 2}}
    saved = parse_history(json.dumps(raw), "h.json")
    again = parse_history(dumps_history(saved), "h.json")
    assert again == saved and [t.player for t in again.history.turns] == ["a", "b"]


def test_version_2_top_level_that_differs_from_the_current_branch_is_refused():
    raw = v2_text(branching())
    raw["turns"][1]["player"] = "something else"
    with pytest.raises(HistoryError, match=r"h.json:turns.1: error: turn 1 differs from the current branch's"):
        parse_history(json.dumps(raw), "h.json")
    raw = v2_text(branching())
    raw["windows"] = {"npc": 0}
    with pytest.raises(HistoryError, match=r"h.json:windows.npc: error: the window start 0 differs"):
        parse_history(json.dumps(raw), "h.json")
    assert parse_history(json.dumps(v2_text(branching()))) == branching(), "a version 2 file still reads"


def test_a_followed_turn_that_is_not_a_child_is_refused():
    v3 = json.loads(dumps_history(branching()))
    v3["turns"][1]["followed"] = 0
    with pytest.raises(HistoryError, match=r"turns.1.followed: error: 0 is not a turn after turn 1"):
        parse_history(json.dumps(v3), "h.json")


# --- the branch last followed --------------------------------------------------------------------


def test_the_branch_last_followed_is_kept():
    saved = branching()
    saved.tree.select(None)  # rewound to the start: browsing from there follows what was followed
    loaded = parse_history(dumps_history(saved))
    assert loaded.tree.followed == saved.tree.followed
    first = loaded.tree.children[None][0]
    assert loaded.tree.leaf_from(first) == 1, "the older alternative, followed last; not the newest (2)"


# --- two writers -------------------------------------------------------------------------------


def test_a_file_written_since_it_was_read_is_not_replaced(tmp_path):
    path = tmp_path / "h.json"
    save_history(branching(), path)
    stamp = file_stamp(path)
    other = SavedDialog(DialogHistory([Turn("the other chat")]))
    save_history(other, path)  # another process
    theirs = path.read_bytes()
    with pytest.raises(HistoryConflict, match="changed since this conversation read it"):
        save_history(branching(), path, expected=stamp)
    assert path.read_bytes() == theirs
    save_history(branching(), path, expected=file_stamp(path))  # unchanged since: replaced
    assert load_history(path) == branching()
    missing = tmp_path / "new.json"
    save_history(branching(), missing, expected=None)  # "there was no file": fine while there is none
    with pytest.raises(HistoryConflict):
        save_history(branching(), missing, expected=None)


# --- load then save is the identity ------------------------------------------------------------

names = st.sampled_from(["npc", "sum", "tool_1"])
texts = st.text(max_size=6)
values = st.one_of(st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), texts)
entries = st.lists(st.one_of(
    st.builds(Reply, names, texts, st.booleans()),
    st.builds(ToolExchange, names, st.sampled_from(["look", "buy"]), st.dictionaries(texts, values, max_size=2),
              texts, st.booleans())), max_size=2)


@st.composite
def trees(draw) -> SavedDialog:
    """A random tree: turns with random parents and ids (a parent's id may be larger), states whose
    summaries and windows fit the turns before them, a current turn and followed branches."""
    summaries = [Summary(draw(texts), i, 1, draw(st.sampled_from(["", "sum"]))) for i in range(3)]
    start = AgentState((), {}, draw(st.dictionaries(st.sampled_from(["mood", "gold"]), values, max_size=2)))
    tree = ConversationTree(start)
    depth: dict[int, int] = {}
    ids = draw(st.permutations(range(12)))
    for turn_id in ids[:draw(st.integers(0, 8))]:
        parent = draw(st.sampled_from([None, *depth]))
        count = 1 if parent is None else depth[parent] + 2
        folded = tuple(s for s in summaries if s.covered_through < count)[:draw(st.integers(0, 3))]
        state = AgentState(folded, draw(st.dictionaries(names, st.integers(0, count), max_size=2)),
                           draw(st.dictionaries(st.sampled_from(["mood", "gold"]), values, max_size=2)),
                           draw(st.dictionaries(names, texts, max_size=1)))
        tree.add(parent, Turn(draw(texts), draw(entries)), state, draw(st.booleans()), draw(st.booleans()),
                 turn_id=turn_id)
        depth[turn_id] = count - 1
    for turn_id in draw(st.lists(st.sampled_from([None, *depth]), max_size=3)) if depth else []:
        tree.select(turn_id)
    state = tree.state_after(tree.current)
    return SavedDialog(DialogHistory(tree.turns(), list(state.summaries)), dict(state.windows),
                       draw(st.dictionaries(st.sampled_from(["mood", "gold"]), values, max_size=2)),
                       draw(st.dictionaries(names, texts, max_size=1)), draw(st.integers(0, 3)), tree)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_any_tree_saves_and_loads_back_the_same(saved):
    text = dumps_history(saved)
    loaded = parse_history(text)
    assert loaded == saved
    assert dumps_history(loaded) == text
    v2 = parse_history(json.dumps(v2_text(saved)))
    assert (v2.history, v2.windows, v2.variables, v2.tree.nodes, v2.tree.children, v2.tree.current) == (
        saved.history, saved.windows, saved.variables, saved.tree.nodes, saved.tree.children, saved.tree.current
    ), "and so does the version 2 file it would have been"
