"""Editing the graph mid-conversation on the real sample model: the conversation goes on with the
new graph, every branch kept."""

from __future__ import annotations

import pytest

from editor.model.commands import remove_nodes
from tests.editor.live import example, sample_model, talk

pytestmark = pytest.mark.model


def test_deleting_a_node_that_already_answered_keeps_the_conversation(window, qtbot):
    """The deleted node's window start was filtered from the current state only, not from the tree's
    states, so the new agent refused the history and the worker silently stayed on the old graph."""
    window.set_asset(example("intent_router", sample_model(), directions={"max_tokens": 8},
                             smalltalk={"max_tokens": 8}, warn={"max_tokens": 8}))
    conversation = window.conversation
    record = talk(qtbot, conversation, "Lovely weather we are having today.")
    answered = record.diagnostics.path[-1]
    assert answered != "classify" and answered in conversation.saved.windows

    window.document.push(remove_nodes(window.document, [answered]))
    talk(qtbot, conversation, "Lovely weather we are having today.")  # the edit applies to the next turn
    assert answered not in conversation.worker.agent.asset.node_ids(), "the turn ran on the edited graph"
    saved = conversation.saved
    assert len(saved.history.turns) == 2, "the conversation is kept"
    assert all(answered not in node.after.windows for node in saved.tree.nodes.values())
