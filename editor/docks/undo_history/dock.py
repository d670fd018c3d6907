"""The Undo History dock: the undo stack, where clicking an entry goes back to it.

Long entries wrap to the dock's width (never cut off), each has its whole text as a tooltip, and the
steps that were undone (those Redo would do again) are greyed."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QColor, QPalette, QUndoStack
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDockWidget,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolTip,
    QUndoView,
    QWidget,
)

UNDONE_COLOUR = QColor(128, 128, 128)


class UndoStepDelegate(QStyledItemDelegate):
    """Draws a step greyed and in italics when it is undone: its row comes after the stack's index
    (row 0 is the "Opened" state, so row n is the stack's command n - 1)."""

    def __init__(self, stack: QUndoStack, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.stack = stack

    def is_undone(self, index: QModelIndex | QPersistentModelIndex) -> bool:
        return index.row() > self.stack.index()

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        if self.is_undone(index):
            option.palette.setColor(QPalette.ColorRole.Text, UNDONE_COLOUR)
            option.palette.setColor(QPalette.ColorRole.HighlightedText, UNDONE_COLOUR.lighter(140))
            option.font.setItalic(True)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        # As wide as the view, and as tall as the text wrapped to that: the list never lays an entry
        # out wider than the dock, where it would be cut off
        view = self.parent()
        if isinstance(view, QAbstractItemView):
            wrapped = QStyleOptionViewItem(option)
            width = view.viewport().width()
            wrapped.rect = QRect(0, 0, width, 10_000)
            hint = super().sizeHint(wrapped, index)
            return QSize(min(hint.width(), width), hint.height())
        return super().sizeHint(option, index)

    def helpEvent(self, event, view, option, index) -> bool:
        text = index.data(Qt.ItemDataRole.DisplayRole)
        if text:
            QToolTip.showText(event.globalPos(), f"{text}{' (undone: Redo does it again)' if self.is_undone(index) else ''}",
                              view)
            return True
        return super().helpEvent(event, view, option, index)


class UndoHistoryDock(QDockWidget):
    def __init__(self, stack: QUndoStack, parent: QWidget | None = None) -> None:
        super().__init__("Undo History", parent)
        self.setObjectName("UndoHistoryDock")
        self.view = QUndoView(stack, self)
        self.view.setEmptyLabel("Opened")
        # Wrapped to the dock's width however wide it is, no fixed width; a word longer than the
        # dock (a long node id) ends in "…", and the tooltip has it whole
        self.view.setWordWrap(True)
        self.view.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setResizeMode(QUndoView.ResizeMode.Adjust)
        self.view.setUniformItemSizes(False)
        self.delegate = UndoStepDelegate(stack, self.view)
        self.view.setItemDelegate(self.delegate)
        # the undone steps change without a model change: repaint them when the index moves
        stack.indexChanged.connect(self._index_moved)
        self.setWidget(self.view)

    def _index_moved(self, _index: int) -> None:
        self.view.viewport().update()
