"""Every branch of the conversation as a tree: regenerated replies, rewound and edited turns. A click
continues the conversation from the branch a turn is on."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem, QWidget

from editor.session.view import SessionView
from runtime.agent import turn_reply


class BranchTree(QTreeWidget):
    def __init__(self, view: SessionView, asset: Callable[[], object], read_only: Callable[[], str],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.asset = asset
        self.read_only = read_only
        self.setHeaderLabels(["Branches: every turn ever written (bold: this branch)"])
        self.setToolTip("Click a turn to continue the conversation from the branch it is on")
        self.itemClicked.connect(self._clicked)
        self.hide()

    def fill(self) -> int:
        """Draw the tree when it is shown; the number of turns ever written (0 without a tree)."""
        tree = self.view.saved.tree
        count = len(tree) if tree is not None else 0
        if not self.isVisible() or tree is None:
            return count
        self.clear()
        on_path = set(tree.path())
        asset = self.asset()
        items: dict[int | None, QTreeWidgetItem] = {}

        def add(parent: int | None, owner) -> None:
            for turn_id in tree.children.get(parent, []):
                node = tree.nodes[turn_id]
                reply = turn_reply(asset, node.turn).replace("\n", " ")
                mark = " \u270e" if node.edited else ""
                more = "\u2026" if len(reply) > 40 else ""
                text = f"Turn {tree.depth(turn_id) + 1}{mark}: {node.turn.player[:40]} \u2192 {reply[:40]}{more}"
                item = QTreeWidgetItem(owner, [text])
                item.setData(0, Qt.ItemDataRole.UserRole, turn_id)
                if turn_id in on_path:
                    font = QFont(item.font(0))
                    font.setBold(True)
                    item.setFont(0, font)
                items[turn_id] = item
                add(turn_id, item)

        add(None, self)
        self.expandAll()
        if tree.current in items:
            self.setCurrentItem(items[tree.current])
        return count

    def _clicked(self, item: QTreeWidgetItem) -> None:
        turn_id = item.data(0, Qt.ItemDataRole.UserRole)
        if turn_id is not None and not self.view.busy and not self.read_only():
            self.actions.select_branch(int(turn_id))
