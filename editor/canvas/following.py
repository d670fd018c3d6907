"""Following the document: its change events update what is drawn.

Whether a change came from the canvas, the properties dock, undo or a paste, the document says so
and the drawing (and the overlays on it) catch up here; nothing else edits the drawing.
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from editor.canvas.drawing import Drawing
from editor.canvas.node_appearance import apply_appearance
from editor.canvas.overlays import Overlays
from editor.model.document import Document
from runtime.nodes import shown_exits


class DocumentFollower(QObject):
    """Connects a document's change signals to the drawing of it."""

    def __init__(self, document: Document, drawing: Drawing, overlays: Overlays,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.drawing = drawing
        self.overlays = overlays
        d = document
        d.node_added.connect(self._on_node_added)
        d.node_removed.connect(self._on_node_removed)
        d.node_changed.connect(self._on_node_changed)
        d.node_moved.connect(self._on_node_moved)
        d.node_renamed.connect(self._on_node_renamed)
        d.agent_changed.connect(self._on_agent_changed)
        d.terminal_moved.connect(self._on_terminal_moved)
        d.reset.connect(drawing.rebuild)

    def _on_node_added(self, node_id: str) -> None:
        self.drawing.draw_node(node_id)
        self._refresh_reply_guards(node_id)

    def _refresh_reply_guards(self, changed: str) -> None:
        """A reply guard's summary lists the speaking nodes wired into it: redrawn when another node
        (its exits) changes, comes or goes."""
        drawing, asset = self.drawing, self.document.asset
        for node in asset.nodes:
            if node.id != changed and node.checks_reply_of() and node.id in drawing.nodes:
                apply_appearance(drawing.nodes[node.id].view, node, asset)

    def _on_node_removed(self, node_id: str) -> None:
        drawing = self.drawing
        self.overlays.forget_node(node_id)
        if node_id in drawing.pending:  # never drawn: nothing to take away
            del drawing.pending[node_id]
            return
        canvas_node = drawing.nodes.pop(node_id)
        for port in canvas_node.input_ports() + canvas_node.output_ports():
            for pipe in list(port.view.connected_pipes):
                source = getattr(pipe.output_port.node, "asset_id", "")
                if port.view is pipe.input_port and source and not source.startswith("@"):
                    drawing.waiting[node_id].add((source, pipe.output_port.name))
                pipe.delete()
        drawing.graph.remove_node(canvas_node, push_undo=False)
        self._refresh_reply_guards(node_id)

    def _on_node_changed(self, node_id: str, _field: str) -> None:
        drawing = self.drawing
        if node_id in drawing.pending:
            return  # drawn from the document as it is then
        canvas_node = drawing.nodes[node_id]
        node = self.document.node(node_id)
        wanted = list(shown_exits(node))
        have = [p.name() for p in canvas_node.output_ports()]
        if wanted != have:
            for port in list(canvas_node.output_ports()):
                for pipe in list(port.view.connected_pipes):
                    pipe.delete()
                canvas_node.delete_output(port)
            for port in wanted:
                drawing.add_exit_port(canvas_node, node, port)
        apply_appearance(canvas_node.view, node, self.document.asset)
        for port in wanted:
            drawing.sync_exit(node_id, port)
        self.overlays.node_changed(node_id)
        self._refresh_reply_guards(node_id)

    def _on_node_moved(self, node_id: str) -> None:
        if node_id in self.drawing.pending:
            return
        canvas_node = self.drawing.nodes[node_id]
        x, y = self.document.node(node_id).position
        if tuple(canvas_node.pos()) != (x, y):
            canvas_node.set_pos(x, y)

    def _on_node_renamed(self, old: str, new: str) -> None:
        drawing = self.drawing
        if old in drawing.waiting:
            drawing.waiting[new] = drawing.waiting.pop(old)
        self.overlays.rename_node(old, new)
        if old in drawing.pending:
            drawing.pending = {new if k == old else k: None for k in drawing.pending}
            return
        canvas_node = drawing.nodes.pop(old)
        canvas_node.asset_id = new
        canvas_node.view.asset_id = new
        drawing.nodes[new] = canvas_node
        apply_appearance(canvas_node.view, self.document.node(new), self.document.asset)
        self._refresh_reply_guards(new)

    def _on_agent_changed(self, field: str) -> None:
        if field == "start_node":
            self.drawing.sync_start()
        if field in ("start_node", "default_model", "game_events"):
            nodes = self.drawing.nodes
            for node in self.document.asset.nodes:
                if node.id in nodes:
                    apply_appearance(nodes[node.id].view, node, self.document.asset)

    def _on_terminal_moved(self, name: str) -> None:
        pos = self.document.terminal_position(name)
        if pos is None:
            self.drawing.place_terminals()
            return
        terminal = self.drawing.terminal(f"@{name}")
        if tuple(terminal.pos()) != pos:
            terminal.set_pos(*pos)
