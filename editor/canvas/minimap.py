"""The minimap: the whole graph, small, in a corner of the canvas, with the view's rectangle on it.

Every node is a small rectangle in its category's colour (the backdrops of comments under them,
when the asset has comments); the part of the graph the canvas shows is a rectangle drawn over
them, and a click or a drag on the minimap centres the canvas there.

It stays cheap at thousands of nodes: the nodes are drawn once into a pixmap (``picture``), which
is rebuilt only after the asset changed, and then once however many changes came in one step of
the event loop (a zero-time timer coalesces them); each paint draws that pixmap and one rectangle.
The scene itself is never rendered. The model (positions) is what it draws, with each drawn node's
size (a node not drawn yet is taken to be a new node's size).
"""

from __future__ import annotations

import math
import operator
from collections import defaultdict
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QAction, QColor, QKeySequence, QMouseEvent, QPainter, QPaintEvent, QPen, QPixmap
from PySide6.QtWidgets import QMainWindow, QMenu, QWidget

from editor import settings as app_settings
from editor.canvas.drawing import NEW_NODE_SIZE
from editor.canvas.node_appearance import TERMINAL_COLOURS
from editor.canvas.node_types import view_of

if TYPE_CHECKING:
    from editor.canvas import Canvas

SHOWN_KEY = "view/minimap"  # QSettings: whether the minimap is shown (it is, until hidden)
MARGIN = 12  # from the canvas's edges, in pixels
PADDING = 6  # inside the minimap, around the graph
MIN_WIDTH, MAX_WIDTH, WIDTH_SHARE = 150, 280, 0.2  # its width: a share of the canvas's, within limits
BASE_ASPECT = 0.62  # height / width of a minimap of ``MIN_WIDTH``..``MAX_WIDTH``; it follows the graph's
MIN_ASPECT, MAX_ASPECT = 0.4, 2.0  # own shape within these, keeping about the same area
# Never more than this share of the canvas's height, nor this many pixels: a canvas made short by the
# bottom docks (Test at 1366x768) keeps most of its height for the graph (0.45 covered 40 % of it).
MAX_HEIGHT_SHARE, MAX_HEIGHT = 0.25, 200
MIN_MARK = 1.5  # pixels: a node smaller than this on the minimap is drawn this size (still seen)
BACKGROUND = QColor(24, 26, 30, 235)
BORDER = QColor(90, 96, 108)
VIEW_PEN = QColor(240, 240, 240)
SELECTED_PEN = QColor(255, 196, 64)
VIEW_FILL = QColor(255, 255, 255, 36)


def shown_in_settings() -> bool:
    return bool(app_settings.app_settings().value(SHOWN_KEY, True, type=bool))


def remember_shown(shown: bool) -> None:
    store = app_settings.app_settings()
    store.setValue(SHOWN_KEY, bool(shown))
    store.sync()


