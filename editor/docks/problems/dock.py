"""The Problems dock: every error and warning in the asset; clicking one shows where it is."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QModelIndex, QObject, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QDockWidget,
    QHeaderView,
    QLabel,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.canvas.node_appearance import SEVERITY_COLOURS
from runtime.problems import Problem

# The Where column's share of the dock's width at most: in a 368 px column (1366x768) the problem's
# text had 96 px and was cut ("the context (..."); now it has the rest, and wraps.
WHERE_SHARE = 0.38


class WrappedText(QStyledItemDelegate):
    """A row as tall as its cells' text needs wrapped in their columns' widths (a tree measures
    its rows without their columns' widths, so wrapped text was cut to one line). The first
    column (the severity) is never wrapped: it is as wide as its longest word."""

    def __init__(self, tree: QTreeWidget) -> None:
        super().__init__(tree)
        self.tree = tree

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        if index.column() == 0:
            return super().sizeHint(option, index)
        wrapped = QStyleOptionViewItem(option)
        # a valid rectangle of the column's width: the style wraps only in one
        wrapped.rect = QRect(0, 0, self.tree.columnWidth(index.column()), max(1, option.rect.height()))
        wrapped.features |= QStyleOptionViewItem.ViewItemFeature.WrapText  # the tree leaves it out here
        return super().sizeHint(wrapped, index)


class ProblemsDock(QDockWidget):
    problem_activated = Signal(str, str)  # node id, field

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Problems", parent)
        self.setObjectName("ProblemsDock")
        self.tree = QTreeWidget(self)
        self.tree.setRootIsDecorated(False)
        self.tree.setHeaderLabels(["", "Where", "Problem"])
        # Each problem whole, however narrow the dock: its text wraps in the width left by the
        # severity and the place, and its row is as tall as that needs.
        self.tree.setWordWrap(True)
        self.tree.setUniformRowHeights(False)
        self.tree.setItemDelegate(WrappedText(self.tree))
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.tree.header()
        header.setStretchLastSection(True)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.viewport().installEventFilter(self)  # the columns follow the dock's width
        # and the rows' heights follow the problem column's width (it stretches after the viewport
        # resized): measured again once, after the step of the event loop that resized it
        self._measure_rows = QTimer(self)
        self._measure_rows.setSingleShot(True)
        self._measure_rows.setInterval(0)
        self._measure_rows.timeout.connect(self.tree.doItemsLayout)
        header.sectionResized.connect(self._column_resized)
        self.tree.setAlternatingRowColors(True)
        self.tree.itemActivated.connect(self._activated)
        self.tree.itemClicked.connect(self._activated)
        # With nothing to show the dock is one line, "No problems", so the docks beside it get the room
        self.none_label = QLabel("No problems", self)
        self.none_label.setObjectName("no_problems")
        self.none_label.setStyleSheet("color: #8a8a8a; padding: 2px 4px;")
        body = QWidget(self)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.none_label)
        layout.addWidget(self.tree)
        self.setWidget(body)
        self.problems: list[Problem] = []
        self._show_empty(True)

    def _show_empty(self, empty: bool) -> None:
        self.tree.setVisible(not empty)
        self.none_label.setVisible(empty)
        body = self.widget()
        body.setMaximumHeight(self.none_label.sizeHint().height() if empty else 16_777_215)

    def set_problems(self, problems: list[Problem]) -> None:
        if problems == self.problems and self.tree.topLevelItemCount() == len(problems):
            return  # most edits change no problem; refilling hundreds of rows took longer than validating
        self.problems = list(problems)
        self.tree.clear()
        items = []
        for problem in self.problems:
            where = ".".join(p for p in (problem.node_id, problem.field) if p) or (
                f"line {problem.line}" if problem.line else "agent")
            # a place too long for its column breaks after a dot ("calm_down." / "default_exit")
            item = QTreeWidgetItem([problem.severity, where.replace(".", ".\u200b"), problem.message])
            item.setForeground(0, QBrush(QColor(*SEVERITY_COLOURS[problem.severity])))
            item.setToolTip(1, where)
            item.setToolTip(2, f"{problem}")
            item.setData(0, Qt.ItemDataRole.UserRole, (problem.node_id, problem.field))
            items.append(item)
        self.tree.addTopLevelItems(items)
        self._show_empty(not self.problems)
        self._fit_columns()
        errors = sum(p.severity == "error" for p in self.problems)
        warnings = len(self.problems) - errors
        self.setWindowTitle(f"Problems ({errors} error{'s' if errors != 1 else ''}, "
                            f"{warnings} warning{'s' if warnings != 1 else ''})" if self.problems else "Problems")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.tree.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_columns()
        return False

    def _column_resized(self, column: int, _old: int, _new: int) -> None:
        if column > 0 and self.problems:
            self._measure_rows.start()

    def _fit_columns(self) -> None:
        """The place as wide as its longest, up to ``WHERE_SHARE`` of the width; the problem's text
        takes the rest (the last column stretches) and wraps."""
        tree = self.tree
        if tree.topLevelItemCount() == 0:
            return
        width = tree.viewport().width()
        metrics = tree.fontMetrics()
        # the longest place unbroken (the delegate measures a column at its current width)
        longest = max(max(metrics.horizontalAdvance(tree.topLevelItem(row).text(1).replace("\u200b", ""))
                          for row in range(tree.topLevelItemCount())) + 12, tree.header().sectionSizeHint(1))
        where = max(60, min(longest, int(width * WHERE_SHARE)))
        if tree.columnWidth(1) != where:
            tree.setColumnWidth(1, where)
        tree.doItemsLayout()  # the rows' heights for the text's new width

    def _activated(self, item: QTreeWidgetItem) -> None:
        node_id, field = item.data(0, Qt.ItemDataRole.UserRole)
        self.problem_activated.emit(node_id, field)

    def activate_row(self, row: int) -> None:
        self._activated(self.tree.topLevelItem(row))
