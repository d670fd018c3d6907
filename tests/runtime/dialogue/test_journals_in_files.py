"""Decode journals and seed salts in history files (version 4): every turn's state keeps each node's
journal as what changed in the turn, they load back equal, and bad ones are refused by field."""

from __future__ import annotations

import json

import pytest

from runtime.agent import Agent
from runtime.dialogue.dialog_file import HISTORY_VERSION, HistoryError, dumps_history, history_from_dict
from runtime.dialogue.history import Turn
from runtime.dialogue.tree import AgentState, ConversationTree
from runtime.models.journal import EMPTY, Chunk, DecodeJournal
from tests.runtime.conversations import asset, backend


def journal(*chunks: tuple) -> DecodeJournal:
    return DecodeJournal(tuple(Chunk(tuple(tokens), kept, singles) for tokens, kept, singles in chunks))


FIRST = journal(([1, 2, 3, 4], 4, False), ([9, 8], 2, True))
# the next turn cut the generated run after one token and read on; a rewound branch cut the prompt chunk
SECOND = FIRST.cut(5).then_read([7, 7, 7]).then_read([5], singles=True)
OTHER = FIRST.cut(2).then_read([6, 6])


def tree() -> ConversationTree:
    t = ConversationTree(AgentState())
    a = t.add(None, Turn("hi"), AgentState(journals={"reply": FIRST}, seed_salt=0))
    b = t.add(a, Turn("and?"), AgentState(journals={"reply": SECOND, "classify": FIRST}, seed_salt=3))
    t.add(a, Turn("or?"), AgentState(journals={"reply": OTHER}, seed_salt=3))
    t.add(b, Turn("bye"), AgentState(journals={"classify": FIRST}, seed_salt=3))  # reply's journal gone
    t.select(b)
    return t


def saved_with(t: ConversationTree):
    from runtime.dialogue.history import DialogHistory, SavedDialog
    return SavedDialog(DialogHistory(t.turns()), seed_salt=3, tree=t)


def test_journals_and_seed_salts_round_trip_as_changes_per_turn():
    t = tree()
    text = dumps_history(saved_with(t))
    raw = json.loads(text)
    assert raw["version"] == HISTORY_VERSION == 4
    second = next(r for r in raw["turns"] if r["player"] == "and?")
    assert second["state"]["journals"]["reply"]["keep"] == 5  # only what the turn changed is written
    assert second["state"]["seed_salt"] == 3
    back = history_from_dict(raw)
    assert back.tree == t
    for turn_id, node in t.nodes.items():
        assert back.tree.nodes[turn_id].after.journals == node.after.journals
        assert back.tree.nodes[turn_id].after.seed_salt == node.after.seed_salt


def test_change_from_gives_back_the_journal():
    for before, after in [(EMPTY, FIRST), (FIRST, SECOND), (SECOND, OTHER), (FIRST, FIRST.cut(4)), (SECOND, FIRST)]:
        change = after.change_from(before)
        chunks = [Chunk(tuple(c["tokens"]), c.get("kept", len(c["tokens"])), c.get("singles", False))
                  for c in change["chunks"]]
        assert before.cut(change["keep"]).then(chunks) == after


@pytest.mark.parametrize(("change", "where", "said"), [
    ({"reply": {"keep": 99}}, "turns.0.state.journals.reply.keep", "keeps 99 cells"),
    ({"reply": {"chunks": [{"tokens": [1, 2], "kept": 3}]}}, "turns.0.state.journals.reply.chunks.0.kept", "keeps 3"),
    ({"reply": {"chunks": [{"tokens": []}]}}, "turns.0.state.journals.reply.chunks.0.tokens", ""),
    ({"reply": {"chunks": [{"tokens": [-1]}]}}, "turns.0.state.journals.reply.chunks.0.tokens.0", ""),
    ({"reply": {"chunks": [{"tokens": ["a"]}]}}, "turns.0.state.journals.reply.chunks.0.tokens.0", ""),
    ({"reply": {"chunks": [{"tokens": [1], "extra": 1}]}}, "turns.0.state.journals.reply.chunks.0.extra", ""),
])
def test_bad_journals_are_refused_naming_the_field(change, where, said):
    raw = {"format": "parley-dialog", "version": 4, "turns": [{"id": 0, "player": "hi", "state": {"journals": change}}]}
    with pytest.raises(HistoryError) as caught:
        history_from_dict(raw, "bad.json")
    problems = caught.value.problems
    assert any(p.field == where and said in p.message and p.file == "bad.json" for p in problems), problems


def test_a_turn_records_the_seed_salt_it_was_generated_with():
    agent = Agent(asset(("Generate", "reply", {})), backend())
    first = agent.run_turn("Hello")
    agent.reroll_seeds(7)
    second = agent.run_turn("Again")
    assert agent.tree.nodes[first.turn_id].after.seed_salt == 0
    assert agent.tree.nodes[second.turn_id].after.seed_salt == 7
    agent.go_to(first.turn_id)
    assert agent.seed_salt == 7, "going back keeps the re-rolled salt for what is said next"
    with pytest.raises(KeyError):
        agent.go_to(99)
