"""What the Edit menu's Cut, Copy, Paste, Duplicate, Delete and Set as Start Node do to the graph:
each one undo step on the document, the canvas's selection following."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QApplication

from editor.canvas.comments import add_comments
from editor.model.commands import (
    MacroCommand,
    SetAgentFieldCommand,
    SetExitCommand,
    add_nodes,
    disconnect,
    remove_comments,
    remove_nodes,
)
from runtime.asset.clipboard import comments_in_text, nodes_from_text, nodes_to_text, prepare_paste
from runtime.problems import AssetError

if TYPE_CHECKING:
    from editor.window.main_window import MainWindow


class EditMenu:
    """The graph edits of one window (its document, canvas, comment selection and status bar)."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.document = window.document
        self.canvas = window.canvas

    def copy(self) -> None:
        """Edit > Copy: the selected nodes and comments (a selected backdrop brings the nodes inside it)."""
        ids, comments = self.window.comment_actions.selection()
        if ids or comments:
            QApplication.clipboard().setText(nodes_to_text([self.document.node(i) for i in ids], comments))

    def cut(self) -> None:
        ids, comments = self.window.comment_actions.selection()
        if ids or comments:
            self.copy()
            command = remove_nodes(self.document, ids)
            remove_comments(self.document, [c.id for c in comments], command)
            command.setText(f"Cut {_things(len(ids), len(comments))}")
            self.document.push(command)

    def paste(self) -> None:
        self.paste_text(QApplication.clipboard().text(), None)

    def paste_text(self, text: str, pos: tuple[float, float] | None) -> list[str]:
        """Paste nodes (and comments) from JSON text; returns the new node ids. Bad text is reported,
        nothing changes."""
        try:
            nodes = nodes_from_text(text)
            comments = comments_in_text(text)
        except AssetError as exc:
            first = exc.problems[0]
            self.window.statusBar().showMessage(f"Nothing pasted: {first.where.lstrip(':')}: {first.message}", 8000)
            return []
        if not nodes and not comments:
            return []
        if pos is None:
            # beside the originals, never on top of them
            offset = self.canvas.clear_offset(nodes) if nodes else (40.0, 40.0)
        else:
            left = min(p.position[0] for p in [*nodes, *comments])
            top = min(p.position[1] for p in [*nodes, *comments])
            offset = (pos[0] - left, pos[1] - top)
        pasted = prepare_paste(nodes, self.document.used_ids(), offset)
        command = add_nodes(self.document, pasted, f"Paste {_things(len(pasted), len(comments))}")
        comment_ids = add_comments(self.document, comments, offset, command)
        if pasted and not self.document.asset.start_node:
            SetAgentFieldCommand(self.document, "start_node", "", pasted[0].id, command)
        self.document.push(command)
        ids = [n.id for n in pasted]
        self.canvas.select(ids)
        self.canvas.comments.select(comment_ids, add=True)
        return ids

    def duplicate(self) -> list[str]:
        ids, comments = self.window.comment_actions.selection()
        if not ids and not comments:
            return []
        originals = [self.document.node(i) for i in ids]
        offset = self.canvas.clear_offset(originals) if originals else (40.0, 40.0)
        pasted = prepare_paste(originals, self.document.used_ids(), offset)
        command = add_nodes(self.document, pasted, f"Duplicate {_things(len(pasted), len(comments))}")
        comment_ids = add_comments(self.document, comments, offset, command)
        self.document.push(command)
        new_ids = [n.id for n in pasted]
        self.canvas.select(new_ids)
        self.canvas.comments.select(comment_ids, add=True)
        return new_ids

    def delete_selected(self) -> None:
        """Edit > Delete: the selected nodes and comments (a backdrop's nodes stay), or else the selected
        connections (their exits then end the turn). A marquee also catches pipes that merely cross it,
        so with nodes selected only the nodes (and the exits into them) go."""
        doc = self.document
        ids = self.canvas.selected_ids()
        comment_ids = self.canvas.comments.selected_ids()
        if ids or comment_ids:
            command = remove_nodes(doc, ids) if ids else remove_comments(doc, comment_ids)
            if ids and comment_ids:
                remove_comments(doc, comment_ids, command)
                command.setText(f"Delete {_things(len(ids), len(comment_ids))}")
            doc.push(command)
            return
        exits, start = self.canvas.selected_connections()
        command = disconnect(doc, exits, start)
        if command.parts:
            (only, *more) = command.parts
            if more:
                command.setText(f"Delete {len(command.parts)} connections")
            elif isinstance(only, SetExitCommand):
                command.setText(f"Disconnect {only.node_id}.{only.port}")
            else:
                command.setText("Disconnect the start node")
            doc.push(command)

    def set_start_node(self) -> None:
        ids = self.canvas.selected_ids()
        doc = self.document
        if len(ids) == 1 and ids[0] != doc.asset.start_node:
            command = MacroCommand(f"Start at {ids[0]}")
            SetAgentFieldCommand(doc, "start_node", doc.asset.start_node, ids[0], command)
            doc.push(command)


def _things(nodes: int, comments: int) -> str:
    """'2 nodes', '1 node and 1 comment', '3 comments': what an edit of nodes and comments changed."""
    parts = [f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((nodes, "node"), (comments, "comment")) if n]
    return " and ".join(parts) or "0 nodes"