class Minimap(QWidget):
    """The minimap over one canvas's view (a child of the view, kept in its bottom-right corner)."""

    def __init__(self, canvas: Canvas) -> None:
        super().__init__(canvas.viewer)
        self.setObjectName("canvasMinimap")
        self.canvas = canvas
        self.document = canvas.document
        self.viewer = canvas.viewer
        self.enabled = True  # the View menu's choice; shown when enabled and the asset has nodes
        self.rebuilds = 0  # how many times the picture was drawn (tests check changes are coalesced)
        self.picture = QPixmap()
        self._world = QRectF()  # the scene rectangle the picture shows
        self._dirty = True
        # node id -> (width, height, colour): kept across rebuilds, as a move changes neither
        self._looks: dict[str, tuple[float, float, tuple[int, int, int]]] = {}
        self.toggle_action: QAction | None = None  # View > Show Minimap, once installed
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("Minimap: click or drag to show that part of the graph (View \u25b8 Show Minimap)")
        # Not WA_OpaquePaintEvent: an opaque child cuts a hole in the view's painted region, and the
        # scene then paints through a clip region that made every frame of a large graph slower (at
        # 5,000 nodes in view, by a third). Drawn over the scene, it is repainted with each frame.
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self.rebuild_now)
        d = self.document
        for signal in (d.node_moved, d.terminal_moved):
            signal.connect(self.schedule_rebuild)
        for signal in (d.node_added, d.node_removed, d.node_changed, d.node_renamed):  # a node's exits
            signal.connect(self._forget_looks)  # or title change its size, its type its colour
        d.reset.connect(self._forget_all_looks)
        canvas.built.connect(self._forget_all_looks)  # every node drawn: their real sizes are known
        d.agent_changed.connect(self._on_agent_changed)
        for signal in (d.comment_added, d.comment_removed, d.comment_changed):  # backdrops and notes
            signal.connect(self.schedule_rebuild)
        self._selected: list[str] = []
        self._selected_rects: list[QRectF] = []  # on the minimap, drawn over the picture
        canvas.selection_changed.connect(self._on_selection_changed)
        # The view pans and zooms by its own code (NodeGraphQt), which says nothing; each pan or zoom
        # repaints the whole viewport, and with it the minimap over it, which reads the view's
        # rectangle as it paints. Only the viewport's size is followed here (the minimap's place).
        self.viewer.viewport().installEventFilter(self)
        self._place()
        self.schedule_rebuild()

    # --- following the asset and the view ---------------------------------------------------------

    def _forget_looks(self, node_id: str, other: str = "") -> None:
        self._looks.pop(node_id, None)
        self._looks.pop(other, None)  # a rename's new id (a node_changed's field name: not an id kept here)
        self.schedule_rebuild()

    def _forget_all_looks(self) -> None:
        self._looks.clear()
        self.schedule_rebuild()

    def _on_selection_changed(self, node_ids: list[str]) -> None:
        self._selected = list(node_ids)
        self._selected_rects = self._rects_of_selected()
        self.update()

    def _rects_of_selected(self) -> list[QRectF]:
        scale, dx, dy = self._mapping()
        doc, rects = self.document, []
        for node_id in self._selected:
            if doc.has_node(node_id):
                node = doc.node(node_id)
                w, h, _fill = self._looks.get(node_id) or self._look_of(node)
                rects.append(self._to_widget_rect(QRectF(*node.position, w, h), scale, dx, dy))
        return rects

    def _on_agent_changed(self, field: str) -> None:
        if field == "comments":
            self.schedule_rebuild()

    def schedule_rebuild(self, *_changed: object) -> None:
        """The asset changed: draw the picture again once the current step of the event loop is done
        (a paste of a hundred nodes, an undo of a layout: one rebuild)."""
        self._dirty = True
        self._update_shown()
        if self.isVisible() and not self._timer.isActive():
            self._timer.start()

    def set_enabled(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self._update_shown()

    def _update_shown(self) -> None:
        wanted = self.enabled and bool(self.document.asset.nodes)
        if wanted == self.isHidden():
            self.setVisible(wanted)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._place()
        if self._dirty:
            self.rebuild_now()  # hidden, it kept no picture up to date

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.Resize, QEvent.Type.Show):
            self._place()
        return False

    def visible_scene_rect(self) -> QRectF:
        """The part of the scene the canvas shows."""
        return self.viewer.mapToScene(self.viewer.viewport().rect()).boundingRect()

    def _place(self, rebuild: bool = True) -> None:
        """Bottom-right of the canvas, sized to a share of it and to the graph's shape (a new size
        needs a new picture: with ``rebuild``, it is asked for)."""
        area = self.viewer.viewport().geometry()
        base = max(MIN_WIDTH, min(MAX_WIDTH, area.width() * WIDTH_SHARE))
        shape = self._world.height() / self._world.width() if self._world.width() > 0 else BASE_ASPECT
        shape = max(MIN_ASPECT, min(MAX_ASPECT, shape))
        # about the same area whatever the graph's shape: a tall graph gets a tall minimap
        width = min(MAX_WIDTH, base * math.sqrt(BASE_ASPECT / shape), area.width() - 2 * MARGIN)
        height = width * shape
        room = min(MAX_HEIGHT, area.height() * MAX_HEIGHT_SHARE)
        if height > room:
            width, height = width * room / height, room
        width, height = max(40, int(width)), max(30, int(height))
        geometry = (area.right() - MARGIN - width + 1, area.bottom() - MARGIN - height + 1, width, height)
        if self.geometry().getRect() != geometry:
            self.setGeometry(*geometry)
            if rebuild:
                self._dirty = True
                if self.isVisible() and not self._timer.isActive():
                    self._timer.start()

    # --- the picture ------------------------------------------------------------------------------

    def node_boxes(self) -> tuple[list[tuple[float, float, float, float, tuple[int, int, int]]],
                                  list[tuple[QRectF, QColor]]]:
        """(x, y, width, height, colour) in the scene of every node and terminal, and (rectangle,
        colour) of every comment (backdrops and notes). Plain tuples: at 5,000 nodes a Qt object per
        node was most of a rebuild."""
        drawing = self.canvas.drawing
        looks = self._looks
        boxes = []
        for node in self.document.asset.nodes:
            look = looks.get(node.id)
            if look is None:
                look = self._look_of(node)
            x, y = node.position
            boxes.append((x, y, *look))
        for terminal, colour in ((drawing.start, TERMINAL_COLOURS["start"]), (drawing.end, TERMINAL_COLOURS["end"])):
            if terminal is not None:
                x, y = terminal.view.xy_pos
                boxes.append((x, y, float(terminal.view.width), float(terminal.view.height), tuple(colour)))
        comments = []
        for comment in getattr(self.document.asset, "comments", None) or []:  # Asset.comments, once it exists
            x, y = comment.position
            w, h = comment.size
            colour = QColor(*comment.color)
            colour.setAlpha(110 if getattr(comment, "kind", "backdrop") == "backdrop" else 170)
            comments.append((QRectF(x, y, w, h), colour))
        return boxes, comments

    def _look_of(self, node) -> tuple[float, float, tuple[int, int, int]]:
        """A node's drawn size (a new node's until it is drawn) and colour on the minimap."""
        fill = tuple(min(255, c + 30) for c in view_of(node.type_name).fill)
        canvas_node = self.canvas.drawing.nodes.get(node.id)
        if canvas_node is None:
            return (*NEW_NODE_SIZE, fill)  # not kept: its real size comes when it is drawn
        look = (float(canvas_node.view.width), float(canvas_node.view.height), fill)
        self._looks[node.id] = look
        return look

    def rebuild_now(self) -> None:
        """Draw the picture of the nodes now (``schedule_rebuild`` asks for it later)."""
        self._timer.stop()
        self._dirty = False
        self.rebuilds += 1
        boxes, comments = self.node_boxes()
        if boxes:
            xs, ys, ws, hs, _fills = zip(*boxes, strict=True)
            left, top = min(xs), min(ys)
            right = max(map(operator.add, xs, ws))
            bottom = max(map(operator.add, ys, hs))
            world = QRectF(left, top, right - left, bottom - top)
        else:
            world = QRectF()
        for rect, _ in comments:
            world = world.united(rect) if not world.isNull() else QRectF(rect)
        if world.isNull() or world.width() <= 0 or world.height() <= 0:
            world = QRectF(world.x(), world.y(), max(1.0, world.width()), max(1.0, world.height()))
        pad = 0.04 * max(world.width(), world.height())
        self._world = world.adjusted(-pad, -pad, pad, pad)
        self._place(rebuild=False)  # the graph's shape may give the minimap another size: drawn at it now
        ratio = self.devicePixelRatioF()
        size = self.size()
        self.picture = QPixmap(QSize(max(1, round(size.width() * ratio)), max(1, round(size.height() * ratio))))
        self.picture.setDevicePixelRatio(ratio)
        self.picture.fill(BACKGROUND)
        scale, dx, dy = self._mapping()
        # One drawRects call per colour: a Python call per node would be most of the time.
        by_colour: dict[tuple[int, int, int], list[QRectF]] = defaultdict(list)
        least = MIN_MARK
        for x, y, w, h, colour in boxes:
            w, h = w * scale, h * scale
            by_colour[colour].append(QRectF(x * scale + dx, y * scale + dy, max(least, w), max(least, h)))
        painter = QPainter(self.picture)
        try:
            painter.setPen(Qt.PenStyle.NoPen)
            for rect, colour in comments:
                painter.setBrush(colour)
                painter.drawRect(self._to_widget_rect(rect, scale, dx, dy))
            for colour, rects in by_colour.items():
                painter.setBrush(QColor(*colour))
                painter.drawRects(rects)
        finally:
            painter.end()
        self._selected_rects = self._rects_of_selected()
        self.update()

    def _mapping(self) -> tuple[float, float, float]:
        """(scale, dx, dy) taking a scene point to the minimap: x * scale + dx, y * scale + dy."""
        inner = QRectF(self.rect()).adjusted(PADDING, PADDING, -PADDING, -PADDING)
        world = self._world
        if world.width() <= 0 or world.height() <= 0 or inner.width() <= 0 or inner.height() <= 0:
            return 1.0, 0.0, 0.0
        scale = min(inner.width() / world.width(), inner.height() / world.height())
        dx = inner.center().x() - world.center().x() * scale
        dy = inner.center().y() - world.center().y() * scale
        return scale, dx, dy

    @staticmethod
    def _to_widget_rect(rect: QRectF, scale: float, dx: float, dy: float) -> QRectF:
        return QRectF(rect.x() * scale + dx, rect.y() * scale + dy,
                      max(MIN_MARK, rect.width() * scale), max(MIN_MARK, rect.height() * scale))

    def to_minimap(self, scene_point: QPointF) -> QPointF:
        scale, dx, dy = self._mapping()
        return QPointF(scene_point.x() * scale + dx, scene_point.y() * scale + dy)

    def to_scene(self, point: QPointF) -> QPointF:
        """The scene point at a point of the minimap."""
        scale, dx, dy = self._mapping()
        return QPointF((point.x() - dx) / scale, (point.y() - dy) / scale)

    def viewport_rect(self) -> QRectF:
        """The view's rectangle as drawn on the minimap (before it is kept inside the minimap's edges)."""
        scale, dx, dy = self._mapping()
        visible = self.visible_scene_rect()
        return QRectF(visible.x() * scale + dx, visible.y() * scale + dy,
                      visible.width() * scale, visible.height() * scale)

    # --- painting and the mouse --------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:
        if self._dirty and not self._timer.isActive():
            self._timer.start()
        painter = QPainter(self)
        try:
            if self.picture.isNull():
                painter.fillRect(self.rect(), BACKGROUND)
            else:
                painter.drawPixmap(self.rect(), self.picture)  # stretched for a moment after a resize
            if self._selected_rects:
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.setPen(QPen(SELECTED_PEN, 1.0))
                painter.drawRects(self._selected_rects)
            painter.setBrush(VIEW_FILL)
            painter.setPen(QPen(VIEW_PEN, 1.0))
            painter.drawRect(self._kept_inside(self.viewport_rect()))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(BORDER, 1.0))
            painter.drawRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5))
        finally:
            painter.end()

    def _kept_inside(self, rect: QRectF) -> QRectF:
        """``rect`` within the minimap, at least a few pixels of it: a view far from the graph still
        shows at the edge it lies beyond."""
        edge = QRectF(self.rect()).adjusted(1.5, 1.5, -1.5, -1.5)
        least = 4.0
        left = min(max(rect.left(), edge.left()), edge.right() - least)
        top = min(max(rect.top(), edge.top()), edge.bottom() - least)
        right = max(min(rect.right(), edge.right()), left + least)
        bottom = max(min(rect.bottom(), edge.bottom()), top + least)
        return QRectF(QPointF(left, top), QPointF(right, bottom))

    def centre_view_at(self, point: QPointF) -> None:
        """Centre the canvas on the scene point under ``point`` of the minimap."""
        target = self.to_scene(point)
        viewer = self.viewer
        # NodeGraphQt shows its scene range fitted to the view, centred: moving the range pans.
        viewer._scene_range.translate(target - viewer._scene_range.center())
        viewer._update_scene()
        self.update()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.centre_view_at(event.position())
            event.accept()
        else:
            event.ignore()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if event.buttons() & Qt.MouseButton.LeftButton:
            self.centre_view_at(event.position())
            event.accept()
        else:
            event.ignore()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        event.accept()

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        event.accept()  # not the canvas's: a double-click there opens a node


