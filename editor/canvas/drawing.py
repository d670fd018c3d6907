"""Drawing: the NodeGraphQt scene built from the asset model.

One canvas node per asset node (its class per node type), the START and END terminals, and the
pipes, which are made to match the document's exits (``sync_exit``). A large graph is drawn a
slice at a time (``rebuild``). Each canvas node carries the stable asset id (``asset_id``);
NodeGraphQt's own ids, undo stack and record of connections are never used.
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict

from NodeGraphQt import BaseNode, NodeGraph
from PySide6.QtCore import QObject, QRectF, QTimer, Signal
from PySide6.QtGui import QPixmapCache, QUndoStack
from PySide6.QtWidgets import QGraphicsScene

from editor.canvas.node_appearance import (
    INPUT_PORT,
    START_PORT,
    TERMINAL_COLOURS,
    AssetNodeItem,
    TerminalItem,
    apply_appearance,
    summary_lines,
)
from editor.canvas.node_types import view_of
from editor.model.bypass import shown_fill, shown_opacity, shown_title
from editor.model.document import Document
from editor.model.game_events import marked_exits, marks_of
from runtime.asset.model import END, NODE_TYPES, NodeBase
from runtime.nodes import shown_exit_label, shown_exits

IDENTIFIER = "parley"
START_KEY, END_KEY = "@start", "@end"
PIXMAP_CACHE_KB = 192 * 1024
# Room for a new node of any built-in type (about 290 x 110 before their lists grow: the summary's box
# is that wide whatever it says, node_appearance.summary_box); a node not drawn yet is taken to be this size.
NEW_NODE_SIZE = (300.0, 120.0)
# A larger graph is drawn in steps (about 0.5 ms a node): the nodes nearest the start at once, the
# rest a slice at a time while the window already takes input (see Drawing.rebuild).
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
TYPE_BY_IDENTIFIER = {cls.type_: name for name, cls in CANVAS_CLASSES.items()}


class CanvasGraph(NodeGraph):
    """NodeGraph whose node names need no de-duplication: the canvas shows titles,
    which may repeat, and finds nodes by asset id (NodeGraph's search is quadratic)."""

    def get_unique_name(self, name: str) -> str:
        return name


def key_of(canvas_node: BaseNode | None) -> str:
    """The asset id a canvas node carries ("@start", "@end" for the terminals; "" for none)."""
    return getattr(canvas_node, "asset_id", "")


class Drawing(QObject):
    """The scene of one document: which nodes are drawn, the terminals, and the pipes."""

    built = Signal()  # every node of the asset is drawn (after a progressive rebuild)
    selection_changed = Signal(list)  # asset ids of the nodes ``select`` selected
    # For the overlays: a node was just drawn (marks asked for before show now), and the scene was
    # thrown away. Signals, not callbacks held here: the drawing holds no reference to the overlays.
    node_drawn = Signal(str)
    cleared = Signal()

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
        self.nodes: dict[str, AssetCanvasNode] = {}
        # Nodes of the document not drawn yet (a large graph is drawn a slice at a time), in the
        # order they will be drawn; everything that needs one draws it at once (ensure).
        self.pending: dict[str, None] = {}
        # Exits whose target node is not on the canvas yet (pasting A before B when A -> B).
        self.waiting: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self.start: StartTerminal | None = None
        self.end: EndTerminal | None = None
        self._build_timer = QTimer(self)
        self._build_timer.setInterval(0)
        self._build_timer.timeout.connect(self._build_slice)
        self._froze = False  # whether this canvas moved the objects it made out of garbage collection
        self._unfreeze_on_destroyed = False
        self._collect_after_clearing = False

    # --- building ----------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Throw the scene away and draw the document's asset afresh.

        A graph of more than ``PROGRESSIVE_ABOVE`` nodes is drawn in steps: the ``FIRST_BATCH``
        nodes nearest the start now, then the rest nearest first, a slice of ``SLICE_SECONDS`` at a
        time from the event loop, so the window shows the graph and takes input at once. A node not
        drawn yet is drawn at once when anything asks for it (``canvas_node``, ``select``, ...);
        ``finish_building`` draws them all; ``built`` is emitted when the last one is drawn."""
        self._build_timer.stop()
        self.pending.clear()
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
            self.nodes.clear()
            self.waiting.clear()
            self.cleared.emit()  # another asset: the marks and counts were of the old one
            self.start = self.graph.create_node(StartTerminal.type_, name="START", selected=False, push_undo=False)
            self.end = self.graph.create_node(EndTerminal.type_, name="END", selected=False, push_undo=False)
            for terminal, colour in ((self.start, TERMINAL_COLOURS["start"]), (self.end, TERMINAL_COLOURS["end"])):
                terminal.set_color(*colour)
            asset = self.document.asset
            # The scene's own bounds grow with its items (the view keeps its own range), except while
            # a large graph is drawn (below).
            scene.setSceneRect(QRectF())
            if len(asset.nodes) > PROGRESSIVE_ABOVE:
                progressive = True
                self.pending = dict.fromkeys(self._drawing_order())
                self._index_while_drawing(scene)
                for node_id in list(self.pending)[:FIRST_BATCH]:
                    self.ensure(node_id)
                self.place_terminals()
                self.sync_start()
                self._update_index()
                self._keep_out_of_collections()
                self._build_timer.start()
                return
            for node in asset.nodes:
                self._create(node.id)
            self.place_terminals()
            for node in asset.nodes:
                for port in shown_exits(node):
                    self.sync_exit(node.id, port)
            self.sync_start()
        finally:
            if not progressive:  # else when the last slice is drawn
                scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
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
        return bool(self.pending)

    def _build_slice(self) -> None:
        """Draw pending nodes for ``SLICE_SECONDS``; the last slice indexes the scene."""
        started = time.perf_counter()
        while self.pending and time.perf_counter() - started < SLICE_SECONDS:
            self.ensure(next(iter(self.pending)))
        self._update_index()
        self._keep_out_of_collections()
        if not self.pending:
            self._finish()

    def finish_building(self) -> None:
        """Draw every node not drawn yet, now."""
        if not self.pending and not self._build_timer.isActive():
            return
        while self.pending:
            self.ensure(next(iter(self.pending)))
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

    def ensure(self, node_id: str) -> None:
        """Draw a node that is pending, with its exits and the pipes waiting for it."""
        if node_id in self.pending:
            del self.pending[node_id]
            self.draw_node(node_id)

    def draw_node(self, node_id: str) -> None:
        """Draw a document's node, its exits, the pipes that were waiting for it, and START's pipe to it."""
        self._create(node_id)
        for port in shown_exits(self.document.node(node_id)):
            self.sync_exit(node_id, port)
        for source, port in sorted(self.waiting.pop(node_id, set())):
            if source in self.nodes:
                self.sync_exit(source, port)
        if self.document.asset.start_node == node_id:
            self.sync_start()

    def _create(self, node_id: str) -> AssetCanvasNode:
        node = self.document.node(node_id)
        canvas_node: AssetCanvasNode = CANVAS_CLASSES[node.type_name]()
        canvas_node.asset_id = node_id
        canvas_node.view.asset_id = node_id
        # Ports, title, colour and summary are set before the node enters the scene,
        # so NodeGraphQt lays it out once instead of once per port.
        for port in shown_exits(node):
            self.add_exit_port(canvas_node, node, port)
        canvas_node.NODE_NAME = shown_title(node)
        fill = shown_fill(node, view_of(node.type_name).fill)  # grey when bypassed
        if node.bypassed:
            canvas_node.view.setOpacity(shown_opacity(node))
        canvas_node.model.color = (*fill, 255)
        canvas_node.model.border_color = (*[min(255, c + 40) for c in fill], 255)
        canvas_node.view.summary = summary_lines(node, self.document.asset)
        canvas_node.view.is_start = self.document.asset.start_node == node_id
        canvas_node.view.game_events = marks_of(self.document.asset, node_id)
        canvas_node.view.game_exits = marked_exits(self.document.asset, node_id)
        if canvas_node.view.game_events:
            canvas_node.view.refresh_tooltip()
        self.graph.add_node(canvas_node, pos=list(node.position), selected=False, push_undo=False)
        self.nodes[node_id] = canvas_node
        self.node_drawn.emit(node_id)
        return canvas_node

    def add_exit_port(self, canvas_node: AssetCanvasNode, node: NodeBase, port: str) -> None:
        out = canvas_node.add_output(port, multi_output=False, display_name=True)
        canvas_node.view.get_output_text_item(out.view).setPlainText(shown_exit_label(node, port))

    def place_terminals(self) -> None:
        """Put START and END where the document keeps them, or else beside the graph."""
        assert self.start is not None and self.end is not None
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
        self.start.set_pos(*start)
        self.end.set_pos(*end)

    # --- lookups and selection -----------------------------------------------------------------

    def canvas_node(self, node_id: str) -> AssetCanvasNode:
        self.ensure(node_id)
        return self.nodes[node_id]

    def by_view(self, view) -> BaseNode | None:
        return self.graph.get_node_by_id(view.id)

    def terminal(self, key: str) -> BaseNode:
        terminal = self.start if key == START_KEY else self.end
        assert terminal is not None
        return terminal

    def node_size(self, key: str) -> tuple[float, float]:
        item = self.terminal(key) if key.startswith("@") else self.canvas_node(key)
        return item.view.width, item.view.height

    def selected_ids(self) -> list[str]:
        """Asset ids of the selected nodes, in document order."""
        chosen = {key_of(n) for n in self.graph.selected_nodes()}
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
            elif key in self.nodes:
                exits.append((key, out.name))
        return exits, start

    def select(self, node_ids: list[str]) -> None:
        self.graph.clear_selection()
        for node_id in node_ids:
            self.ensure(node_id)
            if node_id in self.nodes:
                self.nodes[node_id].set_selected(True)
        self.selection_changed.emit(self.selected_ids())

    def center_on(self, node_id: str) -> None:
        self.ensure(node_id)
        if node_id in self.nodes:
            self.graph.center_on([self.nodes[node_id]])

    def visible_rect(self) -> QRectF:
        return self.viewer.mapToScene(self.viewer.viewport().rect()).boundingRect()

    def view_center(self) -> tuple[float, float]:
        center = self.viewer.mapToScene(self.viewer.viewport().rect().center())
        return center.x(), center.y()

    # --- pipes: made to match the model ----------------------------------------------------------

    def _input_for(self, target: str):
        if target == END:
            assert self.end is not None
            return self.end.input_ports()[0]
        if target in self.nodes:
            return self.nodes[target].input_ports()[0]
        return None

    def sync_exit(self, node_id: str, port: str) -> None:
        """Draw exit ``port`` of a drawn node connected to the node the document says (or wait for it)."""
        out = self.nodes[node_id].outputs().get(port)
        if out is None:
            return
        target = self.document.exit_target(node_id, port)
        wanted = self._input_for(target)
        if wanted is None:
            self.waiting[target].add((node_id, port))
        self._reconcile(out, wanted)

    def sync_start(self) -> None:
        """Draw START's pipe to the start node, and mark which node is the start."""
        if self.start is None:
            return
        start = self.document.asset.start_node
        wanted = self.nodes[start].input_ports()[0] if start in self.nodes else None
        self._reconcile(self.start.output_ports()[0], wanted)
        for node_id, canvas_node in self.nodes.items():
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
