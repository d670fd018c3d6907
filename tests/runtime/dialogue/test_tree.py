"""Rewind, regenerate, edit and replay: the conversation tree (runtime/dialogue/tree.py) and the
agent's state at every turn of it, on the test backend's exact arithmetic."""

from __future__ import annotations

import json

import pytest

from runtime.agent import Agent
from runtime.dialogue.dialog_file import HistoryError, dumps_history, parse_history
from runtime.dialogue.history import Reply
from runtime.prompting.templates import TemplateError
from tests.runtime.conversations import backend
from tests.runtime.test_behaviour_unchanged import _without_timings, every_node_type_asset, lines

SIZES = {"think": 25, "reply": 45, "fold": 30}


def agent(version: dict[str, str] | None = None) -> Agent:
    """The test agent; ``version["tag"]``, when given, starts every reply of the player-facing node
    (so a regenerated turn can come out other than before, as a changed graph or seed would make it)."""
    scripted = backend(SIZES)
    if version is not None:
        plain = scripted._reply
        scripted._reply = lambda key, request: (version["tag"] if key == "reply" else "") + plain(key, request)
    return Agent(every_node_type_asset(), scripted)


def prompts_and_state(result) -> list:
    """What must not depend on how the agent got here: each node's prompt, trim, summary and output.
    (KV cache reuse does: a rewound agent's caches hold the later turns.)"""
    out = []
    for node in _without_timings(result.diagnostics.model_dump(mode="json"))["nodes"]:
        node.pop("tokens")
        out.append(node)
    return out


def test_rewinding_gives_the_prompts_of_a_conversation_that_never_had_the_later_turns() -> None:
    said = lines()
    rewound = agent()
    for line in said:
        rewound.run_turn(line)
    assert len(rewound.history.summaries) > 2 and any(rewound.windows.values())
    rewound.rewind(4)
    fresh = agent()
    for line in said[:4]:
        fresh.run_turn(line)
    assert rewound.history.turns == fresh.history.turns
    assert rewound.history.summaries == fresh.history.summaries
    assert rewound.windows == fresh.windows and rewound.variables == fresh.variables
    for line in ["a new line ask_tool", "and another one", said[7], said[8]]:  # past a trim and a fold
        assert prompts_and_state(rewound.run_turn(line)) == prompts_and_state(fresh.run_turn(line))


def test_regenerate_keeps_alternatives_and_the_old_branch() -> None:
    version = {"tag": ""}
    a = agent(version)
    said = lines()[:5]
    ids = [a.run_turn(line).turn_id for line in said]
    a.asset.node("reply").system_prompt = "Be terse."  # the designer fixed the prompt
    a._nodes["reply"] = a.asset.node("reply")
    version["tag"] = "Tersely: "  # and the reply changed with it
    again = a.regenerate(2)
    assert again.turn == 2 and len(a.history.turns) == 3, "the turns after it stay on the old branch"
    assert a.tree.alternatives(again.turn_id) == [ids[2], again.turn_id]
    assert a.history.turns[2].player == said[2]
    # browse back to the first alternative: the old branch, all five turns, exactly as it was
    a.select_turn(ids[2])
    assert [t.player for t in a.history.turns] == said
    assert a.tree.current == ids[4]
    a.select_turn(again.turn_id)
    assert a.tree.current == again.turn_id and len(a.history.turns) == 3


def test_edited_player_lines_and_replies_are_marked_and_replay_from_there() -> None:
    a = agent()
    said = lines()[:4]
    for line in said:
        a.run_turn(line)
    recorded = a.recorded_lines(1)
    assert [line for line, _ in recorded] == said[1:]
    edited = a.edit_player_line(1, "a different line")
    assert a.tree.nodes[edited.turn_id].edited and a.history.turns[1].player == "a different line"
    # replay the recorded lines after it with the (possibly changed) graph
    results = [a.run_turn(line) for line, _ in recorded[1:]]
    assert [r.turn for r in results] == [2, 3]
    # the test backend's replies depend on the line alone, so they come out the same: unchanged replies,
    # from prompts that now hold the edited line
    assert [r.reply for r in results] == [old for _, old in recorded[1:]]
    reply_prompt = next(n for n in results[0].diagnostics.nodes if n.node == "reply").input.prompt
    assert any("a different line" in m.content for m in reply_prompt)
    turn_id = a.edit_reply(0, [Reply("reply", "My own words.")])
    assert a.tree.nodes[turn_id].edited and len(a.history.turns) == 1
    assert a.history.turns[0].entries == [Reply("reply", "My own words.")]


