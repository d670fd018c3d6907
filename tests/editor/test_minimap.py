"""The minimap in the canvas's corner: it draws every node, its rectangle is the view's, a click
or a drag centres the view there, it follows the asset with one rebuild however many changes came
at once, and View > Show Minimap is remembered. Zoom to Selection (Shift+F) fits the selection."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtTest import QTest

from editor.canvas.minimap import SELECTED_PEN, SHOWN_KEY, VIEW_PEN, Minimap
from editor.canvas.node_types import view_of
from editor.model.commands import AddNodeCommand, MoveCommand, remove_nodes
from editor.settings import app_settings
from editor.window.help_menu import shortcut_rows
from runtime.asset.model import Asset, Comment, new_node


def grid(count: int, columns: int = 10) -> Asset:
    nodes = [new_node("Generate", f"n{i}", position=((i % columns) * 320.0, (i // columns) * 220.0),
                      default_exit=f"n{i + 1}" if i + 1 < count else "") for i in range(count)]
    return Asset(nodes=nodes, start_node="n0")


def settled(qtbot, minimap: Minimap) -> None:
    """The window shown and the minimap's picture drawn from what the asset is now."""
    qtbot.waitUntil(lambda: minimap.isVisible() and not minimap._dirty and not minimap._timer.isActive(),
                    timeout=5000)


@pytest.fixture
def big(window, qtbot):
    """A window on a 60-node grid, zoomed in so the view is a small part of the graph."""
    window.resize(1366, 768)
    window.set_asset(grid(60))
    window.canvas.finish_building()
    window.canvas.select(["n0"])
    window.canvas.center_on("n0")
    window.canvas.viewer.reset_zoom(window.canvas.viewer._scene_range.center())  # 1:1
    settled(qtbot, window.minimap)
    return window


def close(a: QPointF, b: QPointF, within: float) -> bool:
    return abs(a.x() - b.x()) <= within and abs(a.y() - b.y()) <= within


def pixel(image: QImage, point: QPointF) -> QColor:
    return image.pixelColor(int(point.x()), int(point.y()))


def drawn_near(image: QImage, point: QPointF, colour: QColor) -> bool:
    """``colour`` at ``point`` or a pixel beside it (a node a few pixels small on the minimap)."""
    return any(similar(image.pixelColor(int(point.x()) + dx, int(point.y()) + dy), colour)
               for dx in (-1, 0, 1) for dy in (-1, 0, 1))


def similar(a: QColor, b: QColor, within: int = 12) -> bool:
    return all(abs(x - y) <= within for x, y in zip(a.getRgb()[:3], b.getRgb()[:3], strict=True))


class PaintCounter(QObject):
    def __init__(self, widget) -> None:
        super().__init__(widget)
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False


def test_the_minimap_draws_every_node_in_its_colour(big):
    minimap, doc = big.minimap, big.document
    assert minimap.parent() is big.canvas.viewer and minimap.isVisible()
    viewport = big.canvas.viewer.viewport().geometry()
    assert viewport.contains(minimap.geometry()), "in the canvas's corner"
    assert minimap.geometry().right() > viewport.center().x() and minimap.geometry().bottom() > viewport.center().y()
    image = minimap.picture.toImage()  # the nodes, without the view's rectangle over them
    fill = QColor(*[min(255, c + 30) for c in view_of("Generate").fill])
    for node in doc.asset.nodes:
        w, h = big.canvas.node_size(node.id)
        centre = minimap.to_minimap(QPointF(node.position[0] + w / 2, node.position[1] + h / 2))
        assert similar(pixel(image, centre), fill), node.id
    # between two nodes of a row, nothing is drawn
    gap = minimap.to_minimap(QPointF(doc.node("n3").position[0] - 35.0, doc.node("n3").position[1] + 40))
    assert not similar(pixel(image, gap), fill)


