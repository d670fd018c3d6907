"""Reading ahead between turns (``Agent.warm``) on the real sample model: a node on a branch the last
turns did not take reads only the new line when it next runs, and a conversation read ahead still
replays bit for bit (the read-ahead is recorded, in the tree, the history file and the bundle)."""

from __future__ import annotations

import itertools

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.llama import LlamaBackend
from runtime.bundle.file import make_bundle
from runtime.bundle.replay import replay_bundle
from runtime.dialogue.dialog_file import dumps_history, parse_history
from runtime.resources import examples_dir

pytestmark = pytest.mark.model

# The router's classifier sends these to different reply nodes (directions, smalltalk, warn), so each
# reply node sits out some turns: without a read-ahead it reads those turns again when it next runs.
LINES = ["Where is the old mill?", "Lovely weather today!", "How do I get to the harbour?",
         "Nice hat you have.", "Which way to the chapel?"]


@pytest.fixture(scope="module")
def warmed(sample_model):
    asset = load_asset(examples_dir() / "intent_router.json")
    nodes = [n.model_copy(update={"max_tokens": 16}) if n.PLAYER_FACING else n for n in asset.nodes]
    asset = asset.model_copy(update={"default_model": str(sample_model), "nodes": nodes})
    backend = LlamaBackend(examples_dir())
    agent = Agent(asset, backend, str(examples_dir()))
    turns = []
    for line in LINES:
        result = agent.run_turn(line)
        turns.append((result, agent.warm()))
    yield asset, agent, turns
    backend.close()


def test_a_node_read_ahead_reads_only_the_new_line_when_it_runs(warmed, sample_model):
    _asset, agent, turns = warmed
    count = agent.backend.count_tokens
    ran_after_warm = 0
    for (_before, read), (result, _next) in itertools.pairwise(turns):
        for node in result.diagnostics.nodes:
            if node.type != "Generate" or node.node not in read:
                continue
            ran_after_warm += 1
            new = node.tokens.prompt - node.tokens.reused
            # the line, the markup around it and a token or two where the reply was re-tokenized
            assert new <= count(str(sample_model), result.diagnostics.player) + 12, (node.node, node.tokens)
    assert ran_after_warm >= 2, f"no reply node ran after a read-ahead: {[t[0].path for t in turns]}"
    assert any(len(read) > 1 for _, read in turns), "the reply nodes that did not run were read ahead too"


def test_the_read_ahead_is_kept_in_the_tree_and_the_history_file(warmed):
    _asset, agent, _turns = warmed
    state = agent.tree.state_after(agent.tree.current)
    assert state.warmed and all(agent.journals[k] == j for k, j in state.warmed.items())
    saved = parse_history(dumps_history(agent.export_dialog()))
    again = saved.tree.state_after(saved.tree.current)
    assert again.warmed == state.warmed and again.journals == state.journals
    # a turn that was not read ahead after it keeps none of its parent's read-ahead
    first = agent.tree.path()[0]
    assert saved.tree.nodes[first].after.warmed == agent.tree.nodes[first].after.warmed


def test_a_conversation_read_ahead_replays_identical(warmed):
    asset, agent, _turns = warmed
    bundle = make_bundle(asset, agent.export_dialog(), agent.backend, examples_dir(), asset_source="router.json")
    report = replay_bundle(bundle, stop_at_first=True)
    assert report.identical, report.first_difference and report.first_difference.describe()
    assert report.count("identical") == len(LINES)


def test_going_back_finds_the_caches_as_read_ahead_then(warmed):
    _asset, agent, _turns = warmed
    path = agent.tree.path()
    agent.go_to(path[1])
    assert agent.journals == agent.tree.state_after(path[1]).reading()
    agent.go_to(path[-1])
