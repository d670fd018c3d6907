"""What the Edit menu's Cut, Copy, Paste, Duplicate, Duplicate with Connections, Delete, Set as Start
Node and Find in Project do to the graph: each edit one undo step on the document, the canvas's
selection following."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QMenu

from editor.canvas.comments import add_comments
from editor.canvas.project_find import ProjectFind, ProjectMatch
from editor.model.commands import (
    MacroCommand,
    SetAgentFieldCommand,
    SetExitCommand,
    add_nodes,
    copy_incoming_exits,
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
        self.project_find: ProjectFind | None = None  # Find in Project's popup, made when first asked for
        self.duplicate_connected_action: QAction | None = None
        self.find_in_project_action: QAction | None = None

    def add_to_menus(self, edit: QMenu, canvas_menu: QMenu) -> None:
        """Duplicate with Connections after Duplicate (in Edit and the canvas's menu), and Find in
        Project after Find Node (in Edit)."""
        w = self.window
        self.duplicate_connected_action = w._action(
            "Duplicate &with Connections", self.duplicate_with_connections, "Ctrl+Shift+D", canvas=True,
            tip="Duplicate the selected nodes with their exits, and point a free exit of each node that "
                "leads into them at the copy (Ctrl+Shift+D)")
        self.find_in_project_action = w._action(
            "Find in Pro&ject\u2026", self.find_in_project, "Ctrl+Shift+F",
            tip="Find a node or a note in this asset, the behaviours it runs and every asset in its folder "
                "(Ctrl+Shift+F)")
        for menu in (edit, canvas_menu):
            _insert_after(menu, w.duplicate_action, self.duplicate_connected_action)
        _insert_after(edit, w.find_action, self.find_in_project_action)

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

    def duplicate_with_connections(self) -> list[str]:
        """Edit > Duplicate with Connections: Duplicate, and the connections into the originals too.
        The copies keep the originals' exits (as Duplicate does); an exit into an original cannot lead
        to its copy as well (an exit has one target), so each node that leads into an original gives
        the copy its first exit that ends the turn, when it has one (``copy_incoming_exits``). One
        undo step; the status bar says what was connected and what had no free exit."""
        ids = self.canvas.selected_ids()
        if not ids:
            self.window.statusBar().showMessage("Select the nodes to duplicate with their connections", 4000)
            return []
        originals = [self.document.node(i) for i in ids]
        pasted = prepare_paste(originals, self.document.used_ids(), self.canvas.clear_offset(originals))
        command = add_nodes(self.document, pasted, f"Duplicate {_things(len(pasted), 0)} with connections")
        connected, skipped = copy_incoming_exits(self.document, {o.id: p.id for o, p in zip(originals, pasted)},
                                                 command)
        self.document.push(command)
        new_ids = [n.id for n in pasted]
        self.canvas.select(new_ids)
        arrow = " \u2192 "
        said = [f"connected {', '.join(f'{s}.{p}{arrow}{c}' for s, p, c in connected)}" if connected
                else "" if skipped else "nothing led into the original"]
        if skipped:
            said.append("no free exit on " + ", ".join(sorted({s for s, _, _ in skipped})))
        self.window.statusBar().showMessage(
            f"Duplicated {_things(len(new_ids), 0)}: " + "; ".join(filter(None, said)), 8000)
        return new_ids

    def find_in_project(self) -> ProjectFind:
        """Edit > Find in Project (Ctrl+Shift+F): a popup at the top of the canvas searching this asset,
        the behaviours it runs and the assets in its folder; the node or note picked is opened and shown."""
        if self.project_find is None:
            self.project_find = ProjectFind(self.window)
            self.project_find.chosen_match.connect(self.open_match)
        doc = self.document
        viewport = self.canvas.viewer.viewport()
        self.project_find.popup_for(doc.asset, doc.asset_dir, doc.path,
                                    viewport.mapToGlobal(QPoint(viewport.width() // 2, 8)),
                                    min(560, max(320, viewport.width() - 40)))
        return self.project_find

    def open_match(self, match: ProjectMatch) -> object:
        """Show a Find in Project result: in this window, or in the window of its file (opened if need be)."""
        return open_match(self.window, match)

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


def window_of(window: MainWindow, path: Path) -> MainWindow:
    """The window that has the file ``path`` open (raised), else a new window with it opened."""
    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, type(window)) and widget.document.path and Path(widget.document.path) == path:
            widget.show()
            widget.raise_()
            widget.activateWindow()
            return widget
    other = window.new_window()
    other.open_path(str(path))
    return other


def open_match(window: MainWindow, match: ProjectMatch) -> MainWindow | None:
    """Show ``match``: its file in its window (this one for the open asset), the node or note selected
    and centred. None when the file could not be opened or no longer has it."""
    if match.file.path is not None:
        window = window_of(window, match.file.path)
        if not window.document.path or Path(window.document.path) != match.file.path:
            return None  # could not be opened: its window says why
    if match.kind == "node":
        return window if window.show_node(match.item_id) else None
    canvas = window.canvas
    if not window.document.has_comment(match.item_id) or match.item_id not in canvas.comments.views:
        window.statusBar().showMessage(f"No {match.kind} {match.item_id!r} in this asset", 4000)
        return None
    canvas.comments.select([match.item_id])
    canvas.graph.center_on([canvas.comments.views[match.item_id]])
    return window


def _insert_after(menu: QMenu, anchor: QAction, action: QAction) -> None:
    actions = menu.actions()
    after = actions.index(anchor) + 1 if anchor in actions else len(actions)
    if after < len(actions):
        menu.insertAction(actions[after], action)
    else:
        menu.addAction(action)


def _things(nodes: int, comments: int) -> str:
    """'2 nodes', '1 node and 1 comment', '3 comments': what an edit of nodes and comments changed."""
    parts = [f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((nodes, "node"), (comments, "comment")) if n]
    return " and ".join(parts) or "0 nodes"
