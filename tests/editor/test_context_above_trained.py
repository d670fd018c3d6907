"""Issue 23, friction 8 in the editor: a Context Size above the model's trained size is an error in
the Problems dock, on the node's context_size, as soon as it is typed."""

from __future__ import annotations

import json

from editor.model.commands import set_node_field
from tests.runtime.tiny_gguf import write_tiny_gguf


def test_the_problems_dock_shows_a_context_above_the_trained_size(window, tmp_path):
    write_tiny_gguf(tmp_path / "npc.gguf", context_length=8192)
    path = tmp_path / "npc.json"
    path.write_text(json.dumps({"version": 1, "default_model": "npc.gguf", "start_node": "reply", "nodes": [
        {"id": "reply", "type": "Generate", "context_size": 4096, "system_prompt": "You are a guard."}]}))
    assert window.open_path(str(path))
    doc = window.document

    def context_problems():
        return [p for p in window.problems_dock.problems if p.field == "context_size"]

    assert context_problems() == []
    doc.push(set_node_field(doc, "reply", "context_size", 32768))
    (problem,) = context_problems()
    assert (problem.severity, problem.node_id) == ("error", "reply")
    assert "trained for (8,192 tokens)" in problem.message
    doc.undo_stack.undo()
    assert context_problems() == []