def _view_menu(window: QMainWindow) -> QMenu | None:
    for action in window.menuBar().actions():
        menu = action.menu()
        if menu is not None and menu.title().replace("&", "") == "View":
            return menu
    return None


def install_minimap(window: QMainWindow) -> Minimap:
    """The minimap on ``window``'s canvas, and View \u25b8 Show Minimap (Ctrl+Shift+M), which the
    settings remember."""
    minimap = Minimap(window.canvas)  # type: ignore[attr-defined]
    action = QAction("Show &Minimap", window)
    action.setObjectName("showMinimapAction")
    action.setCheckable(True)
    action.setShortcut(QKeySequence("Ctrl+Shift+M"))
    tip = "Show the whole graph small in the canvas's corner; click or drag on it to go there (Ctrl+Shift+M)"
    action.setStatusTip(tip)
    action.setToolTip(tip)
    shown = shown_in_settings()
    action.setChecked(shown)
    minimap.set_enabled(shown)

    def toggled(checked: bool) -> None:
        minimap.set_enabled(checked)
        remember_shown(checked)

    action.toggled.connect(toggled)
    window.addAction(action)
    minimap.toggle_action = action
    menu = _view_menu(window)
    if menu is not None:
        actions = menu.actions()
        # after the framing actions (Frame Selection, Zoom to Selection, Auto-Layout): the first separator
        before = next((a for a in actions if a.isSeparator()), None)
        menu.insertAction(before, action) if before is not None else menu.addAction(action)
    return minimap
