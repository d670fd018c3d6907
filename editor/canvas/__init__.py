"""The canvas: NodeGraphQt as a view over the ``Document``.

``Canvas`` is the one object the rest of the editor uses. It is made of four parts, one module each:

- ``drawing``: the NodeGraphQt scene built from the asset model (a large graph a slice at a time);
- ``following``: the document's change events bring the drawing up to date, whichever way the
  change came (the canvas, the properties dock, undo, a paste);
- ``gestures``: what a person does on the canvas becomes ``editor.model.commands`` on the document;
- ``overlays``: the problem marks, a turn's path and a test run's coverage.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QEvent, QObject, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import QLabel, QMenu, QWidget

from editor.canvas.comments import CommentLayer
from editor.canvas.drawing import END_KEY, NEW_NODE_SIZE, START_KEY, AssetCanvasNode, Drawing, key_of
from editor.canvas.following import DocumentFollower
from editor.canvas.gestures import NODE_MIME, Gestures, node_type_mime
from editor.canvas.node_appearance import apply_appearance
from editor.canvas.overlays import Overlays
from editor.model.document import Document
from runtime.problems import Problem

__all__ = [
    "END_KEY", "NODE_MIME", "START_KEY", "Canvas", "add_action", "context_menu", "node_type_mime",
    "set_background",
]

EMPTY_HINT = ("<p><b>An empty agent</b></p><p>Press <b>Tab</b> to add a node by name, drag one from the "
              "Palette, or right-click for the Add Node menu.<br/>The first node you add is where each turn "
              "starts.</p><p>Or open a worked example: File \u25b8 Examples.</p>")
LEGIBLE_SCALE = 0.85  # at this scale or more the summaries painted on nodes are legible (>= 9 px capitals)


class Canvas(QObject):
    """Keeps a NodeGraph in step with a Document and turns gestures into commands."""

    selection_changed = Signal(list)  # asset ids of the selected nodes
    built = Signal()  # every node of the asset is on the canvas (after a progressive rebuild)
    file_dropped = Signal(str)
    text_dropped = Signal(str, tuple)  # text, scene position (pasted nodes)
    node_opened = Signal(str)  # a node was double-clicked (a Subgraph node opens its behaviour)

    def __init__(self, document: Document, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.drawing = Drawing(document, self)
        self.overlays = Overlays(self.drawing, self)
        self.gestures = Gestures(self.drawing, self)
        self.follower = DocumentFollower(document, self.drawing, self.overlays, self)
        self.comments = CommentLayer(self.drawing, self)  # backdrops and notes
        self.graph = self.drawing.graph
        self.viewer = self.drawing.viewer
        self.search = self.gestures.search
        self.drawing.built.connect(self.built)
        self.drawing.selection_changed.connect(self.selection_changed)
        # The viewer holds these lambdas, and so this canvas (and its parts) as long as it lives: a
        # canvas whose NodeGraph is left to a later garbage collection crashed that collection.
        self.viewer.node_selection_changed.connect(lambda *_: self.selection_changed.emit(self.selected_ids()))
        self.viewer.node_selected.connect(lambda *_: self.selection_changed.emit(self.selected_ids()))
        # NodeGraphQt reports a click's selection before Qt applies it: a click on one node of several
        # selected left the Properties dock saying "2 nodes selected". Said again once the click is done.
        self._said: list[str] | None = None
        self.selection_changed.connect(self._remember_said)
        self.gestures.file_dropped.connect(self.file_dropped)
        self.graph.node_double_clicked.connect(lambda node: self.node_opened.emit(key_of(node)))
        self.gestures.text_dropped.connect(self.text_dropped)
        # An asset with no nodes (File > New) is a normal start: say how to begin, over the canvas
        # a child of the view, not of its viewport: panning scrolls the viewport's children with it
        self.empty_hint = QLabel(EMPTY_HINT, self.viewer)
        self.empty_hint.setObjectName("emptyCanvasHint")
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setTextFormat(Qt.TextFormat.RichText)
        self.empty_hint.setStyleSheet("QLabel#emptyCanvasHint { color: #9a9a9a; font-size: 14px;"
                                      " background: transparent; }")
        self.empty_hint.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)  # drops still land
        self.viewer.viewport().installEventFilter(self)  # kept centred as the canvas resizes
        for signal in (document.node_added, document.node_removed, document.reset):
            signal.connect(self._show_empty_hint)
        self._show_empty_hint()

    def _show_empty_hint(self, *_changed: object) -> None:
        self.empty_hint.setVisible(not self.document.asset.nodes)
        self._centre_empty_hint()

    def _centre_empty_hint(self) -> None:
        area = self.viewer.viewport().geometry()
        width = max(120, min(440, area.width() - 40))
        height = self.empty_hint.heightForWidth(width)
        # above the middle, where the START and END terminals sit
        top = area.top() + max(12, area.height() // 4 - height // 2)
        self.empty_hint.setGeometry(area.center().x() - width // 2, top, width, height)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.Resize, QEvent.Type.Show):
            self._centre_empty_hint()
        elif event.type() == QEvent.Type.MouseButtonRelease:
            QTimer.singleShot(0, self, self._say_selection_if_changed)
        return False

    def _remember_said(self, node_ids: list[str]) -> None:
        self._said = list(node_ids)

    def _say_selection_if_changed(self) -> None:
        selected = self.selected_ids()
        if selected != self._said:
            self.selection_changed.emit(selected)

    @property
    def widget(self) -> QWidget:
        return self.graph.widget

    @property
    def building(self) -> bool:
        """Whether some nodes of the document are not drawn yet."""
        return self.drawing.building

    # --- the drawing ------------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Throw the canvas away and draw the document's asset afresh (``Drawing.rebuild``)."""
        self.drawing.rebuild()

    def finish_building(self) -> None:
        """Draw every node not drawn yet, now."""
        self.drawing.finish_building()

    def canvas_node(self, node_id: str) -> AssetCanvasNode:
        return self.drawing.canvas_node(node_id)

    def node_size(self, key: str) -> tuple[float, float]:
        return self.drawing.node_size(key)

    def selected_ids(self) -> list[str]:
        """Asset ids of the selected nodes, in document order."""
        return self.drawing.selected_ids()

    def shown_on(self, node_id: str) -> str:
        """The canvas node a runtime node id is shown on (``guard/classify``: the Subgraph node ``guard``)."""
        return self.overlays.shown_on(node_id)

    def refresh_node(self, node_id: str) -> None:
        """Paint a drawn node again from the document and what it reads (a behaviour file changed)."""
        if node_id in self.drawing.nodes:
            apply_appearance(self.drawing.nodes[node_id].view, self.document.node(node_id), self.document.asset)

    def selected_connections(self) -> tuple[list[tuple[str, str]], bool]:
        """The selected pipes: (node id, port) of each selected exit, and whether START's is selected."""
        return self.drawing.selected_connections()

    def select(self, node_ids: list[str]) -> None:
        self.drawing.select(node_ids)

    def select_all(self) -> None:
        self.drawing.finish_building()
        self.drawing.select(self.document.asset.node_ids())

    def center_on(self, node_id: str) -> None:
        self.drawing.center_on(node_id)

    def view_center(self) -> tuple[float, float]:
        return self.drawing.view_center()

    def scene_cursor_pos(self) -> tuple[float, float]:
        pos = self.viewer.scene_cursor_pos()
        return pos.x(), pos.y()

    # --- edits made by gestures and the window ---------------------------------------------------

    def add_node(self, type_name: str, pos: tuple[float, float] | None = None) -> str:
        """Add a node of ``type_name`` at ``pos``, or in free space without it; returns its id."""
        return self.gestures.add_node(type_name, pos)

    def free_spot(self, size: tuple[float, float] = NEW_NODE_SIZE) -> tuple[float, float]:
        """A top-left for a node of ``size`` that overlaps no node."""
        return self.gestures.free_spot(size)

    def clear_offset(self, nodes: list) -> tuple[float, float]:
        """How far to move copies of ``nodes`` so they overlap no node (``Gestures.clear_offset``)."""
        return self.gestures.clear_offset(nodes)

    def auto_layout(self) -> None:
        """Lay the graph out in layers from the start node; one undo step."""
        self.gestures.auto_layout()

    def show_node_search(self) -> None:
        """Tab search: at the mouse when it is over the canvas, else at the view's centre."""
        self.gestures.show_node_search()

    # --- overlays ---------------------------------------------------------------------------------

    def mark_problems(self, problems: list[Problem]) -> None:
        """Mark nodes that have errors or warnings; their tooltips list them."""
        self.overlays.mark_problems(problems)

    def problem_severity(self, node_id: str) -> str | None:
        return self.overlays.problem_severity(node_id)

    def highlight_path(self, node_ids: list[str]) -> None:
        """Outline the nodes a turn ran through, numbered in the order they ran; [] clears it."""
        self.overlays.highlight_path(node_ids)

    def highlighted_path(self) -> list[str]:
        """Ids of the nodes outlined by ``highlight_path``."""
        return self.overlays.highlighted_path()

    def show_coverage(self, visits: Mapping[str, int], exits: Mapping[tuple[str, str], int]) -> None:
        """Show a test run's counts on the nodes and exits until ``clear_coverage``."""
        self.overlays.show_coverage(visits, exits)

    def clear_coverage(self) -> None:
        self.overlays.clear_coverage()

    def visit_badge(self, node_id: str) -> str:
        """The coverage badge on a node ("\u00d73"), or "" when none is shown."""
        return self.overlays.visit_badge(node_id)

    def exit_label(self, node_id: str, port: str) -> tuple[str, bool]:
        """An exit's label as the canvas shows it, and whether it is marked as never taken."""
        return self.overlays.exit_label(node_id, port)

    # --- framing ---------------------------------------------------------------------------------

    def frame_selection(self) -> None:
        """Zoom to the selection, or to the whole graph when nothing is selected."""
        chosen = self.graph.selected_nodes() or self.graph.all_nodes()
        if not chosen:
            return
        # NodeViewer.zoom_to_nodes measures through a temporary item group, which takes
        # seconds for hundreds of nodes; the union of their rectangles is the same thing.
        rect = chosen[0].view.sceneBoundingRect()
        for node in chosen[1:]:
            rect = rect.united(node.view.sceneBoundingRect())
        if not self.graph.selected_nodes():  # the whole graph: with the nodes not drawn yet
            for node_id in self.drawing.pending:
                x, y = self.document.node(node_id).position
                rect = rect.united(QRectF(x, y, *NEW_NODE_SIZE))
        rect.adjust(-40, -40, 40, 40)
        viewer = self.viewer
        viewer._scene_range = rect
        viewer._update_scene()
        if viewer.get_zoom() > 0.1:
            viewer.reset_zoom(rect.center())

    def zoom_to_selection(self) -> bool:
        """Fit the selected nodes in the view (never closer than 1:1); False when none is selected."""
        if not self.graph.selected_nodes():
            return False
        self.frame_selection()
        return True

    def frame_readably(self) -> None:
        """F: the selection, or the whole graph when nothing is selected, but never below
        ``LEGIBLE_SCALE``: a graph too large for that is shown from START on (``frame_for_reading``),
        a selection too large around its centre."""
        selected = self.graph.selected_nodes()
        if not selected:
            self.frame_for_reading()
            return
        self.frame_selection()
        viewer = self.viewer
        if viewer.transform().m11() >= LEGIBLE_SCALE:
            return
        rect = selected[0].view.sceneBoundingRect()
        for node in selected[1:]:
            rect = rect.united(node.view.sceneBoundingRect())
        size = viewer.viewport().size()
        width, height = size.width() / LEGIBLE_SCALE, size.height() / LEGIBLE_SCALE
        centre = rect.center()
        viewer._scene_range = QRectF(centre.x() - width / 2, centre.y() - height / 2, width, height)
        viewer._update_scene()

    def frame_for_reading(self) -> None:
        """How an opened graph is first shown: whole, when that leaves its node summaries legible (a
        scale of ``LEGIBLE_SCALE``); otherwise at that scale from the START terminal on (a small
        screen shows the start of the graph, readable, rather than all of it too small to read)."""
        self.frame_selection()
        viewer = self.viewer
        start_terminal = self.drawing.start
        if viewer.transform().m11() >= LEGIBLE_SCALE or start_terminal is None:
            return
        size = viewer.viewport().size()
        width, height = size.width() / LEGIBLE_SCALE, size.height() / LEGIBLE_SCALE
        start = start_terminal.view.sceneBoundingRect()
        viewer._scene_range = QRectF(start.left() - 30, start.center().y() - height / 2, width, height)
        viewer._update_scene()


def context_menu(canvas: Canvas) -> QMenu:
    """The canvas's right-click menu (NodeGraphQt's, which the window fills)."""
    return canvas.graph.get_context_menu("graph").qmenu


def set_background(canvas: Canvas, colour: QColor) -> None:
    canvas.graph.set_background_color(colour.red(), colour.green(), colour.blue())


def add_action(canvas: Canvas, action: QAction) -> None:
    """Make ``action``'s shortcut work while the canvas has focus."""
    action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
    canvas.viewer.addAction(action)

