"""Game events: the nodes and exits the game acts on (``Asset.game_events``; a quest step, a reward).

A designer marks one with the node's context menu, "Game Acts on This…", which asks the event's name
and, for a node with several exits, whether it happens when the node runs or when it takes one exit.
The mark is one undo step on the asset's ``game_events``; the canvas draws a marked node with a gold
"GAME" tag (``marks_of``), and validation warns when a player can reach it on their word alone.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QWidget,
)

from editor.model.commands import MacroCommand, SetAgentFieldCommand, SetNodeFieldCommand
from editor.model.document import Document
from runtime.asset.model import Asset, NodeBase
from runtime.nodes.base import SLOT_PATTERN

if TYPE_CHECKING:
    from PySide6.QtGui import QAction

WHEN_RUNS = ""  # the event's exit when it happens as the node runs


def marks_of(asset: Asset, node_id: str) -> list[str]:
    """The game events marked on ``node_id``, as the canvas tag's tooltip lists them
    (``quest_complete``, ``reward (on exit passes)``)."""
    node = next((n for n in asset.nodes if n.id == node_id), None)
    out = []
    for event in asset.game_events:
        if event.node != node_id:
            continue
        if event.exit and node is not None and event.exit in node.exits():
            out.append(f"{event.name} (on exit {node.exit_label(event.exit)})")
        else:
            out.append(event.name + (f" (on exit {event.exit})" if event.exit else ""))
    return out


def marked_exits(asset: Asset, node_id: str) -> set[str]:
    """The ports of ``node_id`` a game event is marked on (the canvas puts a diamond before each)."""
    return {event.exit for event in asset.game_events if event.node == node_id and event.exit}


def mark_game_event(document: Document, node_id: str, name: str, exit: str = WHEN_RUNS) -> SetAgentFieldCommand:
    """The undo command that adds the game event ``name`` on ``node_id`` (or its port ``exit``).
    Raises ValueError for a name the asset would refuse or a mark that is already there."""
    if not re.fullmatch(SLOT_PATTERN, name):
        raise ValueError(f"{name!r} is not an event name: one word of letters, digits and _ (quest_complete)")
    old = [event.model_dump() for event in document.asset.game_events]
    new = {"name": name, "node": node_id, "exit": exit}
    if new in old:
        raise ValueError(f"{node_id} is already marked as {name}")
    command = SetAgentFieldCommand(document, "game_events", old, [*old, new])
    command.setText(f"Mark {node_id} as game event {name}")
    return command


def edit_keeping_marks(document: Document, node_id: str, field: str, value: Any) -> MacroCommand | None:
    """The Properties dock's edit of a node whose exits are records (a Guard's policies, a Classify
    Intent's intents): renaming one renames its port, so a game event marked on that port follows it,
    in the same undo step. None: the dock's plain edit."""
    node = document.node(node_id)
    marked = [e for e in document.asset.game_events if e.node == node_id and e.exit]
    if not marked or field == "id":
        return None
    try:
        changed = type(node).model_validate({**node.model_dump(), field: value})
    except ValidationError:
        return None
    before, after = list(node.exits()), list(changed.exits())
    if len(before) != len(after) or before == after:
        return None
    renamed = {old: new for old, new in zip(before, after, strict=True) if old != new}
    if len(renamed) != 1:  # not one port renamed: moved or replaced, which a mark cannot follow
        return None
    old_events = [e.model_dump() for e in document.asset.game_events]
    new_events = [{**e, "exit": renamed.get(e["exit"], e["exit"])} if e["node"] == node_id else e for e in old_events]
    if new_events == old_events:
        return None
    command = MacroCommand(f"Change {node_id} {field.replace('_', ' ')}")
    SetNodeFieldCommand(document, node_id, field, getattr(node, field), value, command)
    SetAgentFieldCommand(document, "game_events", old_events, new_events, command)
    return command


def exit_choices(node: NodeBase) -> list[tuple[str, str]]:
    """(label, exit) for the dialog's "When" box: the node running, then each of its exits."""
    return [("when the node runs", WHEN_RUNS)] + [
        (f"when it takes exit \u201c{node.exit_label(port)}\u201d", port) for port in node.exits()]


class GameEventDialog(QDialog):
    """Asks the event's name and, for a node with several exits, when it happens."""

    def __init__(self, node: NodeBase, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Game acts on {node.id}")
        form = QFormLayout(self)
        form.addRow(QLabel("Name the event the game acts on here (a quest step, a reward, a price). Validation\n"
                           "warns when a player can reach it on their word alone."))
        self.name = QLineEdit(self)
        self.name.setPlaceholderText("quest_complete")
        form.addRow("Event", self.name)
        self.when = QComboBox(self)
        for label, port in exit_choices(node):
            self.when.addItem(label, port)
        self.asks_when = len(node.exits()) > 1  # one exit or none: the node running is the event
        if self.asks_when:
            form.addRow("When", self.when)
        else:
            self.when.hide()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def event_name(self) -> str:
        return self.name.text().strip()

    def exit(self) -> str:
        return self.when.currentData() if self.asks_when else WHEN_RUNS


class GameEventActions:
    """"Game Acts on This…" on the node the canvas menu was opened on, else the window's one selected
    node. ``window`` is the editor's MainWindow, typed as a QMainWindow (as in ``editor.model.bypass``)."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self.pointed = ""  # the node under the cursor when the canvas menu opened ('' : none)
        self.action: QAction = window._action(
            "&Game Acts on This\u2026", self.mark_selected, canvas=True,
            tip="Mark the node, or one of its exits, as one the game acts on (a quest step, a reward)")

    def point_at_cursor(self) -> None:
        """Remember the node under the cursor: a right-click on a node does not select it."""
        canvas = self.window.canvas
        x, y = canvas.scene_cursor_pos()
        ids = [getattr(item, "asset_id", "") for item in canvas.viewer.scene().items(QPointF(x, y))]
        self.pointed = next((i for i in ids if i and self.window.document.has_node(i)), "")

    def forget_pointed(self) -> None:
        self.pointed = ""

    def mark_selected(self) -> bool:
        doc = self.window.document
        pointed, self.pointed = self.pointed, ""
        selected = [pointed] if pointed and doc.has_node(pointed) else [
            i for i in self.window.canvas.selected_ids() if doc.has_node(i)]
        if len(selected) != 1:
            self.window.statusBar().showMessage("Select the one node the game acts on", 4000)
            return False
        dialog = GameEventDialog(doc.node(selected[0]), self.window)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return False
        try:
            command = mark_game_event(doc, selected[0], dialog.event_name(), dialog.exit())
        except ValueError as exc:
            self.window.statusBar().showMessage(str(exc), 6000)
            return False
        doc.push(command)
        return True


def install_game_events(window: QMainWindow, edit_menu: QMenu | None, canvas_menu: QMenu) -> GameEventActions:
    actions = GameEventActions(window)
    for menu in (edit_menu, canvas_menu):
        if menu is not None:
            menu.addAction(actions.action)
    canvas_menu.aboutToShow.connect(actions.point_at_cursor)
    if edit_menu is not None:
        edit_menu.aboutToShow.connect(actions.forget_pointed)  # from the Edit menu: the selection
    return actions