def test_a_failed_regeneration_leaves_the_conversation_as_it_was() -> None:
    a = agent()
    for line in lines()[:3]:
        a.run_turn(line)
    before = a.export_dialog()
    with pytest.raises(IndexError):
        a.rewind(7)
    a.asset.node("reply").template = "{{#broken}"
    a._nodes["reply"] = a.asset.node("reply")
    with pytest.raises(TemplateError):
        a.regenerate(1)
    assert a.export_dialog() == before


def test_the_tree_survives_export_and_import_and_older_files_still_load() -> None:
    version = {"tag": ""}
    a = agent(version)
    for line in lines()[:4]:
        a.run_turn(line)
    version["tag"] = "again: "
    a.regenerate(1)
    a.rewind(1)
    text = dumps_history(a.export_dialog())
    loaded = parse_history(text, "h.json")
    assert loaded.tree == a.tree
    b = agent()
    b.import_dialog(loaded)
    assert b.history.turns == a.history.turns and len(b.tree) == 5
    b.select_turn(b.tree.alternatives(b.tree.path(b.tree.leaf_from(None))[1])[0])
    assert len(b.history.turns) == 4, "the first branch, all four turns"

    old = {"version": 1, "turns": [{"player": t.player, "entries": [{"node": e.node, "text": e.text, "replay": e.replay}
                                                                     for e in t.entries]} for t in a.history.turns]}
    v1 = parse_history(json.dumps(old), "old.json")
    assert len(v1.tree) == 1 and v1.history.turns == a.history.turns, "a file without a tree loads as one branch"
    assert parse_history(dumps_history(v1)) == v1
    c = agent()
    c.import_dialog(v1)
    assert len(c.tree) == 1 and c.history.turns == a.history.turns
    c.rewind(0)
    assert c.history.turns == []


def test_bad_branches_are_refused_naming_the_field() -> None:
    a = agent()
    for line in lines()[:2]:
        a.run_turn(line)
    raw = json.loads(dumps_history(a.export_dialog()))
    raw["turns"][1]["parent"] = 7
    with pytest.raises(HistoryError) as caught:
        parse_history(json.dumps(raw), "bad.json")
    assert "bad.json:turns.1.parent" in str(caught.value) and "not a turn listed before it" in str(caught.value)


def test_seeds_are_fixed_by_default_and_can_be_rerolled() -> None:
    from runtime.asset.model import new_node

    assert new_node("GenerateAndSpeak", "r").seed >= 0
    a = agent()
    assert a.seed_for(5) == 5 and a.seed_for(-1) == -1
    a.reroll_seeds(1000)
    assert a.seed_for(5) == 1005 and a.export_dialog().seed_salt == 1000


def test_a_graph_that_lost_a_node_continues_the_conversation_with_keep_nodes() -> None:
    """The editor rebuilds the agent when the graph changes and imports the old one's dialog: a
    node deleted meanwhile has window starts in every state of the tree, which import refuses."""
    from runtime.dialogue.tree import keep_nodes
    from tests.runtime.conversations import asset

    both = asset(("Generate", "npc", {"context_size": 512, "max_tokens": 16, "system_prompt": "hi",
                                      "default_exit": "other"}),
                 ("Generate", "other", {"context_size": 512, "max_tokens": 16, "system_prompt": "hi"}))
    one = asset(("Generate", "npc", {"context_size": 512, "max_tokens": 16, "system_prompt": "hi"}))
    old = Agent(both, backend())
    old.run_turn("hello")
    old.run_turn("again")
    old.set_system_prompt("other", "changed")
    saved = old.export_dialog()
    with pytest.raises(HistoryError, match=r"turns\[id 0\].state.windows.other"):
        Agent(one, backend()).import_dialog(saved)
    new = Agent(one, backend())
    new.import_dialog(keep_nodes(saved, set(one.node_ids())), foreign=False)  # its own conversation, as Session does
    assert new.history.turns == old.history.turns and set(new.windows) == {"npc"} and new.system_prompts == {}
    assert all(set(n.after.windows) == {"npc"} for n in new.tree.nodes.values())
    assert set(saved.tree.nodes[0].after.windows) == {"npc", "other"}, "the old dialog is unchanged"
    new.rewind(1)
    assert new.run_turn("once more").reply


