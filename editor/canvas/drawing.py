"""The canvas: NodeGraphQt as a view over the ``Document``.

NodeGraphQt draws nodes and turns mouse gestures into signals; this adapter cuts
its own editing slots off and turns those gestures into our undo commands. The
document's signals then bring the canvas up to date, whether the change came from
the canvas, the properties dock, undo or a paste. Each canvas node carries the
stable asset id (``asset_id``); NodeGraphQt's own ids and session format are never
stored.
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict
from collections.abc import Mapping

from NodeGraphQt import BaseNode, NodeGraph
from NodeGraphQt.constants import MIME_TYPE, PipeEnum, PortTypeEnum
from NodeGraphQt.qgraphics.node_abstract import AbstractNodeItem
from NodeGraphQt.qgraphics.pipe import PipeItem
from NodeGraphQt.qgraphics.port import PortItem
from PySide6.QtCore import QEvent, QMimeData, QObject, QPoint, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QCursor, QMouseEvent, QPixmapCache, QUndoStack
from PySide6.QtWidgets import QGraphicsScene, QMenu, QWidget
from shiboken6 import isValid

from editor.commands import (
    AddNodeCommand,
    MacroCommand,
    MoveCommand,
    SetAgentFieldCommand,
    SetExitCommand,
    SetNodeFieldCommand,
)
from editor.document import Document
from editor.node_appearance import (
    INPUT_PORT,
    NEVER_TAKEN_COLOUR,
    START_PORT,
    TERMINAL_COLOURS,
    AssetNodeItem,
    TerminalItem,
    VisitBadge,
    apply_appearance,
    coverage_label_html,
    summary_lines,
)
from editor.node_search import NodeSearch
from editor.node_types import view_of
from runtime.asset.model import END, NODE_TYPES, NodeBase, new_node
from runtime.asset import layout as auto_layout
from runtime.problems import Problem

IDENTIFIER = "parley"
NODE_MIME = MIME_TYPE  # NodeGraphQt's viewer only accepts drags of a few formats; reuse its own
NODE_MIME_PREFIX = "parley-node-type:"
START_KEY, END_KEY = "@start", "@end"
PIXMAP_CACHE_KB = 192 * 1024
LEGIBLE_SCALE = 0.85  # at this scale or more the summaries painted on nodes are legible (>= 9 px capitals)
# Placing a node added without a position: room for a new node of any built-in type (they are
# at most about 190 x 110 before their lists grow), the space kept around each node, and how far
# to look for room.
NEW_NODE_SIZE = (200.0, 120.0)
NODE_GAP = 40.0
SEARCH_RINGS = 12
PIPE_CLICK_DISTANCE = 2.0  # NodeGraphQt's: a press and release closer than this is a click on a pipe
# A larger graph is drawn in steps (about 0.5 ms a node): the nodes nearest the start at once, the
# rest a slice at a time while the window already takes input (see Canvas.rebuild).
PROGRESSIVE_ABOVE = 1000
FIRST_BATCH = 300
SLICE_SECONDS = 0.02
ITEMS_PER_NODE = 10  # about how many scene items one node makes (itself, ports, labels, pipes)


class AssetCanvasNode(BaseNode):
    """Base of the canvas node classes; one subclass per asset node type."""

    __identifier__ = IDENTIFIER
    NODE_NAME = "Node"
    ASSET_TYPE = ""

    def __init__(self) -> None:
        super().__init__(qgraphics_item=AssetNodeItem)
        self.asset_id = ""
        self.set_port_deletion_allowed(True)
        self.add_input(INPUT_PORT, multi_input=True, display_name=True)


class StartTerminal(BaseNode):
    __identifier__ = IDENTIFIER
    NODE_NAME = "START"

    def __init__(self) -> None:
        super().__init__(qgraphics_item=TerminalItem)
        self.asset_id = START_KEY
        self.view.asset_id = START_KEY
        self.add_output(START_PORT, multi_output=False, display_name=False)


class EndTerminal(BaseNode):
    __identifier__ = IDENTIFIER
    NODE_NAME = "END"

    def __init__(self) -> None:
        super().__init__(qgraphics_item=TerminalItem)
        self.asset_id = END_KEY
        self.view.asset_id = END_KEY
        self.add_input(INPUT_PORT, multi_input=True, display_name=False)


def _canvas_class(type_name: str) -> type[AssetCanvasNode]:
    return type(f"{type_name}CanvasNode", (AssetCanvasNode,), {
        "__identifier__": IDENTIFIER, "NODE_NAME": view_of(type_name).label, "ASSET_TYPE": type_name,
    })


CANVAS_CLASSES = {name: _canvas_class(name) for name in NODE_TYPES}
_TYPE_BY_IDENTIFIER = {cls.type_: name for name, cls in CANVAS_CLASSES.items()}


def node_type_mime(type_name: str) -> QMimeData:
    """The drag payload of a palette entry."""
    mime = QMimeData()
    mime.setData(NODE_MIME, f"{NODE_MIME_PREFIX}{type_name}".encode())
    return mime


class CanvasGraph(NodeGraph):
    """NodeGraph whose node names need no de-duplication: the canvas shows titles,
    which may repeat, and finds nodes by asset id (NodeGraph's search is quadratic)."""

    def get_unique_name(self, name: str) -> str:
        return name


class Canvas(QObject):
    """Keeps a NodeGraph in step with a Document and turns gestures into commands."""

    selection_changed = Signal(list)  # asset ids of the selected nodes
    built = Signal()  # every node of the asset is on the canvas (after a progressive rebuild)
    file_dropped = Signal(str)
    text_dropped = Signal(str, tuple)  # text, scene position (pasted nodes)

    def __init__(self, document: Document, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = document
        # Every NodeGraphQt item caches its picture; with Qt's default 10 MB pixmap cache a
        # few hundred nodes do not fit, and each pan frame repainted all of them in Python.
        QPixmapCache.setCacheLimit(max(QPixmapCache.cacheLimit(), PIXMAP_CACHE_KB))
        # NodeGraph's own undo stack stays empty: every edit goes through the document's.
        unused = QUndoStack(self)
        self.graph = CanvasGraph(undo_stack=unused)
        self.graph.set_acyclic(False)  # turns may loop back (a retry, a follow-up question)
        self.graph.set_pipe_collision(False)
        self.graph.register_nodes([*CANVAS_CLASSES.values(), StartTerminal, EndTerminal])
        self.viewer = self.graph.viewer()
        self._nodes: dict[str, AssetCanvasNode] = {}
        # Nodes of the document not drawn yet (a large graph is drawn a slice at a time), in the
        # order they will be drawn; everything that needs one draws it at once (_ensure).
        self._pending: dict[str, None] = {}
        self._build_timer = QTimer(self)
        self._build_timer.setInterval(0)
        self._build_timer.timeout.connect(self._build_slice)
        self._froze = False  # whether this canvas moved the objects it made out of garbage collection
        self._unfreeze_on_destroyed = False
        self._collect_after_clearing = False
        self._start: StartTerminal | None = None
        self._end: EndTerminal | None = None
        # Exits whose target node is not on the canvas yet (pasting A before B when A -> B).
        self._waiting: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self._problems: dict[str, list[Problem]] = {}
        # A test run's counts (node id -> visits, (node id, port) -> times taken), while shown
        self._coverage: tuple[dict[str, int], dict[tuple[str, str], int]] | None = None
        self._syncing = False
        self.search = NodeSearch(self.viewer)
        self.search.chosen.connect(self._on_search_chosen)
        self._search_at: tuple[float, float] | None = None
        self._detach_graph_editing()
        self._follow_document()

    @property
    def widget(self) -> QWidget:
        return self.graph.widget

    # --- wiring ----------------------------------------------------------------------------

    def _detach_graph_editing(self) -> None:
        """Route the viewer's gestures to our commands instead of NodeGraph's own undo stack."""
        v, g = self.viewer, self.graph
        for signal, slot in (
            (v.connection_changed, g._on_connection_changed),
            (v.connection_sliced, g._on_connection_sliced),
            (v.moved_nodes, g._on_nodes_moved),
            (v.search_triggered, g._on_search_triggered),
            (v.data_dropped, g._on_node_data_dropped),
            (v.insert_node, g._on_insert_node),
            (v.node_name_changed, g._on_node_name_changed),
        ):
            signal.disconnect(slot)
        v.connection_changed.connect(self._on_connection_changed)
        v.connection_sliced.connect(self._on_connection_sliced)
        v.moved_nodes.connect(self._on_nodes_moved)
        v.search_triggered.connect(self._on_search_triggered)
        v.data_dropped.connect(self._on_data_dropped)
        v.node_name_changed.connect(self._on_title_edited)
        v.node_selection_changed.connect(lambda *_: self.selection_changed.emit(self.selected_ids()))
        # NodeGraphQt treats a click on a pipe as the start of dragging it away, and redraws it when
        # the mouse does not move: select the redrawn pipe then, so Delete can remove it.
        self._pressed_pipe: tuple[object, object, QPointF] | None = None
        v.viewport().installEventFilter(self)
        v.node_selected.connect(lambda *_: self.selection_changed.emit(self.selected_ids()))
        # NodeGraph's own undo actions would steal Ctrl+Z from the window's.
        menu = self.graph.get_context_menu("graph").qmenu
        for action in (v.qaction_for_undo(), v.qaction_for_redo()):
            if action is not None:
                action.setShortcuts([])
                menu.removeAction(action)
        for action in list(menu.actions()):
            if action.isSeparator():
                menu.removeAction(action)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.MouseButtonPress:
            self._pressed_pipe = None
            mouse: QMouseEvent = event  # type: ignore[assignment]
            if mouse.button() == Qt.MouseButton.LeftButton and mouse.modifiers() == Qt.KeyboardModifier.NoModifier:
                pipe = self._pipe_at(mouse.position())
                if pipe is not None:
                    self._pressed_pipe = (pipe.output_port, pipe.input_port, mouse.position())
        elif kind == QEvent.Type.MouseButtonRelease and self._pressed_pipe is not None:
            out, inp, pressed = self._pressed_pipe
            self._pressed_pipe = None
            moved = event.position() - pressed  # type: ignore[attr-defined]
            if math.hypot(moved.x(), moved.y()) <= PIPE_CLICK_DISTANCE:
                QTimer.singleShot(0, self, lambda: self._select_pipe(out, inp))
        return False

    def _pipe_at(self, viewport_pos: QPointF) -> PipeItem | None:
        """The pipe a press at ``viewport_pos`` grabs: NodeGraphQt's own pick, where nodes and
        ports come before pipes."""
        scene_pos = self.viewer.mapToScene(viewport_pos.toPoint())
        for item in self.viewer._items_near(scene_pos, None, 5, 5):
            if isinstance(item, (AbstractNodeItem, PortItem)):
                return None
            if isinstance(item, PipeItem) and item.input_port is not None and item.output_port is not None:
                return item
        return None

    def _select_pipe(self, out, inp) -> None:
        if not isValid(out):
            return
        for pipe in out.connected_pipes:
            if pipe.input_port is inp:
                pipe.setSelected(True)

    def _follow_document(self) -> None:
        d = self.document
        d.node_added.connect(self._on_node_added)
        d.node_removed.connect(self._on_node_removed)
        d.node_changed.connect(self._on_node_changed)
        d.node_moved.connect(self._on_node_moved)
        d.node_renamed.connect(self._on_node_renamed)
        d.agent_changed.connect(self._on_agent_changed)
        d.terminal_moved.connect(self._on_terminal_moved)
        d.reset.connect(self.rebuild)

    # --- building ----------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Throw the canvas away and draw the document's asset afresh.

        A graph of more than ``PROGRESSIVE_ABOVE`` nodes is drawn in steps: the ``FIRST_BATCH``
        nodes nearest the start now, then the rest nearest first, a slice of ``SLICE_SECONDS`` at a
        time from the event loop, so the window shows the graph and takes input at once. A node not
        drawn yet is drawn at once when anything asks for it (``canvas_node``, ``select``, ...);
        ``finish_building`` draws them all; ``built`` is emitted when the last one is drawn."""
        self._syncing = True
        self._build_timer.stop()
        self._pending.clear()
        if self._froze:  # the old canvas's objects may be collected again
            gc.unfreeze()
            self._froze = False
            # ... and those that are garbage now are, before what is drawn next is frozen with them
            # (one full collection, the price of opening another large graph).
            self._collect_after_clearing = True
        scene = self.viewer.scene()
        # Indexing each item as it arrives asks every port and label for its bounds
        # again and again (Python calls); index the finished scene once instead.
        scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)
        progressive = False
        try:
            for pipe in self.viewer.all_pipes():
                pipe.delete()
            for node in self.graph.all_nodes():
                self.graph.remove_node(node, push_undo=False)
            self._nodes.clear()
            self._waiting.clear()
            self._problems.clear()
            self._coverage = None  # another asset: the counts were of the old one
            self._start = self.graph.create_node(StartTerminal.type_, name="START", selected=False, push_undo=False)
            self._end = self.graph.create_node(EndTerminal.type_, name="END", selected=False, push_undo=False)
            for terminal, colour in ((self._start, TERMINAL_COLOURS["start"]), (self._end, TERMINAL_COLOURS["end"])):
                terminal.set_color(*colour)
            asset = self.document.asset
            # The scene's own bounds grow with its items (the view keeps its own range), except while
            # a large graph is drawn (below).
            scene.setSceneRect(QRectF())
            if len(asset.nodes) > PROGRESSIVE_ABOVE:
                progressive = True
                self._pending = dict.fromkeys(self._drawing_order())
                self._index_while_drawing(scene)
                for node_id in list(self._pending)[:FIRST_BATCH]:
                    self._ensure(node_id)
                self._place_terminals()
                self._sync_start()
                self._update_index()
                self._keep_out_of_collections()
                self._build_timer.start()
                return
            for node in asset.nodes:
                self._create(node.id)
            self._place_terminals()
            for node in asset.nodes:
                for port in node.exits():
                    self._sync_exit(node.id, port)
            self._sync_start()
        finally:
            if not progressive:  # else when the last slice is drawn
                scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
            self._syncing = False
        self.built.emit()

    def _index_while_drawing(self, scene: QGraphicsScene) -> None:
        """Index the items of a large graph slice by slice as they are drawn.

        Qt indexed the finished scene at the first question asked of it: 0.09 s at 5,000 nodes and
        1.3 s at 50,000, one step of the event loop (an edit, a paint). Qt's index is rebuilt whole
        when the scene's bounds change (they grow with every slice) or its item count doubles, so
        both are fixed from the start: the bounds of every node's position (an item beyond them is
        still indexed and found), and the depth Qt would choose for the finished scene."""
        nodes = self.document.asset.nodes
        xs = [n.position[0] for n in nodes]
        ys = [n.position[1] for n in nodes]
        margin = 2 * NEW_NODE_SIZE[0] + 400.0  # the nodes' own size, the START and END terminals
        scene.setSceneRect(QRectF(min(xs) - margin, min(ys) - margin,
                                  max(xs) - min(xs) + 2 * margin, max(ys) - min(ys) + 2 * margin))
        scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)  # a new index, of depth 0 (Qt's choice)
        scene.setBspTreeDepth(max(5, math.ceil(math.log2(ITEMS_PER_NODE * len(nodes)))))

    def _update_index(self) -> None:
        """Index the items added since the last call now: Qt does it on the first question asked of
        its index, or 2 s after items stopped being added. The question is about a point far outside
        the graph (answered at once; one inside it costs as many items as lie there)."""
        scene = self.viewer.scene()
        corner = scene.sceneRect().topLeft()
        scene.items(QRectF(corner.x() - 1e6, corner.y() - 1e6, 1.0, 1.0))

    def _drawing_order(self) -> list[str]:
        """Node ids nearest the start node first (the first view of a large graph shows the start)."""
        asset = self.document.asset
        anchor = self.document.node(asset.start_node).position if self.document.has_node(asset.start_node) \
            else (min(n.position[0] for n in asset.nodes), min(n.position[1] for n in asset.nodes))
        ax, ay = anchor

        def distance(node: NodeBase) -> float:
            return (node.position[0] - ax) ** 2 + (node.position[1] - ay) ** 2

        return [n.id for n in sorted(asset.nodes, key=distance)]

    @property
    def building(self) -> bool:
        """Whether some nodes of the document are not drawn yet."""
        return bool(self._pending)

    def _build_slice(self) -> None:
        """Draw pending nodes for ``SLICE_SECONDS``; the last slice indexes the scene."""
        started = time.perf_counter()
        self._syncing = True
        try:
            while self._pending and time.perf_counter() - started < SLICE_SECONDS:
                self._ensure(next(iter(self._pending)))
        finally:
            self._syncing = False
        self._update_index()
        self._keep_out_of_collections()
        if not self._pending:
            self._finish()

    def finish_building(self) -> None:
        """Draw every node not drawn yet, now."""
        if not self._pending and not self._build_timer.isActive():
            return
        self._syncing = True
        try:
            while self._pending:
                self._ensure(next(iter(self._pending)))
        finally:
            self._syncing = False
        self._finish()

    def _finish(self) -> None:
        self._build_timer.stop()
        self.viewer.scene().setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self._update_index()  # indexed while drawn (_index_while_drawing) unless drawn all at once
        self._keep_out_of_collections()
        self.built.emit()

    def _keep_out_of_collections(self) -> None:
        """Move every object made so far out of Python's garbage collection until the canvas is
        rebuilt. A large canvas is millions of Python objects that live as long as it does; full
        collections walked them all every few edits (0.2 s at 5,000 nodes), and while a large
        graph was still being drawn, one of them was the longest step of the event loop (0.15 s at
        5,000 nodes, 1.5 s at 50,000): so this runs after each slice, not only at the end."""
        if self._collect_after_clearing:
            self._collect_after_clearing = False
            gc.collect()
        gc.freeze()
        if not self._unfreeze_on_destroyed:
            self._unfreeze_on_destroyed = True
            self.destroyed.connect(lambda *_: gc.unfreeze())
        self._froze = True

    def _ensure(self, node_id: str) -> None:
        """Draw a node that is pending, with its exits and the pipes waiting for it."""
        if node_id in self._pending:
            del self._pending[node_id]
            self._on_node_added(node_id)

    def _create(self, node_id: str) -> AssetCanvasNode:
        node = self.document.node(node_id)
        canvas_node: AssetCanvasNode = CANVAS_CLASSES[node.type_name]()
        canvas_node.asset_id = node_id
        canvas_node.view.asset_id = node_id
        # Ports, title, colour and summary are set before the node enters the scene,
        # so NodeGraphQt lays it out once instead of once per port.
        for port in node.exits():
            self._add_exit_port(canvas_node, node, port)
        canvas_node.NODE_NAME = node.display_title
        fill = view_of(node.type_name).fill
        canvas_node.model.color = (*fill, 255)
        canvas_node.model.border_color = (*[min(255, c + 40) for c in fill], 255)
        canvas_node.view.summary = summary_lines(node, self.document.asset)
        canvas_node.view.is_start = self.document.asset.start_node == node_id
        self.graph.add_node(canvas_node, pos=list(node.position), selected=False, push_undo=False)
        self._nodes[node_id] = canvas_node
        if node_id in self._problems:  # marked before the node was drawn
            self._paint_problems(node_id, self._problems[node_id])
        if self._coverage is not None:
            self._paint_coverage(node_id)
        return canvas_node

    def _add_exit_port(self, canvas_node: AssetCanvasNode, node: NodeBase, port: str) -> None:
        out = canvas_node.add_output(port, multi_output=False, display_name=True)
        canvas_node.view.get_output_text_item(out.view).setPlainText(node.exit_label(port))

    def _place_terminals(self) -> None:
        assert self._start is not None and self._end is not None
        nodes = self.document.asset.nodes
        xs = [n.position[0] for n in nodes] or [0.0]
        ys = [n.position[1] for n in nodes] or [0.0]
        start = self.document.terminal_position("start")
        if start is None:
            first = self.document.asset.start_node
            anchor = self.document.node(first).position if self.document.has_node(first) else (min(xs), min(ys))
            start = (anchor[0] - 180.0, anchor[1])
        end = self.document.terminal_position("end")
        if end is None:
            end = (max(xs) + 320.0, (min(ys) + max(ys)) / 2.0)
        self._start.set_pos(*start)
        self._end.set_pos(*end)

    # --- lookups -----------------------------------------------------------------------------

    def canvas_node(self, node_id: str) -> AssetCanvasNode:
        self._ensure(node_id)
        return self._nodes[node_id]

    def _key_of(self, canvas_node: BaseNode) -> str:
        return getattr(canvas_node, "asset_id", "")

    def _by_view(self, view) -> BaseNode | None:
        return self.graph.get_node_by_id(view.id)

    def selected_ids(self) -> list[str]:
        """Asset ids of the selected nodes, in document order."""
        chosen = {self._key_of(n) for n in self.graph.selected_nodes()}
        return [n.id for n in self.document.asset.nodes if n.id in chosen]

    def selected_connections(self) -> tuple[list[tuple[str, str]], bool]:
        """The selected pipes: (node id, port) of each selected exit, and whether START's is selected."""
        exits: list[tuple[str, str]] = []
        start = False
        for pipe in self.viewer.selected_pipes():
            out = pipe.output_port
            key = getattr(out.node, "asset_id", "") if out is not None else ""
            if key == START_KEY:
                start = True
            elif key in self._nodes:
                exits.append((key, out.name))
        return exits, start

    def select(self, node_ids: list[str]) -> None:
        self.graph.clear_selection()
        for node_id in node_ids:
            self._ensure(node_id)
            if node_id in self._nodes:
                self._nodes[node_id].set_selected(True)
        self.selection_changed.emit(self.selected_ids())

    def select_all(self) -> None:
        self.finish_building()
        self.select(self.document.asset.node_ids())

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
            for node_id in self._pending:
                x, y = self.document.node(node_id).position
                rect = rect.united(QRectF(x, y, *NEW_NODE_SIZE))
        rect.adjust(-40, -40, 40, 40)
        viewer = self.viewer
        viewer._scene_range = rect
        viewer._update_scene()
        if viewer.get_zoom() > 0.1:
            viewer.reset_zoom(rect.center())

    def frame_for_reading(self) -> None:
        """How an opened graph is first shown: whole, when that leaves its node summaries legible (a
        scale of ``LEGIBLE_SCALE``); otherwise at that scale from the START terminal on (a small
        screen shows the start of the graph, readable, rather than all of it too small to read)."""
        self.frame_selection()
        viewer = self.viewer
        if viewer.transform().m11() >= LEGIBLE_SCALE or self._start is None:
            return
        size = viewer.viewport().size()
        width, height = size.width() / LEGIBLE_SCALE, size.height() / LEGIBLE_SCALE
        start = self._start.view.sceneBoundingRect()
        viewer._scene_range = QRectF(start.left() - 30, start.center().y() - height / 2, width, height)
        viewer._update_scene()

    def center_on(self, node_id: str) -> None:
        self._ensure(node_id)
        if node_id in self._nodes:
            self.graph.center_on([self._nodes[node_id]])

    def scene_cursor_pos(self) -> tuple[float, float]:
        pos = self.viewer.scene_cursor_pos()
        return pos.x(), pos.y()

    def view_center(self) -> tuple[float, float]:
        center = self.viewer.mapToScene(self.viewer.viewport().rect().center())
        return center.x(), center.y()

    def node_size(self, key: str) -> tuple[float, float]:
        item = self._terminal(key) if key.startswith("@") else self.canvas_node(key)
        return item.view.width, item.view.height

    def _terminal(self, key: str) -> BaseNode:
        terminal = self._start if key == START_KEY else self._end
        assert terminal is not None
        return terminal

    # --- following the document -------------------------------------------------------------

    def _on_node_added(self, node_id: str) -> None:
        self._create(node_id)
        for port in self.document.node(node_id).exits():
            self._sync_exit(node_id, port)
        for source, port in sorted(self._waiting.pop(node_id, set())):
            if source in self._nodes:
                self._sync_exit(source, port)
        if self.document.asset.start_node == node_id:
            self._sync_start()

    def _on_node_removed(self, node_id: str) -> None:
        if node_id in self._pending:  # never drawn: nothing to take away
            del self._pending[node_id]
            self._problems.pop(node_id, None)
            return
        canvas_node = self._nodes.pop(node_id)
        for port in canvas_node.input_ports() + canvas_node.output_ports():
            for pipe in list(port.view.connected_pipes):
                source = getattr(pipe.output_port.node, "asset_id", "")
                if port.view is pipe.input_port and source and not source.startswith("@"):
                    self._waiting[node_id].add((source, pipe.output_port.name))
                pipe.delete()
        self.graph.remove_node(canvas_node, push_undo=False)
        self._problems.pop(node_id, None)

    def _on_node_changed(self, node_id: str, _field: str) -> None:
        if node_id in self._pending:
            return  # drawn from the document as it is then
        canvas_node = self._nodes[node_id]
        node = self.document.node(node_id)
        wanted = list(node.exits())
        have = [p.name() for p in canvas_node.output_ports()]
        if wanted != have:
            self._syncing = True
            try:
                for port in list(canvas_node.output_ports()):
                    for pipe in list(port.view.connected_pipes):
                        pipe.delete()
                    canvas_node.delete_output(port)
                for port in wanted:
                    self._add_exit_port(canvas_node, node, port)
            finally:
                self._syncing = False
        apply_appearance(canvas_node.view, node, self.document.asset)
        for port in wanted:
            self._sync_exit(node_id, port)
        if self._coverage is not None:
            self._paint_coverage(node_id)

    def _on_node_moved(self, node_id: str) -> None:
        if node_id in self._pending:
            return
        canvas_node = self._nodes[node_id]
        x, y = self.document.node(node_id).position
        if tuple(canvas_node.pos()) != (x, y):
            canvas_node.set_pos(x, y)

    def _on_node_renamed(self, old: str, new: str) -> None:
        if old in self._pending:
            self._pending = {new if k == old else k: None for k in self._pending}
            if old in self._waiting:
                self._waiting[new] = self._waiting.pop(old)
            if old in self._problems:
                self._problems[new] = self._problems.pop(old)
            return
        canvas_node = self._nodes.pop(old)
        canvas_node.asset_id = new
        canvas_node.view.asset_id = new
        self._nodes[new] = canvas_node
        if old in self._waiting:
            self._waiting[new] = self._waiting.pop(old)
        if old in self._problems:
            self._problems[new] = self._problems.pop(old)
        apply_appearance(canvas_node.view, self.document.node(new), self.document.asset)

    def _on_agent_changed(self, field: str) -> None:
        if field == "start_node":
            self._sync_start()
        if field in ("start_node", "default_model"):
            for node in self.document.asset.nodes:
                if node.id in self._nodes:
                    apply_appearance(self._nodes[node.id].view, node, self.document.asset)

    def _on_terminal_moved(self, name: str) -> None:
        pos = self.document.terminal_position(name)
        if pos is None:
            self._place_terminals()
            return
        terminal = self._terminal(f"@{name}")
        if tuple(terminal.pos()) != pos:
            terminal.set_pos(*pos)

    # --- connections: make the pipes match the model ----------------------------------------

    def _input_for(self, target: str):
        if target == END:
            assert self._end is not None
            return self._end.input_ports()[0]
        if target in self._nodes:
            return self._nodes[target].input_ports()[0]
        return None

    def _sync_exit(self, node_id: str, port: str) -> None:
        out = self._nodes[node_id].outputs().get(port)
        if out is None:
            return
        target = self.document.exit_target(node_id, port)
        wanted = self._input_for(target)
        if wanted is None:
            self._waiting[target].add((node_id, port))
        self._reconcile(out, wanted)

    def _sync_start(self) -> None:
        if self._start is None:
            return
        start = self.document.asset.start_node
        wanted = self._nodes[start].input_ports()[0] if start in self._nodes else None
        self._reconcile(self._start.output_ports()[0], wanted)
        for node_id, canvas_node in self._nodes.items():
            if canvas_node.view.is_start != (node_id == start):
                apply_appearance(canvas_node.view, self.document.node(node_id), self.document.asset)

    def _reconcile(self, out, wanted) -> None:
        """Make output port ``out`` drawn connected to exactly ``wanted`` (or nothing).

        Only the pipes are kept: NodeGraph's own record of connections is never
        used (the document is the record), and keeping it costs a third of opening."""
        keep = None
        for pipe in list(out.view.connected_pipes):
            if wanted is not None and keep is None and pipe.input_port is wanted.view:
                keep = pipe
            else:
                pipe.delete()
        if wanted is not None and keep is None:
            self.viewer.establish_connection(out.view, wanted.view)
        out.view.update()

    # --- gestures -> commands ---------------------------------------------------------------

    def _out_and_in(self, a, b):
        return (a, b) if a.port_type == PortTypeEnum.OUT.value else (b, a)

    def _on_connection_changed(self, disconnected: list, connected: list) -> None:
        changes: dict[tuple[str, str], str] = {}
        for a, b in disconnected:
            out, _in = self._out_and_in(a, b)
            changes[(self._key_of(self._by_view(out.node)), out.name)] = END
        for a, b in connected:
            out, inp = self._out_and_in(a, b)
            target = self._key_of(self._by_view(inp.node))
            changes[(self._key_of(self._by_view(out.node)), out.name)] = "" if target == END_KEY else target
        self._push_exit_changes(changes)

    def _on_connection_sliced(self, ports: list) -> None:
        changes = {}
        for a, b in ports:
            out, _in = self._out_and_in(a, b)
            changes[(self._key_of(self._by_view(out.node)), out.name)] = END
        self._push_exit_changes(changes)

    def _push_exit_changes(self, changes: dict[tuple[str, str], str]) -> None:
        doc = self.document
        parent = MacroCommand()
        for (source, port), target in changes.items():
            if source == START_KEY:
                if target.startswith("@"):
                    target = ""
                if target != doc.asset.start_node:
                    SetAgentFieldCommand(doc, "start_node", doc.asset.start_node, target, parent)
                    parent.setText(f"Start at {target or 'nothing'}")
            elif source and doc.has_node(source):
                old = doc.exit_target(source, port)
                if target.startswith("@"):
                    target = END
                if old != target:
                    SetExitCommand(doc, source, port, old, target, parent)
                    parent.setText(parent.parts[0].text() if len(parent.parts) == 1 else "Reconnect exits")
        if parent.parts:
            doc.push(parent)
        # Repair pipes the gesture removed even when the model did not change.
        for source, port in changes:
            if source == START_KEY:
                self._sync_start()
            elif source in self._nodes:
                self._sync_exit(source, port)

    def _on_nodes_moved(self, moved: dict) -> None:
        moves = {}
        for view, previous in moved.items():
            key = getattr(view, "asset_id", "")
            if not key:
                continue
            moves[key] = ((float(previous[0]), float(previous[1])), (float(view.xy_pos[0]), float(view.xy_pos[1])))
        if moves:
            self.document.push(MoveCommand(self.document, moves))

    def _on_title_edited(self, view_id: str, title: str) -> None:
        canvas_node = self.graph.get_node_by_id(view_id)
        node_id = self._key_of(canvas_node)
        if node_id in self._nodes:
            node = self.document.node(node_id)
            if title != node.display_title:
                self.document.push(SetNodeFieldCommand(self.document, node_id, "title", node.title, title))

    def show_node_search(self) -> None:
        """Tab search (``NodeSearch``): at the mouse when it is over the canvas, and the node goes
        there; else at the view's centre, and the node goes into free space."""
        viewport = self.viewer.viewport()
        local = viewport.mapFromGlobal(QCursor.pos())
        if viewport.rect().contains(local):
            scene = self.viewer.mapToScene(local)
            self._search_at = (scene.x(), scene.y())
            anchor = QCursor.pos()
        else:
            self._search_at = None
            anchor = viewport.mapToGlobal(viewport.rect().center())
        self.search.popup_at(anchor)

    def _on_search_chosen(self, type_name: str) -> None:
        self.add_node(type_name, self._search_at)
        self.viewer.setFocus()

    def _on_search_triggered(self, identifier: str, pos: tuple) -> None:
        type_name = _TYPE_BY_IDENTIFIER.get(identifier)
        if type_name:
            self.add_node(type_name, (pos[0], pos[1]))

    def _on_data_dropped(self, mime: QMimeData, pos: QPoint) -> None:
        if mime.hasFormat(NODE_MIME):
            payload = bytes(mime.data(NODE_MIME).data()).decode()
            if payload.startswith(NODE_MIME_PREFIX):
                self.add_node(payload[len(NODE_MIME_PREFIX):], (pos.x(), pos.y()))
        elif mime.hasUrls():
            for url in mime.urls():
                if url.isLocalFile():
                    self.file_dropped.emit(url.toLocalFile())
        elif mime.hasText():
            self.text_dropped.emit(mime.text(), (pos.x(), pos.y()))

    # --- edits the window asks for -------------------------------------------------------------

    def add_node(self, type_name: str, pos: tuple[float, float] | None = None) -> str:
        """Add a node of ``type_name`` with its top-left at ``pos``; returns its id. Without ``pos``
        (the Add menu, a palette double-click) it goes in free space: right of the selection, or
        else near the view's centre, never on top of another node."""
        doc = self.document
        view = view_of(type_name)
        node_id = doc.unique_id(view.new_id)
        x, y = pos if pos is not None else self.free_spot()
        node = new_node(type_name, node_id, position=(float(x), float(y)))
        parent = MacroCommand(f"Add {view.label}")
        AddNodeCommand(doc, node, None, parent)
        if not doc.asset.start_node:
            SetAgentFieldCommand(doc, "start_node", "", node_id, parent)
        doc.push(parent)
        self.select([node_id])
        if pos is None and not self._visible_rect().contains(self._nodes[node_id].view.sceneBoundingRect()):
            self.center_on(node_id)
        return node_id

    def _visible_rect(self) -> QRectF:
        return self.viewer.mapToScene(self.viewer.viewport().rect()).boundingRect()

    def free_spot(self, size: tuple[float, float] = NEW_NODE_SIZE) -> tuple[float, float]:
        """A top-left for a node of ``size`` that overlaps no node: right of the selected nodes
        (the nearest free place in the columns beside them), or else nearest the view's centre."""
        taken = [n.view.sceneBoundingRect().adjusted(-NODE_GAP / 2, -NODE_GAP / 2, NODE_GAP / 2, NODE_GAP / 2)
                 for n in self.graph.all_nodes()]
        for node_id in self._pending:  # not drawn yet: about a new node's size
            x, y = self.document.node(node_id).position
            taken.append(QRectF(x - NODE_GAP / 2, y - NODE_GAP / 2, NEW_NODE_SIZE[0] + NODE_GAP,
                                NEW_NODE_SIZE[1] + NODE_GAP))
        w, h = size
        step_x, step_y = w + NODE_GAP, h + NODE_GAP
        selected = [n.view.sceneBoundingRect() for n in self.graph.selected_nodes()]
        if selected:
            beside = selected[0]
            for rect in selected[1:]:
                beside = beside.united(rect)
            x0, y0 = beside.right() + NODE_GAP, beside.top()
            # Column by column away from the selection; in each, the same row first, then below, then above.
            cells = [(col, row) for col in range(SEARCH_RINGS) for row in range(-SEARCH_RINGS, SEARCH_RINGS + 1)]
            cells.sort(key=lambda c: (c[0], abs(c[1]), c[1] < 0))
        else:
            cx, cy = self.view_center()
            x0, y0 = cx - w / 2, cy - h / 2
            cells = [(col, row) for col in range(-SEARCH_RINGS, SEARCH_RINGS + 1)
                     for row in range(-SEARCH_RINGS, SEARCH_RINGS + 1)]
            cells.sort(key=lambda c: ((c[0] * step_x) ** 2 + (c[1] * step_y) ** 2, c[1] < 0, c[0] < 0))
        for col, row in cells:
            spot = QRectF(x0 + col * step_x, y0 + row * step_y, w, h)
            if not any(spot.intersects(other) for other in taken):
                return spot.left(), spot.top()
        below = max((r.bottom() for r in taken), default=y0)
        return x0, below + NODE_GAP

    def auto_layout(self) -> None:
        """Lay the graph out in layers from the start node; one undo step."""
        doc = self.document
        self.finish_building()
        keys = [START_KEY, *doc.asset.node_ids(), END_KEY]
        edges = []
        if doc.asset.start_node:
            edges.append((START_KEY, doc.asset.start_node))
        for node in doc.asset.nodes:
            for target in node.exits().values():
                edges.append((node.id, END_KEY if target == END else target))
        sizes = {k: self.node_size(k) for k in keys}
        placed = auto_layout.layered_positions(keys, edges, sizes, roots=[START_KEY])
        moves = {}
        for key, new in placed.items():
            if key.startswith("@"):
                old = doc.terminal_position(key[1:]) or tuple(self._terminal(key).pos())
            else:
                old = doc.node(key).position
            if tuple(old) != new:
                moves[key] = (tuple(old), new)
        if moves:
            doc.push(MoveCommand(doc, moves, "Auto-layout"))
        # Terminals without a saved place are positioned by the canvas, not the model.
        for key in (START_KEY, END_KEY):
            self._terminal(key).set_pos(*placed[key])

    # --- problems ------------------------------------------------------------------------------

    def mark_problems(self, problems: list[Problem]) -> None:
        """Mark nodes that have errors or warnings; their tooltips list them."""
        by_node: dict[str, list[Problem]] = defaultdict(list)
        for problem in problems:
            if problem.node_id in self._nodes or problem.node_id in self._pending:
                by_node[problem.node_id].append(problem)
        for node_id in set(self._problems) | set(by_node):
            if node_id not in self._nodes:
                continue  # a node not drawn yet is marked when it is drawn
            found = by_node.get(node_id, [])
            if self._problems.get(node_id, []) == found:
                continue
            self._paint_problems(node_id, found)
        self._problems = dict(by_node)

    def _paint_problems(self, node_id: str, found: list[Problem]) -> None:
        view = self._nodes[node_id].view
        view.problem_severity = (
            "error" if any(p.severity == "error" for p in found) else "warning" if found else None
        )
        node = self.document.node(node_id)
        tip = f"<b>{node.display_title}</b> ({node.type}, id {node_id})"
        for p in found:
            tip += f"<br/>{p.severity}: {p.field + ': ' if p.field else ''}{p.message}"
        view.setToolTip(tip)
        view.update()

    def problem_severity(self, node_id: str) -> str | None:
        return self.canvas_node(node_id).view.problem_severity

    # --- a turn's path (the Turn Inspector) -------------------------------------------------------

    def highlight_path(self, node_ids: list[str]) -> None:
        """Outline the nodes a turn ran through, numbered in the order they ran; [] clears it."""
        from PySide6.QtGui import QPen
        from PySide6.QtWidgets import QGraphicsRectItem, QGraphicsSimpleTextItem
        from shiboken6 import isValid

        for mark in getattr(self, "_path_marks", []):
            if isValid(mark) and mark.scene() is not None:
                mark.scene().removeItem(mark)
        self._path_marks: list[QGraphicsRectItem] = []
        steps: dict[str, list[str]] = defaultdict(list)
        for step, node_id in enumerate(node_ids, 1):
            steps[node_id].append(str(step))
        for node_id, numbers in steps.items():
            self._ensure(node_id)
            if node_id not in self._nodes:
                continue
            view = self._nodes[node_id].view
            mark = QGraphicsRectItem(view.boundingRect().adjusted(-5, -5, 5, 5), view)
            mark.setPen(QPen(QColor(80, 200, 255), 3))
            label = QGraphicsSimpleTextItem("#" + ",".join(numbers), mark)
            label.setBrush(QColor(80, 200, 255))
            label.setPos(mark.rect().left(), mark.rect().top() - 18)
            self._path_marks.append(mark)

    def highlighted_path(self) -> list[str]:
        """Ids of the nodes outlined by ``highlight_path``."""
        from shiboken6 import isValid

        marks = [m for m in getattr(self, "_path_marks", []) if isValid(m)]
        return [self._key_of(n) for n in self._nodes.values() if any(m.parentItem() is n.view for m in marks)]

    # --- test coverage (the Tests dock) ------------------------------------------------------------

    def show_coverage(self, visits: Mapping[str, int], exits: Mapping[tuple[str, str], int]) -> None:
        """Show a test run's counts: a "\u00d7N" badge on each node, "\u00d7N" after each exit's label,
        and never-taken exits (their labels and pipes) in a warning colour, until ``clear_coverage``."""
        self._coverage = ({k: int(v) for k, v in visits.items()}, {k: int(v) for k, v in exits.items()})
        for node_id in self._nodes:
            self._paint_coverage(node_id)

    def clear_coverage(self) -> None:
        self._coverage = None
        for node_id in self._nodes:
            self._paint_coverage(node_id)

    def _paint_coverage(self, node_id: str) -> None:
        canvas_node = self._nodes[node_id]
        view = canvas_node.view
        node = self.document.node(node_id)
        for out in canvas_node.output_ports():
            port = out.name()
            text = view.get_output_text_item(out.view)
            never = False
            if self._coverage is None:
                text.setPlainText(node.exit_label(port))
            else:
                count = self._coverage[1].get((node_id, port), 0)
                text.setHtml(coverage_label_html(node.exit_label(port), count))
                never = not count
            for pipe in out.view.connected_pipes:
                pipe.color = (*NEVER_TAKEN_COLOUR, 255) if never else PipeEnum.COLOR.value
                pipe.style = PipeEnum.DRAW_TYPE_DASHED.value if never else PipeEnum.DRAW_TYPE_DEFAULT.value
                pipe.reset()
        view.draw_node()  # the labels' widths changed
        badge = next((c for c in view.childItems() if isinstance(c, VisitBadge)), None)
        if self._coverage is None:
            if badge is not None and badge.scene() is not None:
                badge.scene().removeItem(badge)
            return
        if badge is None:
            badge = VisitBadge(view)
        badge.set_count(self._coverage[0].get(node_id, 0))
        box = badge.boundingRect()
        badge.setPos(view.boundingRect().right() - box.width() + 4, -box.height() / 2 - 2)

    def visit_badge(self, node_id: str) -> str:
        """The coverage badge on a node ("\u00d73"), or "" when none is shown."""
        badge = next((c for c in self.canvas_node(node_id).view.childItems() if isinstance(c, VisitBadge)), None)
        return badge.text if badge is not None else ""

    def exit_label(self, node_id: str, port: str) -> tuple[str, bool]:
        """An exit's label as the canvas shows it, and whether it is marked as never taken."""
        out = self.canvas_node(node_id).outputs()[port]
        text = self._nodes[node_id].view.get_output_text_item(out.view).toPlainText()
        return text, self._coverage is not None and not self._coverage[1].get((node_id, port), 0)


def context_menu(canvas: Canvas) -> QMenu:
    """The canvas's right-click menu (NodeGraphQt's, which the window fills)."""
    return canvas.graph.get_context_menu("graph").qmenu


def set_background(canvas: Canvas, colour: QColor) -> None:
    canvas.graph.set_background_color(colour.red(), colour.green(), colour.blue())


def add_action(canvas: Canvas, action: QAction) -> None:
    """Make ``action``'s shortcut work while the canvas has focus."""
    action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
    canvas.viewer.addAction(action)


