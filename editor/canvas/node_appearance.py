"""How an asset node is drawn on the canvas: summary, start mark, problem marks and test coverage.

What each type looks like (label, colour, summary lines) is its ``editor.canvas.node_types.NodeView``;
this module paints it. Nodes show a compact summary of their key settings painted by
``AssetNodeItem`` itself (no embedded widgets: NodeGraphQt's node widgets cost ~25 ms a node).
"""

from __future__ import annotations

import html
import math

from NodeGraphQt.constants import ICON_NODE_BASE, NodeEnum
from NodeGraphQt.qgraphics.node_abstract import AbstractNodeItem
from NodeGraphQt.qgraphics.node_base import NodeItem
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QGraphicsItem

from editor.canvas.node_types import SUMMARY_LINES, view_of
from editor.model.bypass import shown_fill, shown_opacity, shown_title
from editor.model.game_events import marked_exits, marks_of
from runtime.asset.model import Asset, NodeBase

TERMINAL_COLOURS = {"start": (46, 125, 60), "end": (120, 48, 48)}
START_BORDER = (90, 220, 110, 255)
GAME_EVENT_COLOUR = (70, 205, 225)  # not the warning's amber: a marked node is often warned about
SEVERITY_COLOURS = {"error": (230, 70, 60), "warning": (235, 170, 40)}
INPUT_PORT = "in"
START_PORT = "start"
# Test coverage: counts in a calm colour; what a run never reached in a warning colour.
COVERAGE_COLOUR = (120, 200, 230)
NEVER_TAKEN_COLOUR = (255, 120, 60)


_ICONS: dict[str, QPixmap] = {}


def _icon_pixmap(path: str) -> QPixmap:
    """The node icon NodeGraphQt's ``NodeItem.icon`` makes from ``path``, made once per path."""
    pixmap = _ICONS.get(path)
    if pixmap is None:
        pixmap = QPixmap(path)
        if pixmap.size().height() > NodeEnum.ICON_SIZE.value:
            pixmap = pixmap.scaledToHeight(NodeEnum.ICON_SIZE.value, Qt.TransformationMode.SmoothTransformation)
        if pixmap.size().width() > NodeEnum.ICON_SIZE.value:
            pixmap = pixmap.scaledToWidth(NodeEnum.ICON_SIZE.value, Qt.TransformationMode.SmoothTransformation)
        _ICONS[path] = pixmap
    return pixmap


def summary_lines(node: NodeBase, asset: Asset) -> list[str]:
    """The key settings painted on the node, as its type's view describes them."""
    return view_of(node.type_name).summary(node, asset)


# A file opens framed to fit (editor.canvas: frame_selection), about 0.5x on a 1366x768 screen and
# 1x on 1920x1080; the summary is set larger than the title so it stays readable there.
SUMMARY_POINT_SIZE = 11.0
_SUMMARY_FONT = QFont()
_SUMMARY_FONT.setPointSizeF(SUMMARY_POINT_SIZE)
_SUMMARY_PAD = 6.0
_SUMMARY_MAX_WIDTH = 20.0  # in ems: a line longer than this (a very wide word) is cut with an ellipsis


def _summary_metrics() -> tuple[QFontMetricsF, float, float]:
    """The summary font's metrics, its line height and the widest a line may be."""
    metrics = QFontMetricsF(_SUMMARY_FONT)
    return metrics, metrics.lineSpacing() + 1.0, _SUMMARY_MAX_WIDTH * metrics.height()


_SUMMARY_SAMPLE = "Explain in one or two sentences\u2026"  # SUMMARY_WIDTH characters of an example's summary


def summary_box(lines: int) -> tuple[float, float]:
    """The size of a summary of ``lines`` lines as painted on a node: the same for any text in it.

    A box that grew with its text made nodes grow over their neighbours as a prompt was typed; this
    one holds SUMMARY_LINES lines of SUMMARY_WIDTH characters (node_types wraps and cuts to that),
    and a line wider than the box (wide letters) is elided when painted."""
    if not lines:
        return 0.0, 0.0
    metrics, line_height, widest = _summary_metrics()
    # As wide as a long line of prose (the examples' widest), and a little more; the rarer wider line
    # (capitals, long words) is elided. Measured on text: a font's average character width is not
    # the same before the application has loaded its fonts.
    text_width = math.ceil(min(widest, 1.04 * metrics.horizontalAdvance(_SUMMARY_SAMPLE)))  # whole: aligning adds no float dust
    return text_width + 2 * _SUMMARY_PAD + 8, max(lines, SUMMARY_LINES) * line_height + _SUMMARY_PAD