def test_the_viewport_rectangle_is_the_views_visible_scene_rect(big, qtbot):
    minimap, viewer = big.minimap, big.canvas.viewer
    scale = minimap._mapping()[0]
    for dx, dy in ((0, 0), (600, 300), (-200, 450)):
        viewer._set_viewer_pan(dx, dy)
        visible = viewer.mapToScene(viewer.viewport().rect()).boundingRect()
        drawn = minimap.viewport_rect()
        assert close(minimap.to_scene(drawn.topLeft()), visible.topLeft(), 0.5 / scale)
        assert close(minimap.to_scene(drawn.bottomRight()), visible.bottomRight(), 0.5 / scale)
    image = minimap.grab().toImage()
    left_edge = QPointF(minimap.viewport_rect().left() + 0.5, minimap.viewport_rect().center().y())
    assert drawn_near(image, left_edge, VIEW_PEN), "the rectangle is drawn where the view is"


def test_a_pan_or_a_zoom_repaints_the_minimap_without_rebuilding_it(big, qtbot):
    minimap, viewer = big.minimap, big.canvas.viewer
    paints = PaintCounter(minimap)
    rebuilds = minimap.rebuilds
    viewer._set_viewer_pan(400, 0)
    qtbot.waitUntil(lambda: paints.count > 0, timeout=3000)
    seen = paints.count
    viewer._set_viewer_zoom(-300)  # the wheel's zoom out
    qtbot.waitUntil(lambda: paints.count > seen, timeout=3000)
    assert minimap.rebuilds == rebuilds, "the nodes' picture is kept across pans and zooms"


