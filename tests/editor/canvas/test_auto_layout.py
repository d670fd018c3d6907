"""Auto-layout in the real window before everything is connected: the nodes a turn cannot reach yet
go after the connected chain (right of the classifier they will be connected from), never beside
START, so no pipe runs backwards."""

from __future__ import annotations

from runtime.asset.model import Asset, new_node


def _npc_half_built() -> Asset:
    """START -> classify, whose exits all end the turn; three replies not connected yet."""
    classify = new_node("ClassifyIntent", "classify", position=(500, 400),
                        intents=[{"name": "threaten", "exit": ""}, {"name": "ask", "exit": ""}])
    replies = [new_node("Generate", name, position=(0, 80 * i)) for i, name in enumerate(["warn", "directions", "smalltalk"])]
    return Asset(nodes=[*replies, classify], start_node="classify")


def test_auto_layout_puts_unconnected_nodes_right_of_the_chain(window):
    window.set_asset(_npc_half_built())
    window.layout_action.trigger()
    doc = window.document
    classify = window.canvas.canvas_node("classify").view.sceneBoundingRect()
    start = doc.terminal_position("start")
    end = doc.terminal_position("end")
    assert start[0] < classify.left()
    for node_id in ("warn", "directions", "smalltalk"):
        rect = window.canvas.canvas_node(node_id).view.sceneBoundingRect()
        assert rect.left() > classify.right(), f"{node_id} is left of the classifier it will be connected from"
        assert rect.right() < end[0], f"{node_id}'s pipe to END runs backwards"
    window.canvas.frame_selection()
    window.canvas.widget.grab().save("/tmp/n/auto_layout.png")


def test_auto_layout_keeps_a_connected_graph_in_order(window):
    asset = _npc_half_built()
    asset = asset.model_copy(update={"nodes": [
        n if n.id != "classify" else n.model_copy(update={"intents": [
            i.model_copy(update={"exit": target}) for i, target in zip(n.intents, ["warn", "directions"])]})
        for n in asset.nodes]})
    window.set_asset(asset)
    window.layout_action.trigger()
    x = {n.id: n.position[0] for n in window.document.asset.nodes}
    assert x["classify"] < x["warn"] and x["classify"] < x["directions"]
    # smalltalk is still unconnected: after the chain's end, not beside START
    assert x["smalltalk"] > x["warn"]