class AssetNodeItem(NodeItem):
    """A node item that also paints a settings summary, the start mark and problem marks."""

    def __init__(self, name: str = "node", parent=None) -> None:
        super().__init__(name, parent)
        self.summary: list[str] = []
        self.is_start = False
        self.game_events: list[str] = []  # the game events marked on it (editor.model.game_events)
        self.game_exits: set[str] = set()  # its ports a game event is marked on
        self.problem_tip = ""  # its title and problems (editor.canvas.overlays)
        self.problem_severity: str | None = None
        self._icon_item.setVisible(False)
        self.setCacheMode(NodeItem.CacheMode.DeviceCoordinateCache)
        self._placed_before_scene = False

    def pre_init(self, viewer, pos=None) -> None:
        # Lay the node out and place it before it enters the scene. Moving an item that is in a
        # scene makes Qt visit every port of the scene (they ask for scene-position changes), so
        # laying out each node after adding it made building a large canvas quadratic.
        self.draw_node()
        if pos:
            self.setPos(float(pos[0]), float(pos[1]))
        self._placed_before_scene = True

    def post_init(self, viewer=None, pos=None) -> None:
        if self._placed_before_scene:
            self._placed_before_scene = False  # a port added later lays the node out again
            return
        super().post_init(viewer, pos)

    @NodeItem.layout_direction.setter
    def layout_direction(self, value: int = 0) -> None:
        # NodeItem lays the node out again here; before the node is in a scene that
        # work is thrown away (post_init lays it out), and it is a third of opening a file.
        AbstractNodeItem.layout_direction.fset(self, value)
        if self.scene() is not None:
            self.draw_node()

    # NodeGraphQt sets every property of a new node before it enters the scene (``from_dict``).
    # Its width and height setters measure the node each time, which ``pre_init``'s layout does
    # again and sets for good (``_set_base_size``), and its icon setter loads and scales the same
    # picture for every node: 0.4 of 1.8 s of drawing 500 nodes under a profiler.

    @NodeItem.width.setter
    def width(self, width: float = 0.0) -> None:
        if self.scene() is None and not getattr(self, "_placed_before_scene", False):
            AbstractNodeItem.width.fset(self, width)  # measured when laid out
        else:
            NodeItem.width.fset(self, width)

    @NodeItem.height.setter
    def height(self, height: float = 0.0) -> None:
        if self.scene() is None and not getattr(self, "_placed_before_scene", False):
            AbstractNodeItem.height.fset(self, height)
        else:
            NodeItem.height.fset(self, height)

    @NodeItem.icon.setter
    def icon(self, path: str | None = None) -> None:
        self._properties["icon"] = path
        self._icon_item.setPixmap(_icon_pixmap(path or ICON_NODE_BASE))
        if self.scene():
            self.post_init()
        self.update()

    def _summary_size(self) -> tuple[float, float]:
        return summary_box(len(self.summary))

    def _calc_size_horizontal(self):
        width, height = super()._calc_size_horizontal()
        extra_w, extra_h = self._summary_size()
        # The title is centred, so leave room for the problem badge on its right.
        title_w = self._text_item.boundingRect().width() + (96 if self.game_events else 40)  # and the GAME tag's on its left
        return max(width, extra_w, title_w), height + extra_h

    def _align_icon_horizontal(self, h_offset, v_offset):
        pass  # no icon: the colour says the category

    def paint(self, painter: QPainter, option, widget) -> None:
        if self.scene() is None or self.scene().viewer() is None:
            return  # being removed: NodeGraphQt's paint needs the viewer
        super().paint(painter, option, widget)
        rect = self.boundingRect()
        painter.save()
        if self.summary and not self._proxy_mode:  # too small to read when zoomed far out
            _w, h = self._summary_size()
            area = QRectF(rect.left() + 4, rect.bottom() - h - 2, rect.width() - 8, h)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(0, 0, 0, 60))
            painter.drawRoundedRect(area, 3, 3)
            metrics, line_height, _widest = _summary_metrics()
            painter.setFont(_SUMMARY_FONT)
            painter.setPen(QColor(235, 235, 235))
            y = area.top() + _SUMMARY_PAD / 2
            width = area.width() - 2 * _SUMMARY_PAD
            for line in self.summary:
                painter.drawText(QRectF(area.left() + _SUMMARY_PAD, y, width, line_height),
                                 Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                                 metrics.elidedText(line, Qt.TextElideMode.ElideRight, width))
                y += line_height
        if self.is_start:
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(QColor(*START_BORDER), 2.0))
            painter.drawRoundedRect(rect.adjusted(1, 1, -1, -1), 4, 4)
        if self.game_events:
            self._paint_game_tag(painter, rect)
        if self.problem_severity:
            colour = QColor(*SEVERITY_COLOURS[self.problem_severity])
            painter.setPen(QPen(colour, 2.0))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(rect.adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
            badge = QRectF(rect.right() - 20, rect.top() + 3, 15, 15)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(colour)
            painter.drawEllipse(badge)
            _bold_text(painter, badge, "!", 8, QColor(20, 20, 20))
        painter.restore()

    def refresh_tooltip(self) -> None:
        """The tooltip: its problems, then the game events marked on it."""
        marks = f"The game acts on this node: {html.escape('; '.join(self.game_events))}" if self.game_events else ""
        self.setToolTip("<br/>".join(t for t in (self.problem_tip, marks) if t))

    def _paint_game_tag(self, painter: QPainter, rect: QRectF) -> None:
        """A "GAME" tag at the title's left, and a dashed border: the game acts on this node."""
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.setPen(QPen(QColor(*GAME_EVENT_COLOUR), 1.5, Qt.PenStyle.DashLine))
        painter.drawRoundedRect(rect.adjusted(2.5, 2.5, -2.5, -2.5), 4, 4)
        for port, text in self._output_items.items():  # a marked exit: a diamond before its label
            if port.name in self.game_exits and text.isVisible():
                label = text.mapRectToParent(text.boundingRect())
                x, y = label.left() - 2, label.center().y()
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(QColor(*GAME_EVENT_COLOUR))
                painter.drawPolygon([QPointF(x - 5, y), QPointF(x, y - 5), QPointF(x + 5, y), QPointF(x, y + 5)])
        tag = QRectF(rect.left() + 5, rect.top() + 3, 40, 15)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(*GAME_EVENT_COLOUR))
        painter.drawRoundedRect(tag, 3, 3)
        _bold_text(painter, tag, "GAME", 7, QColor(30, 24, 8))


