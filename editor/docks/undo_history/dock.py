"""The Undo History dock: the undo stack, where clicking an entry goes back to it."""

from __future__ import annotations

from PySide6.QtGui import QUndoStack
from PySide6.QtWidgets import QDockWidget, QUndoView, QWidget


class UndoHistoryDock(QDockWidget):
    def __init__(self, stack: QUndoStack, parent: QWidget | None = None) -> None:
        super().__init__("Undo History", parent)
        self.setObjectName("UndoHistoryDock")
        self.view = QUndoView(stack, self)
        self.view.setEmptyLabel("Opened")
        self.setWidget(self.view)
