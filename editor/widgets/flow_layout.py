"""A layout that lays its widgets out in a row and wraps them onto further rows when the row is
too narrow (Qt's FlowLayout example), so a row of buttons never sets a dock's minimum width."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QSizePolicy, QWidget


class FlowLayout(QLayout):
    """Items left to right, wrapping; ``stretch_last`` pins the last item to the right of its row
    (a Mute toggle at the row's end, as a stretch did in a box layout)."""

    def __init__(self, parent: QWidget | None = None, spacing: int = 4, stretch_last: bool = False) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._spacing = spacing
        self._stretch_last = stretch_last
        self.setContentsMargins(0, 0, 0, 0)

    # --- QLayout's item store ---------------------------------------------------------------
    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    # --- sizes: as narrow as the widest item, as tall as the wrapping needs --------------------
    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._arrange(QRect(0, 0, width, 0), move=False)

    def sizeHint(self) -> QSize:
        # one row when there is room for it
        visible = [i for i in self._items if not i.isEmpty()]
        width = sum(i.sizeHint().width() for i in visible) + self._spacing * max(0, len(visible) - 1)
        height = max((i.sizeHint().height() for i in visible), default=0)
        m = self.contentsMargins()
        return QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def minimumSize(self) -> QSize:
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._arrange(rect, move=True)

    def _arrange(self, rect: QRect, move: bool) -> int:
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        x, y, row_height = area.x(), area.y(), 0
        visible = [i for i in self._items if not i.isEmpty()]
        for index, item in enumerate(visible):
            hint = item.sizeHint()
            last = index == len(visible) - 1
            if x > area.x() and x + hint.width() > area.right() + 1:
                x, y, row_height = area.x(), y + row_height + self._spacing, 0
            left = x
            if last and self._stretch_last:
                left = max(x, area.right() + 1 - hint.width())
            if move:
                item.setGeometry(QRect(QPoint(left, y), hint))
            x = left + hint.width() + self._spacing
            row_height = max(row_height, hint.height())
        return y + row_height - rect.y() + m.bottom()


def wrapping_row(parent: QWidget, widgets: list[QWidget], stretch_last: bool = False) -> QWidget:
    """A widget holding ``widgets`` in a FlowLayout, its height following its width."""
    row = QWidget(parent)
    layout = FlowLayout(row, stretch_last=stretch_last)
    for widget in widgets:
        layout.addWidget(widget)
    policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
    policy.setHeightForWidth(True)
    row.setSizePolicy(policy)
    return row