def test_a_click_centres_the_view_on_that_point(big):
    minimap, canvas = big.minimap, big.canvas
    scale = minimap._mapping()[0]
    at = QPoint(minimap.width() - 20, minimap.height() - 15)
    QTest.mouseClick(minimap, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, at)
    wanted = minimap.to_scene(QPointF(at))
    assert close(QPointF(*canvas.view_center()), wanted, 1.5 / scale + 2)
    before = QPointF(*canvas.view_center())
    # and a drag takes the view along
    start, end = QPoint(20, 20), QPoint(minimap.width() // 2, minimap.height() // 2)
    QTest.mousePress(minimap, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    assert close(QPointF(*canvas.view_center()), minimap.to_scene(QPointF(start)), 1.5 / scale + 2)
    QTest.mouseMove(minimap, end)
    QTest.mouseRelease(minimap, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, end)
    assert close(QPointF(*canvas.view_center()), minimap.to_scene(QPointF(end)), 1.5 / scale + 2)
    assert not close(QPointF(*canvas.view_center()), before, 10)


def test_many_changes_at_once_rebuild_the_picture_once(big, qtbot):
    minimap, doc = big.minimap, big.document
    before = minimap.rebuilds
    for i in range(10):  # ten undo steps in one go (as a script or a replay would)
        old = doc.node(f"n{i}").position
        doc.push(MoveCommand(doc, {f"n{i}": (old, (old[0], old[1] + 2000.0))}))
    doc.push(AddNodeCommand(doc, new_node("Generate", "far", position=(-3000.0, -3000.0))))
    doc.push(remove_nodes(doc, ["n59"]))
    assert minimap.rebuilds == before, "nothing is drawn while the changes come in"
    qtbot.waitUntil(lambda: minimap.rebuilds > before, timeout=3000)
    for _ in range(3):
        QTest.qWait(0)  # the event loop turns: no second rebuild comes
    assert minimap.rebuilds == before + 1
    image = minimap.picture.toImage()
    fill = QColor(*[min(255, c + 30) for c in view_of("Generate").fill])
    moved = doc.node("n4").position
    w, h = big.canvas.node_size("n4")
    assert drawn_near(image, minimap.to_minimap(QPointF(moved[0] + w / 2, moved[1] + h / 2)), fill)
    far = minimap.to_minimap(QPointF(-3000.0 + w / 2, -3000.0 + h / 2))
    assert QRectF(minimap.rect()).contains(far), "the minimap takes in a node added far away"
    assert drawn_near(image, far, fill)
    gone = doc.asset.nodes[-2].position  # n58, beside where n59 was
    assert not drawn_near(image, minimap.to_minimap(QPointF(gone[0] + 320.0 + w / 2, gone[1] + h / 2)), fill)


def test_undo_of_a_move_is_followed(big, qtbot):
    minimap, doc = big.minimap, big.document
    old = doc.node("n5").position
    doc.push(MoveCommand(doc, {"n5": (old, (old[0], old[1] - 3000.0))}))
    settled(qtbot, minimap)
    moved_world = QRectF(minimap._world)
    doc.undo_stack.undo()
    settled(qtbot, minimap)
    assert minimap._world != moved_world and minimap._world.top() > moved_world.top()


def test_show_minimap_toggles_and_is_remembered(window, make_window, qtbot):
    window.set_asset(grid(5))
    action = window.minimap.toggle_action
    assert action is not None and action.isChecked() and window.minimap.isVisible()
    assert ("View", "Show Minimap", "Ctrl+Shift+M") in shortcut_rows(window)
    action.trigger()
    assert not window.minimap.isVisible()
    assert app_settings().value(SHOWN_KEY, True, type=bool) is False
    another = make_window()
    another.set_asset(grid(5))
    assert not another.minimap.toggle_action.isChecked() and not another.minimap.isVisible()
    another.minimap.toggle_action.trigger()
    assert another.minimap.isVisible()
    assert app_settings().value(SHOWN_KEY, False, type=bool) is True


def test_an_empty_asset_has_no_minimap_until_a_node_is_added(window, qtbot):
    assert not window.document.asset.nodes and not window.minimap.isVisible()
    window.canvas.add_node("Generate")
    settled(qtbot, window.minimap)
    assert window.minimap.rebuilds >= 1


def test_backdrops_are_drawn_under_the_nodes_and_follow_the_document(window, qtbot):
    asset = grid(4, columns=4)
    asset.comments = [Comment(id="guards", kind="backdrop", title="Guards", color=(200, 40, 40),
                              position=(-100.0, 500.0), size=(1200.0, 600.0))]
    window.set_asset(asset)
    minimap = window.minimap
    settled(qtbot, minimap)
    inside = pixel(minimap.picture.toImage(), minimap.to_minimap(QPointF(500.0, 900.0)))
    assert inside.red() > inside.green() + 20, "the backdrop's red shows"
    before = minimap.rebuilds
    window.document.add_comment(Comment(id="note", kind="note", color=(40, 200, 40), position=(400.0, -900.0),
                                        size=(300.0, 200.0)))
    qtbot.waitUntil(lambda: minimap.rebuilds > before, timeout=3000)
    note = pixel(minimap.picture.toImage(), minimap.to_minimap(QPointF(550.0, -800.0)))
    assert note.green() > note.red() + 20, "a note added is drawn"


def test_the_selected_nodes_are_outlined(big, qtbot):
    minimap, canvas = big.minimap, big.canvas
    canvas.select(["n57"])  # far from the view, which is at n0
    image = minimap.grab().toImage()
    x, y = big.document.node("n57").position
    corner = minimap.to_minimap(QPointF(x, y))
    assert drawn_near(image, corner, SELECTED_PEN)
    canvas.select([])
    assert not drawn_near(minimap.grab().toImage(), corner, SELECTED_PEN)


def test_zoom_to_selection_fits_the_selected_nodes(big):
    canvas, viewer = big.canvas, big.canvas.viewer
    viewer._set_viewer_zoom(-2000)  # far out
    canvas.select(["n11", "n34"])
    viewer.setFocus()
    QTest.keyClick(viewer, Qt.Key.Key_F, Qt.KeyboardModifier.ShiftModifier)
    visible = viewer.mapToScene(viewer.viewport().rect()).boundingRect()
    chosen = canvas.canvas_node("n11").view.sceneBoundingRect().united(canvas.canvas_node("n34").view.sceneBoundingRect())
    assert visible.contains(chosen)
    # fitted: the selection fills the view along one side (the margin is 40 scene units each side)
    assert visible.width() <= chosen.width() + 120 or visible.height() <= chosen.height() + 120
    assert ("View", "Zoom to Selection", "Shift+F") in shortcut_rows(big)
    canvas.select([])
    before = visible
    big.zoom_selection_action.trigger()
    assert viewer.mapToScene(viewer.viewport().rect()).boundingRect() == before, "nothing selected: the view stays"
    assert "Select the nodes" in big.statusBar().currentMessage()
