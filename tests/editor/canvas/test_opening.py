"""Opening an asset draws its canvas once, and clearing a coverage that is not shown repaints
nothing (issue 23, friction 18: opening a 500-node asset took 2.0-3.7 s beyond an empty start)."""

from __future__ import annotations

from editor.canvas.drawing import Drawing
from editor.canvas.overlays import Overlays
from runtime.asset.file import save_asset
from runtime.asset.model import Asset, new_node


def _asset(count: int) -> Asset:
    nodes = [new_node("Generate", f"n{i}", default_exit=f"n{i + 1}" if i + 1 < count else "",
                      position=(i * 280.0, 0.0)) for i in range(count)]
    return Asset(nodes=nodes, start_node="n0")


def test_open_draws_the_canvas_once_and_repaints_no_coverage(window, tmp_path, monkeypatch):
    path = tmp_path / "chain.json"
    save_asset(_asset(12), path)
    rebuilds, repaints = [], []
    real_rebuild, real_paint = Drawing.rebuild, Overlays._paint_coverage
    monkeypatch.setattr(Drawing, "rebuild", lambda self: (rebuilds.append(1), real_rebuild(self))[1])
    monkeypatch.setattr(Overlays, "_paint_coverage", lambda self, node_id: (repaints.append(node_id),
                                                                            real_paint(self, node_id))[1])
    assert window.open_path(str(path))
    assert len(rebuilds) == 1
    assert repaints == []  # no coverage was shown: nothing to take off
    assert len(window.canvas.drawing.nodes) == 12
    # Shown coverage is still taken off every node.
    window.canvas.show_coverage({"n0": 2}, {("n0", "next"): 2})
    repaints.clear()
    window.canvas.clear_coverage()
    assert sorted(repaints) == sorted(window.canvas.drawing.nodes)
    assert window.canvas.visit_badge("n0") == ""


def test_nodes_are_drawn_at_their_laid_out_size_with_nodegraphqts_icon(window, tmp_path):
    """Sizes set before a node enters the scene are not measured (its layout sets them), and the
    icon is made once: a drawn node is the size a fresh layout gives it, with NodeGraphQt's icon."""
    from NodeGraphQt.constants import ICON_NODE_BASE, NodeEnum
    from PySide6.QtGui import QPixmap

    path = tmp_path / "chain.json"
    asset = _asset(3)
    asset.nodes[1].system_prompt = "A prompt long enough to widen the node's summary " * 3
    save_asset(asset, path)
    assert window.open_path(str(path))
    icon = QPixmap(ICON_NODE_BASE).scaledToHeight(NodeEnum.ICON_SIZE.value)
    for canvas_node in window.canvas.drawing.nodes.values():
        view = canvas_node.view
        drawn = (view.width, view.height)
        view.draw_node()
        assert (view.width, view.height) == drawn
        assert view._icon_item.pixmap().size() == icon.size()
        assert view.icon is None
    sizes = {key: window.canvas.node_size(key) for key in window.canvas.drawing.nodes}
    assert sizes["n1"] == sizes["n0"]  # a long prompt is elided in the summary's box: no wider node (issue 38)
