"""Issue 23, the Sampling done-point: a reply that loops up to max_tokens is called so in the Turn
Inspector (the node's warnings), on the real sample model; with a repeat penalty it is not."""

from __future__ import annotations

import pytest

from editor.docks.turn_inspector.dock import TurnInspectorDock
from tests.editor.live import example, sample_model, talk

pytestmark = pytest.mark.model

# Greedy, SmolLM2-135M answers this with "Hello, hello, hello, ..." up to the cap.
LOOPING_LINE = "Write the word 'hello' one hundred times."
GUARD = {"system_prompt": "You are a guard.", "template": "", "temperature": 0.0, "max_tokens": 48,
         "context_size": 1024}


@pytest.mark.parametrize(("penalty", "warned"), [(1.0, True), (1.3, False)])
def test_the_inspector_says_the_reply_repeated_itself(window, qtbot, penalty, warned):
    window.set_asset(example("chat", sample_model(), reply={**GUARD, "repeat_penalty": penalty}))
    talk(qtbot, window.conversation, LOOPING_LINE)
    inspector = window.dock(TurnInspectorDock)
    assert inspector.current_node_id() == "reply"
    shown = inspector.stats.text()
    assert ("repeated itself up to max_tokens (48 tokens)" in shown) == warned, shown
    if warned:
        assert "repeat_penalty" in shown
