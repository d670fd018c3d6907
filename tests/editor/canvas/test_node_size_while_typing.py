"""Issue 38: nodes grew over each other as prompts were typed. A node's size no longer follows its
prompt's length: the preview is wrapped and cut to a box of fixed size, so a node placed beside
another (the Add menu's free spot) stays clear of it whatever is typed into either."""

from __future__ import annotations

from editor.model.commands import set_node_field
from runtime.asset.model import Asset, new_node

PROMPT = ("You are Brann, the gate guard of Eastmarch. Ask every traveller where they come from, where they "
          "go, and why; refuse anyone who will not say, and WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW.")


def overlapping(window) -> list[tuple[str, str]]:
    items = [(n.asset_id, n.view.sceneBoundingRect()) for n in window.canvas.graph.all_nodes()]
    return [(a, b) for i, (a, ra) in enumerate(items) for b, rb in items[i + 1:] if ra.intersects(rb)]


def test_typing_a_prompt_never_grows_a_node_over_its_neighbours(window):
    window.set_asset(Asset(nodes=[new_node("GenerateAndSpeak", "reply", position=(0, 0))], start_node="reply"))
    window.canvas.finish_building()
    doc = window.document
    # Added with "reply" selected: in the free spot right of it; then one below that, and one below "reply".
    window.canvas.select(["reply"])
    right = window.canvas.add_node("Generate")
    window.canvas.select(["reply"])
    below = window.canvas.add_node("ToolCall", (0.0, window.canvas.canvas_node("reply").view.sceneBoundingRect().bottom() + 40))
    assert overlapping(window) == []
    sizes = {key: window.canvas.node_size(key) for key in ("reply", right, below)}

    for length in range(0, len(PROMPT) + 1, 9):  # typed, a few characters at a time
        for node_id in ("reply", right, below):
            doc.push(set_node_field(doc, node_id, "system_prompt", PROMPT[:length]))
        assert overlapping(window) == [], f"nodes overlap after {length} characters"
    assert {key: window.canvas.node_size(key) for key in sizes} == sizes, "a node's size follows its prompt"
    item = window.canvas.canvas_node("reply").view
    assert len(item.summary) == 3 and item.summary[0].startswith("as Brann:")
    window.canvas.frame_selection()
    window.canvas.widget.grab().save("/tmp/w38/typed_prompts.png")
