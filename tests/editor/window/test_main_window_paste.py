"""Pasting nodes that share an id, or that are not nodes at all: whole undo steps, or nothing and a message."""

from __future__ import annotations

import json

import pytest

from editor.model.commands import add_nodes
from runtime.asset.model import new_node


def test_pasted_nodes_sharing_an_id_get_their_own_ids_and_undo_and_redo_whole(window):
    """Defect 2: both became a_2, the command stopped half way, undo raised KeyError and redo ValueError."""
    doc = window.document
    existing = window.canvas.add_node("Generate", (0, 0))
    before = doc.asset.node_ids()
    text = json.dumps({"nodes": [{"id": existing, "type": "Generate", "default_exit": existing},
                                 {"id": existing, "type": "Summarize"}]})
    pasted = window.paste_text(text, None)
    assert len(pasted) == 2 and len(set(pasted)) == 2 and existing not in pasted
    assert doc.asset.node_ids() == before + pasted
    assert doc.node(pasted[0]).default_exit == pasted[0], "an exit to the shared id goes to the first of them"
    window.undo_action.trigger()
    assert doc.asset.node_ids() == before
    window.redo_action.trigger()
    assert doc.asset.node_ids() == before + pasted
    window.undo_action.trigger()
    assert doc.asset.node_ids() == before


def test_pasting_the_same_nodes_twice_into_an_empty_asset(window):
    doc = window.document
    text = json.dumps([{"id": "a", "type": "Generate"}, {"id": "a", "type": "Generate"}])
    first = window.paste_text(text, None)
    second = window.paste_text(text, None)
    assert len(set(first + second)) == 4 and doc.asset.node_ids()[-4:] == first + second


@pytest.mark.parametrize("text, where", [
    ('[{"id": "a", "type": ["Generate"]}]', "a.type"),
    ('{"id": "a", "type": {"x": 1}}', "a.type"),
    ('[{"id": "bad\\nid", "type": "Generate"}]', "'bad\\nid'.id"),
])
def test_a_type_that_is_not_a_name_pastes_nothing_and_says_where(window, text, where):
    """Defect 2: ``"type": [...]`` raised TypeError."""
    count = len(window.document.asset.nodes)
    assert window.paste_text(text, None) == []
    assert len(window.document.asset.nodes) == count
    message = window.statusBar().currentMessage()
    assert message.startswith(f"Nothing pasted: clipboard:{where}:"), message
    assert "\n" not in message


def test_the_paste_command_refuses_ids_it_could_only_half_add(window):
    doc = window.document
    taken = window.canvas.add_node("Generate", (0, 0))
    with pytest.raises(ValueError, match="taken or repeated"):
        add_nodes(doc, [new_node("Generate", "twice"), new_node("Generate", "twice")], "Paste")
    with pytest.raises(ValueError, match=repr(taken)):
        add_nodes(doc, [new_node("Generate", taken)], "Paste")
    assert doc.asset.node_ids() == [taken]
