"""Gestures: what a person does on the canvas, turned into ``editor.model.commands``.

NodeGraphQt turns mouse gestures into signals and edits its own graph in reply; its editing slots
are cut off here (``_detach_graph_editing``) and each gesture (a move, a connection made, sliced or
dragged away, a renamed title, a drop, the Tab search) becomes one undo command on the document.
The drawing then follows the document. A node dropped on a connection, or added while one
connection is selected, is put on it (``insert_on_wire``). The window's own edits that place
nodes (Add, auto-layout) are here too, for they choose places on the drawn canvas.
"""

from __future__ import annotations

import math

from NodeGraphQt.constants import MIME_TYPE, PortTypeEnum
from NodeGraphQt.qgraphics.node_abstract import AbstractNodeItem
from NodeGraphQt.qgraphics.pipe import PipeItem
from NodeGraphQt.qgraphics.port import PortItem
from PySide6.QtCore import QEvent, QMimeData, QObject, QPoint, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QCursor, QMouseEvent
from shiboken6 import isValid

from editor.canvas.drawing import END_KEY, NEW_NODE_SIZE, START_KEY, TYPE_BY_IDENTIFIER, Drawing, key_of
from editor.canvas.node_search import NodeSearch
from editor.canvas.node_types import view_of
from editor.model.bypass import BYPASS_SUFFIX
from editor.model.commands import (
    AddNodeCommand,
    MacroCommand,
    MoveCommand,
    SetAgentFieldCommand,
    SetExitCommand,
    SetNodeFieldCommand,
)
from editor.model.document import COMMENT_KEY_PREFIX
from runtime.asset import layout as auto_layout
from runtime.asset.model import END, palette_node
from runtime.nodes import shown_exits

NODE_MIME = MIME_TYPE  # NodeGraphQt's viewer only accepts drags of a few formats; reuse its own
NODE_MIME_PREFIX = "parley-node-type:"
# Placing a node added without a position: the space kept around each node, and how far to look for room.
NODE_GAP = 40.0
SEARCH_RINGS = 12
PIPE_CLICK_DISTANCE = 2.0  # NodeGraphQt's: a press and release closer than this is a click on a pipe
# A connection: its source (a node id or START_KEY), the source's port ('' for START) and its target
# (a node id, or END).
Wire = tuple[str, str, str]


