"""The Palette dock: node types by category; drag one onto the canvas or double-click it."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QAbstractItemView, QDockWidget, QTreeWidget, QTreeWidgetItem, QWidget

from editor.canvas import NODE_MIME, node_type_mime
from editor.canvas.node_types import categories, category_colour


class PaletteTree(QTreeWidget):
    def mimeTypes(self) -> list[str]:
        return [NODE_MIME]

    def mimeData(self, items: list[QTreeWidgetItem]) -> QMimeData:
        type_name = items[0].data(0, Qt.ItemDataRole.UserRole) if items else None
        return node_type_mime(type_name) if type_name else QMimeData()


class PaletteDock(QDockWidget):
    add_requested = Signal(str)  # node type

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Palette", parent)
        self.setObjectName("PaletteDock")
        self.tree = PaletteTree(self)
        self.tree.setHeaderHidden(True)
        self.tree.setDragEnabled(True)
        self.tree.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        for category, views in categories().items():
            top = QTreeWidgetItem([category])
            top.setFlags(Qt.ItemFlag.ItemIsEnabled)
            top.setForeground(0, QBrush(QColor(*[min(255, c + 80) for c in category_colour(category)])))
            self.tree.addTopLevelItem(top)
            for view in views:
                item = QTreeWidgetItem([view.label])
                item.setData(0, Qt.ItemDataRole.UserRole, view.type)
                item.setToolTip(0, f"{view.help}\nDrag onto the canvas, or double-click to add.")
                item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsDragEnabled)
                item.setBackground(0, QBrush(QColor(*view.fill, 90)))
                top.addChild(item)
        self.tree.expandAll()
        self.tree.itemDoubleClicked.connect(self._double_clicked)
        self.setWidget(self.tree)

    def _double_clicked(self, item: QTreeWidgetItem) -> None:
        type_name = item.data(0, Qt.ItemDataRole.UserRole)
        if type_name:
            self.add_requested.emit(type_name)
