"""Bypass (Ctrl+B): a bypassed node passes the turn straight along its default exit without running
(``NodeBase.bypassed``; the runtime takes ``NodeBase.bypass_port()``). The canvas draws it greyed with
"(bypassed)" after its title, validation warns about it, and the Turn Inspector says so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QMainWindow, QMenu

from editor.model.commands import MacroCommand, SetNodeFieldCommand
from editor.model.document import Document
from runtime.asset.model import NodeBase

if TYPE_CHECKING:
    from PySide6.QtGui import QAction

BYPASS_SUFFIX = " (bypassed)"
BYPASSED_FILL = (70, 70, 70)
BYPASSED_OPACITY = 0.55


def shown_title(node: NodeBase) -> str:
    """The title the canvas shows: a bypassed node's says so."""
    return node.display_title + BYPASS_SUFFIX if node.bypassed else node.display_title


def shown_fill(node: NodeBase, fill: tuple[int, int, int]) -> tuple[int, int, int]:
    """The node's type colour, or grey when it is bypassed."""
    return BYPASSED_FILL if node.bypassed else fill


def shown_opacity(node: NodeBase) -> float:
    return BYPASSED_OPACITY if node.bypassed else 1.0


def toggle_bypass(document: Document, node_ids: list[str]) -> MacroCommand | None:
    """One undo step that bypasses the nodes ``node_ids`` (all of them, when any is not bypassed yet)
    or, when every one is bypassed, runs them again; None for no nodes."""
    nodes = [document.node(i) for i in node_ids if document.has_node(i)]
    if not nodes:
        return None
    bypass = not all(node.bypassed for node in nodes)
    changing = [node for node in nodes if node.bypassed != bypass]
    verb = "Bypass" if bypass else "Stop bypassing"
    command = MacroCommand(f"{verb} {changing[0].id}" if len(changing) == 1 else f"{verb} {len(changing)} nodes")
    for node in changing:
        SetNodeFieldCommand(document, node.id, "bypassed", node.bypassed, bypass, command)
    return command


class BypassActions:
    """Edit > Bypass (Ctrl+B) on a window's selected nodes. ``window`` is the editor's MainWindow,
    typed as a QMainWindow: nothing below the window imports it (the docks would come with it)."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self.action: QAction = window._action(
            "&Bypass", self.toggle_selected, "Ctrl+B", canvas=True,
            tip="Bypass the selected nodes, or run them again: a bypassed node passes the turn along its "
                "default exit without running (Ctrl+B)")

    def toggle_selected(self) -> bool:
        doc = self.window.document
        command = toggle_bypass(doc, self.window.canvas.selected_ids())
        if command is None:
            self.window.statusBar().showMessage("Select the nodes to bypass", 4000)
            return False
        doc.push(command)
        return True


def install_bypass(window: QMainWindow, edit_menu: QMenu | None, canvas_menu: QMenu) -> BypassActions:
    actions = BypassActions(window)
    for menu in (edit_menu, canvas_menu):
        if menu is not None:
            menu.addAction(actions.action)
    return actions