def coverage_label_html(label: str, count: int) -> str:
    """An exit's label with how often a test run took it; a never-taken exit's is all in the warning colour."""
    if count:
        return f"{html.escape(label)} <span style='color:{QColor(*COVERAGE_COLOUR).name()}'>\u00d7{count}</span>"
    return f"<span style='color:{QColor(*NEVER_TAKEN_COLOUR).name()}'><b>{html.escape(label)} \u00d70</b></span>"


class VisitBadge(QGraphicsItem):
    """How often a test run visited a node: a small "\u00d7N" pill over the node's top-right corner
    (a child of the node, so it moves with it; never visited: the warning colour)."""

    PAD = 4.0

    def __init__(self, parent: QGraphicsItem) -> None:
        super().__init__(parent)
        self.count = 0
        self._font = QFont()
        self._font.setBold(True)
        self._font.setPointSizeF(9)
        self.setZValue(2)

    @property
    def text(self) -> str:
        return f"\u00d7{self.count}"

    def set_count(self, count: int) -> None:
        self.prepareGeometryChange()
        self.count = count
        self.setToolTip(f"Visited {count} time{'s' if count != 1 else ''} in the last test run"
                        if count else "Never visited in the last test run")
        self.update()

    def boundingRect(self) -> QRectF:
        metrics = QFontMetricsF(self._font)
        return QRectF(0, 0, metrics.horizontalAdvance(self.text) + 2 * self.PAD, metrics.height() + 2)

    def paint(self, painter: QPainter, option, widget=None) -> None:
        rect = self.boundingRect()
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        edge = QColor(*NEVER_TAKEN_COLOUR) if not self.count else QColor(*COVERAGE_COLOUR)
        painter.setPen(QPen(edge, 1.0))
        painter.setBrush(edge if not self.count else QColor(25, 45, 60))
        inner = rect.adjusted(0.5, 0.5, -0.5, -0.5)
        painter.drawRoundedRect(inner, inner.height() / 2, inner.height() / 2)
        painter.setFont(self._font)
        painter.setPen(QColor(20, 20, 20) if not self.count else QColor(*COVERAGE_COLOUR))
        painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, self.text)
        painter.restore()


class TerminalItem(NodeItem):
    """The START and END terminals: canvas-only nodes with a single port."""

    def __init__(self, name: str = "terminal", parent=None) -> None:
        super().__init__(name, parent)
        self._icon_item.setVisible(False)

    def _align_icon_horizontal(self, h_offset, v_offset):
        pass

    def paint(self, painter: QPainter, option, widget) -> None:
        if self.scene() is not None and self.scene().viewer() is not None:
            super().paint(painter, option, widget)

    def _calc_size_horizontal(self):
        width, height = super()._calc_size_horizontal()
        return max(width, 90.0), height


def _bold_text(painter: QPainter, rect: QRectF, text: str, points: float, colour: QColor) -> None:
    """``text`` in bold, centred in ``rect``: a badge's or tag's label."""
    painter.setPen(colour)
    font = QFont()
    font.setBold(True)
    font.setPointSizeF(points)
    painter.setFont(font)
    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)


def apply_appearance(item: AssetNodeItem, node: NodeBase, asset: Asset) -> None:
    """Bring a canvas item up to date with its asset node (title, colour, summary, start mark)."""
    changed = False
    title = shown_title(node)  # a bypassed node is greyed and says so
    if item.name != title:
        item.name = title
        changed = True
    colour = (*shown_fill(node, view_of(node.type_name).fill), 255)
    if item.opacity() != shown_opacity(node):
        item.setOpacity(shown_opacity(node))
    if tuple(item.color) != colour:
        item.color = colour
        item.border_color = tuple(min(255, c + 40) for c in colour[:3]) + (255,)
    summary = summary_lines(node, asset)
    if summary != item.summary:
        item.summary = summary
        changed = True
    marks = marks_of(asset, node.id)
    exits = marked_exits(asset, node.id)
    if marks != item.game_events or exits != item.game_exits:
        item.game_events, item.game_exits = marks, exits
        item.refresh_tooltip()
        changed = True
    is_start = asset.start_node == node.id
    if is_start != item.is_start:
        item.is_start = is_start
        item.update()
    if changed and item.scene() is not None:
        item.draw_node()
    item.update()
