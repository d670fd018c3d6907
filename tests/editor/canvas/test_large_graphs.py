"""Large graphs in the editor: the canvas draws a big graph in slices (nearest the start first) and
stays a faithful view meanwhile; exit choices past a few hundred are listed only when used; a
huge prompt is cut before its node's summary is wrapped."""

from __future__ import annotations

import time

import pytest

import editor.canvas.drawing as drawing_module
from editor.canvas import END_KEY, Canvas
from editor.canvas.node_types import SUMMARY_WIDTH, view_of
from editor.docks.properties import field_editors
from editor.docks.properties.dock import PropertiesDock
from editor.model.commands import MoveCommand, SetNodeFieldCommand, remove_nodes
from editor.model.document import Document
from runtime.asset.model import Asset, new_node
from runtime.problems import Problem


def chain(count: int) -> Asset:
    nodes = [new_node("Generate", f"n{i}", default_exit=f"n{i + 1}" if i + 1 < count else "",
                      position=(i * 280.0, 0.0)) for i in range(count)]
    return Asset(nodes=nodes, start_node="n0")


def pipes(canvas: Canvas) -> dict[tuple[str, str], str]:
    return {(p.output_port.node.asset_id, p.output_port.name): p.input_port.node.asset_id
            for p in canvas.viewer.all_pipes()}


@pytest.fixture
def small_slices(monkeypatch):
    monkeypatch.setattr(drawing_module, "PROGRESSIVE_ABOVE", 5)
    monkeypatch.setattr(drawing_module, "FIRST_BATCH", 3)


def test_a_large_graph_is_drawn_in_slices_and_stays_in_step(qtbot, small_slices):
    doc = Document(chain(30))
    canvas = Canvas(doc)
    qtbot.addWidget(canvas.widget)
    canvas.rebuild()
    assert canvas.building and len(canvas.drawing.nodes) == 3, "the nodes nearest the start first"
    assert set(canvas.drawing.nodes) == {"n0", "n1", "n2"}
    canvas.mark_problems([Problem("error", "bad", node_id="n20")])
    doc.push(SetNodeFieldCommand(doc, "n10", "title", "", "Changed before it was drawn"))
    doc.push(remove_nodes(doc, ["n25"]))
    assert canvas.canvas_node("n15").view.asset_id == "n15", "asking for a node draws it at once"
    with qtbot.waitSignal(canvas.built, timeout=10_000):
        pass
    assert not canvas.building and len(canvas.drawing.nodes) == 29
    assert canvas.canvas_node("n10").view.name == "Changed before it was drawn"
    assert canvas.problem_severity("n20") == "error", "problems marked before a node was drawn show"
    want = {(n.id, "default_exit"): n.default_exit or END_KEY for n in doc.asset.nodes}
    want[("@start", "start")] = "n0"
    assert pipes(canvas) == want and want[("n9", "default_exit")] == "n10"


def test_a_large_graph_is_indexed_and_kept_out_of_collections_while_it_is_drawn(qtbot, small_slices):
    """Each slice indexes what it drew and freezes it (no 0.1-1.5 s pause at the end of drawing or at
    the first edit after it); a node beyond the graph's first bounds is still found by the index."""
    import gc

    from PySide6.QtCore import QRectF

    doc = Document(chain(30))
    canvas = Canvas(doc)
    qtbot.addWidget(canvas.widget)
    canvas.rebuild()
    assert canvas.building and gc.get_freeze_count() > 0, "frozen from the first slice on"
    scene = canvas.viewer.scene()
    first = canvas.canvas_node("n1").view
    assert first in scene.items(first.sceneBoundingRect())
    with qtbot.waitSignal(canvas.built, timeout=10_000):
        pass
    last = canvas.canvas_node("n29").view
    assert last in scene.items(last.sceneBoundingRect())
    doc.push(SetNodeFieldCommand(doc, "n29", "title", "", "far"))
    far = (scene.sceneRect().right() + 5000.0, scene.sceneRect().bottom() + 5000.0)
    doc.push(MoveCommand(doc, {"n29": (doc.node("n29").position, far)}))
    assert last in scene.items(QRectF(far[0] + 1, far[1] + 1, 5, 5)), "found beyond the bounds set for drawing"
    gc.unfreeze()


def test_a_small_graph_is_drawn_at_once(qtbot):
    canvas = Canvas(Document(chain(10)))
    qtbot.addWidget(canvas.widget)
    with qtbot.waitSignal(canvas.built, timeout=1000):
        canvas.rebuild()
    assert not canvas.building and len(canvas.drawing.nodes) == 10


def test_many_exit_choices_are_listed_when_the_combo_box_is_used(qtbot, monkeypatch):
    monkeypatch.setattr(field_editors, "LAZY_CHOICES", 5)
    doc = Document(chain(20))
    dock = PropertiesDock(doc)
    qtbot.addWidget(dock)
    dock.show()
    dock.show_selection(["n3"])
    exit_editor = dock.form.editors["default_exit"]
    combo = exit_editor.combo
    assert not exit_editor.filled and combo.count() == 1 and combo.currentData() == "n4"
    doc.push(SetNodeFieldCommand(doc, "n3", "default_exit", "n4", "n9"))
    assert combo.count() == 1 and combo.currentData() == "n9", "an edit shows the new value"
    combo.showPopup()
    assert exit_editor.filled and combo.count() == 21 and combo.currentData() == "n9"
    combo.hidePopup()
    combo.setCurrentIndex(combo.findData("n12"))
    combo.activated.emit(combo.currentIndex())
    assert doc.node("n3").default_exit == "n12"


def test_a_huge_prompt_is_cut_before_the_summary_is_wrapped():
    prompt = "You are Mira, the innkeeper. " + "Answer warmly and briefly. " * 400_000  # ~11 MB
    node = new_node("GenerateAndSpeak", "reply", system_prompt=prompt)
    started = time.perf_counter()
    lines = view_of(node.type_name).summary(node, Asset(nodes=[node], default_model="m.gguf"))
    assert time.perf_counter() - started < 0.5, "the whole prompt was split and wrapped"
    assert lines[0].startswith("as Mira:") and lines[-1].endswith("\u2026")
    assert all(len(line) <= SUMMARY_WIDTH for line in lines)