def test_a_replayed_or_regenerated_turn_that_comes_out_the_same_is_the_same_alternative() -> None:
    """Friction 19: regenerate a turn, replay the later turns on the new branch, then replay the whole
    conversation again: a turn that says and writes what an alternative already did (and leaves the
    same state) is that alternative, so the "n/m" counts and the tree hold no two that read the same."""
    version = {"tag": ""}
    a = agent(version)
    said = lines()[:5]
    ids = [a.run_turn(line).turn_id for line in said]
    assert not any(a.tree.nodes[i].edited for i in ids)

    version["tag"] = "v2 "  # the graph writes other replies now
    later = a.recorded_lines(3)
    again = a.regenerate(2)
    assert not again.repeated and a.tree.alternatives(again.turn_id) == [ids[2], again.turn_id]
    # the later turns of the old branch, replayed on the new one: new turns there, once each
    replayed = [a.run_turn(line) for line, _old in later]
    assert [r.repeated for r in replayed] == [False, False]
    assert [t.player for t in a.history.turns] == said and len(a.tree) == 8
    assert a.tree.alternatives(replayed[0].turn_id) == [replayed[0].turn_id], "turn 4 has one alternative here"

    # the same replay again: every turn comes out as before, so no alternative is added
    a.rewind(3)
    twice = [a.run_turn(line) for line, _old in later]
    assert [r.repeated for r in twice] == [True, True] and [r.turn_id for r in twice] == [r.turn_id for r in replayed]
    assert len(a.tree) == 8

    # regenerating turn 3 with the first graph again gives turn 3's first reply: that alternative (1/2), whose
    # later turns are still under it
    version["tag"] = ""
    first = a.regenerate(2)
    assert first.repeated and first.turn_id == ids[2] and len(a.tree.alternatives(ids[2])) == 2
    assert a.tree.children[ids[2]] == [ids[3]]
    a.rewind(0)
    assert [a.run_turn(line).turn_id for line in said] == ids and len(a.tree) == 8

    # an edited reply that says what an alternative says is that alternative too
    a.rewind(3)
    assert a.edit_reply(2, list(a.tree.nodes[ids[2]].turn.entries)) == ids[2]
    assert len(a.tree) == 8


def test_a_turn_that_reads_the_same_but_leaves_another_state_is_another_alternative() -> None:
    """Only the same state after it makes a turn the same: variables changed before it lead elsewhere."""
    a = agent()
    for line in lines()[:2]:
        a.run_turn(line)
    a.rewind(1)
    a.set_variable("mood", "grim")
    again = a.run_turn(lines()[1])
    assert not again.repeated and len(a.tree.alternatives(again.turn_id)) == 2


def test_branch_steps_tell_turns_off_the_path_apart() -> None:
    a = agent()
    said = lines()[:3]
    ids = [a.run_turn(line).turn_id for line in said]
    other = a.edit_player_line(1, "another line").turn_id
    deeper = a.run_turn("and then").turn_id
    a.select_turn(ids[1])
    assert a.tree.path() == ids
    assert a.tree.branch_steps(deeper) == [(1, 2, 2)]
    assert a.tree.branch_steps(other) == [(1, 2, 2)]
    assert a.tree.branch_steps(ids[2]) == []