def _after_the_chain(keys: list[str], edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Layout-only edges that put the nodes a turn cannot reach (not connected yet) after the nodes
    it can: from each node where the connected chain ends (its exits all end the turn) to each
    unreached node. Without them an unconnected node has no predecessor, lands in the first column
    beside START, left of the classifier it is about to be connected from, and its pipe runs backwards."""
    succ: dict[str, list[str]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    reached, todo = {START_KEY}, [START_KEY]
    while todo:
        for child in succ.get(todo.pop(), []):
            if child not in reached:
                reached.add(child)
                todo.append(child)
    chain_ends = [n for n in keys if n in reached and n not in (START_KEY, END_KEY)
                  and all(t == END_KEY for t in succ.get(n, []))]
    if not chain_ends:  # nothing connected from START, or every chain loops: no order to keep
        return []
    unreached = [n for n in keys if n not in reached and n != END_KEY]
    return [(end, node) for end in chain_ends for node in unreached]


def node_type_mime(type_name: str) -> QMimeData:
    """The drag payload of a palette entry."""
    mime = QMimeData()
    mime.setData(NODE_MIME, f"{NODE_MIME_PREFIX}{type_name}".encode())
    return mime


class Gestures(QObject):
    """Turns the viewer's gestures on one drawing into commands on its document."""

    file_dropped = Signal(str)
    text_dropped = Signal(str, tuple)  # text, scene position (pasted nodes)

    def __init__(self, drawing: Drawing, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.drawing = drawing
        self.document = drawing.document
        self.graph = drawing.graph
        self.viewer = drawing.viewer
        self.search = NodeSearch(self.viewer)
        self.search.chosen.connect(self._on_search_chosen)
        self._search_at: tuple[float, float] | None = None
        # NodeGraphQt treats a click on a pipe as the start of dragging it away, and redraws it when
        # the mouse does not move: select the redrawn pipe then, so Delete can remove it.
        self._pressed_pipe: tuple[object, object, QPointF] | None = None
        self._detach_graph_editing()

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
        v.viewport().installEventFilter(self)
        # NodeGraph's own undo actions would steal Ctrl+Z from the window's.
        menu = self.graph.get_context_menu("graph").qmenu
        for action in (v.qaction_for_undo(), v.qaction_for_redo()):
            if action is not None:
                action.setShortcuts([])
                menu.removeAction(action)
        for action in list(menu.actions()):
            if action.isSeparator():
                menu.removeAction(action)

    # --- a click on a pipe selects it -----------------------------------------------------------

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
        return self._pipe_at_scene(self.viewer.mapToScene(viewport_pos.toPoint()))

    def _pipe_at_scene(self, scene_pos: QPointF) -> PipeItem | None:
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

    # --- connections, moves, titles -> commands ----------------------------------------------------

    def _out_and_in(self, a, b):
        return (a, b) if a.port_type == PortTypeEnum.OUT.value else (b, a)

    def _exit_of(self, out) -> tuple[str, str]:
        return key_of(self.drawing.by_view(out.node)), out.name

    def _on_connection_changed(self, disconnected: list, connected: list) -> None:
        changes: dict[tuple[str, str], str] = {}
        for a, b in disconnected:
            out, _in = self._out_and_in(a, b)
            changes[self._exit_of(out)] = END
        for a, b in connected:
            out, inp = self._out_and_in(a, b)
            target = key_of(self.drawing.by_view(inp.node))
            changes[self._exit_of(out)] = "" if target == END_KEY else target
        self._push_exit_changes(changes)

    def _on_connection_sliced(self, ports: list) -> None:
        changes = {}
        for a, b in ports:
            out, _in = self._out_and_in(a, b)
            changes[self._exit_of(out)] = END
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
                self.drawing.sync_start()
            elif source in self.drawing.nodes:
                self.drawing.sync_exit(source, port)

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
        node_id = key_of(self.graph.get_node_by_id(view_id))
        if node_id in self.drawing.nodes:
            node = self.document.node(node_id)
            if node.bypassed:  # the canvas shows "Title (bypassed)": the suffix is not part of the title
                title = title.removesuffix(BYPASS_SUFFIX)
            if title != node.display_title:
                self.document.push(SetNodeFieldCommand(self.document, node_id, "title", node.title, title))

    # --- the Tab search and drops -----------------------------------------------------------------

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
        at = self._search_at
        if at is not None:
            # at the mouse, but inside the view: a node added near its edge was cut off
            view = self.drawing.visible_rect().adjusted(NODE_GAP / 2, NODE_GAP / 2, -NODE_GAP / 2, -NODE_GAP / 2)
            w, h = NEW_NODE_SIZE
            at = (max(view.left(), min(at[0], view.right() - w)), max(view.top(), min(at[1], view.bottom() - h)))
        node_id = self.add_node(type_name, at)
        placed = self.drawing.nodes[node_id].view.sceneBoundingRect()
        view = self.drawing.visible_rect()
        if not view.contains(placed):  # taller than a new node is guessed to be: pan to show it whole
            dx = max(0.0, placed.right() + 8 - view.right()) - max(0.0, view.left() - placed.left() + 8)
            dy = max(0.0, placed.bottom() + 8 - view.bottom()) - max(0.0, view.top() - placed.top() + 8)
            self.viewer._scene_range.translate(dx, dy)  # NodeGraphQt pans by moving its scene range
            self.viewer._update_scene()
        self.viewer.setFocus()

    def _on_search_triggered(self, identifier: str, pos: tuple) -> None:
        type_name = TYPE_BY_IDENTIFIER.get(identifier)
        if type_name:
            self.add_node(type_name, (pos[0], pos[1]))

    def _on_data_dropped(self, mime: QMimeData, pos: QPoint) -> None:
        if mime.hasFormat(NODE_MIME):
            payload = bytes(mime.data(NODE_MIME).data()).decode()
            if payload.startswith(NODE_MIME_PREFIX):
                type_name = payload[len(NODE_MIME_PREFIX):]
                pipe = self._pipe_at_scene(QPointF(pos))
                wire = self._wire_of(pipe) if pipe is not None else None
                if wire is not None:  # dropped on a connection: the node goes on it, centred where it fell
                    w, h = NEW_NODE_SIZE
                    self.insert_on_wire(type_name, wire, (pos.x() - w / 2, pos.y() - h / 2))
                else:
                    self._add_alone(type_name, (pos.x(), pos.y()))
        elif mime.hasUrls():
            for url in mime.urls():
                if url.isLocalFile():
                    self.file_dropped.emit(url.toLocalFile())
        elif mime.hasText():
            self.text_dropped.emit(mime.text(), (pos.x(), pos.y()))

    # --- edits that choose a place on the canvas ----------------------------------------------------

    def add_node(self, type_name: str, pos: tuple[float, float] | None = None) -> str:
        """Add a node of ``type_name`` with its top-left at ``pos``; returns its id. Without ``pos``
        (the Add menu, a palette double-click) it goes in free space: right of the selection, or
        else near the view's centre, never on top of another node. With one connection selected
        (and no node) the node goes on that connection (``insert_on_wire``)."""
        wire = self.selected_wire()
        if wire is not None:
            return self.insert_on_wire(type_name, wire, pos)
        return self._add_alone(type_name, pos)

    def _add_alone(self, type_name: str, pos: tuple[float, float] | None) -> str:
        doc = self.document
        view = view_of(type_name)
        node_id = doc.unique_id(view.new_id)
        x, y = pos if pos is not None else self.free_spot()
        node = palette_node(type_name, node_id, position=(float(x), float(y)))
        parent = MacroCommand(f"Add {view.label}")
        AddNodeCommand(doc, node, None, parent)
        if not doc.asset.start_node:
            SetAgentFieldCommand(doc, "start_node", "", node_id, parent)
        doc.push(parent)
        self.drawing.select([node_id])
        placed = self.drawing.nodes[node_id].view.sceneBoundingRect()
        if pos is None and not self.drawing.visible_rect().contains(placed):
            self.drawing.center_on(node_id)
        return node_id

    def _wire_of(self, pipe: PipeItem) -> Wire | None:
        """The connection a drawn pipe shows, or None for a pipe that shows none (half drawn)."""
        out, inp = pipe.output_port, pipe.input_port
        if out is None or inp is None or not isValid(out) or not isValid(inp):
            return None
        source, port = self._exit_of(out)
        doc = self.document
        if source == START_KEY:
            return (START_KEY, "", doc.asset.start_node) if doc.asset.start_node else None
        if not doc.has_node(source) or port not in shown_exits(doc.node(source)):
            return None
        return source, port, doc.exit_target(source, port)

    def selected_wire(self) -> Wire | None:
        """The one selected connection, when it is all that is selected (no node, no other pipe)."""
        pipes = self.viewer.selected_pipes()
        if len(pipes) != 1 or self.graph.selected_nodes():
            return None
        return self._wire_of(pipes[0])

    def _wire_middle(self, wire: Wire) -> tuple[float, float]:
        """The top-left that centres a new node between a connection's two ends."""
        source, _port, target = wire
        start = self.drawing.terminal(START_KEY) if source == START_KEY else self.drawing.nodes.get(source)
        end = self.drawing.nodes.get(target) if target else self.drawing.terminal(END_KEY)
        if start is None or end is None:
            return self.free_spot()
        a, b = start.view.sceneBoundingRect(), end.view.sceneBoundingRect()
        w, h = NEW_NODE_SIZE
        return (a.right() + b.left()) / 2 - w / 2, (a.center().y() + b.center().y()) / 2 - h / 2

    def insert_on_wire(self, type_name: str, wire: Wire, pos: tuple[float, float] | None = None) -> str:
        """Put a new node of ``type_name`` on a connection, as one undo step: the connection's source
        leads to the new node and the new node's default exit (``bypass_port``) to the old target.
        A type without exits is added beside it instead. ``pos``: its top-left (else between the two
        ends). Returns the new node's id."""
        doc = self.document
        source, port, target = wire
        view = view_of(type_name)
        node_id = doc.unique_id(view.new_id)
        x, y = pos if pos is not None else self._wire_middle(wire)
        node = palette_node(type_name, node_id, position=(float(x), float(y)))
        onward = node.bypass_port()
        if not onward:
            return self._add_alone(type_name, pos)
        node = node.with_exits({onward: target})
        parent = MacroCommand(f"Insert {view.label} after {'START' if source == START_KEY else f'{source}.{port}'}")
        AddNodeCommand(doc, node, None, parent)
        if source == START_KEY:
            SetAgentFieldCommand(doc, "start_node", target, node_id, parent)
        else:
            SetExitCommand(doc, source, port, target, node_id, parent)
        doc.push(parent)
        self.drawing.select([node_id])
        return node_id

    def free_spot(self, size: tuple[float, float] = NEW_NODE_SIZE) -> tuple[float, float]:
        """A top-left for a node of ``size`` that overlaps no node: right of the selected nodes
        (the nearest free place in the columns beside them), or else nearest the view's centre."""
        taken = [n.view.sceneBoundingRect().adjusted(-NODE_GAP / 2, -NODE_GAP / 2, NODE_GAP / 2, NODE_GAP / 2)
                 for n in self.graph.all_nodes() if not key_of(n).startswith(COMMENT_KEY_PREFIX)]
        for node_id in self.drawing.pending:  # not drawn yet: about a new node's size
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
            cx, cy = self.drawing.view_center()
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

    def clear_offset(self, nodes: list) -> tuple[float, float]:
        """How far to move copies of ``nodes`` (a paste, a duplicate) so that they overlap no node on
        the canvas: not at all when their place is free, else beside the group to the right first,
        then below, then further away. Nodes drawn
        here are measured as drawn; others (pasted from elsewhere) as a new node."""
        boxes = []
        for node in nodes:
            drawn = self.drawing.nodes.get(node.id)
            w, h = NEW_NODE_SIZE
            if drawn is not None:
                size = drawn.view.sceneBoundingRect().size()
                w, h = size.width(), size.height()
            boxes.append(QRectF(node.position[0], node.position[1], w, h))
        if not boxes:
            return (0.0, 0.0)
        group = boxes[0]
        for rect in boxes[1:]:
            group = group.united(rect)
        taken = [n.view.sceneBoundingRect().adjusted(-NODE_GAP / 2, -NODE_GAP / 2, NODE_GAP / 2, NODE_GAP / 2)
                 for n in self.graph.all_nodes() if not key_of(n).startswith(COMMENT_KEY_PREFIX)]
        step_x, step_y = group.width() + NODE_GAP, group.height() + NODE_GAP
        cells = [(col, row) for col in range(SEARCH_RINGS) for row in range(SEARCH_RINGS)]
        cells.sort(key=lambda c: (max(c), c[1], c[0]))  # the nearest ring first; in it, rightwards first
        for col, row in cells:  # (0, 0) first: nodes cut and pasted back go where they were
            dx, dy = col * step_x, row * step_y
            if not any(box.translated(dx, dy).intersects(other) for box in boxes for other in taken):
                return (dx, dy)
        return (0.0, max(r.bottom() for r in taken) + NODE_GAP - group.top())

    def auto_layout(self) -> None:
        """Lay the graph out in layers from the start node; one undo step."""
        doc, drawing = self.document, self.drawing
        drawing.finish_building()
        keys = [START_KEY, *doc.asset.node_ids(), END_KEY]
        edges = []
        if doc.asset.start_node:
            edges.append((START_KEY, doc.asset.start_node))
        for node in doc.asset.nodes:
            for target in shown_exits(node).values():
                edges.append((node.id, END_KEY if target == END else target))
        sizes = {k: drawing.node_size(k) for k in keys}
        placed = auto_layout.layered_positions(keys, edges + _after_the_chain(keys, edges), sizes, roots=[START_KEY])
        moves = {}
        for key, new in placed.items():
            if key.startswith("@"):
                old = doc.terminal_position(key[1:]) or tuple(drawing.terminal(key).pos())
            else:
                old = doc.node(key).position
            if tuple(old) != new:
                moves[key] = (tuple(old), new)
        if moves:
            doc.push(MoveCommand(doc, moves, "Auto-layout"))
        # Terminals without a saved place are positioned by the canvas, not the model.
        for key in (START_KEY, END_KEY):
            drawing.terminal(key).set_pos(*placed[key])
