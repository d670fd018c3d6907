"""The Problems dock: every error and warning in the asset; clicking one shows where it is."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QDockWidget, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from editor.canvas.node_appearance import SEVERITY_COLOURS
from runtime.problems import Problem


class ProblemsDock(QDockWidget):
    problem_activated = Signal(str, str)  # node id, field

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Problems", parent)
        self.setObjectName("ProblemsDock")
        self.tree = QTreeWidget(self)
        self.tree.setRootIsDecorated(False)
        self.tree.setHeaderLabels(["", "Where", "Problem"])
        self.tree.setColumnWidth(0, 70)
        self.tree.setColumnWidth(1, 200)
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
            item = QTreeWidgetItem([problem.severity, where, problem.message])
            item.setForeground(0, QBrush(QColor(*SEVERITY_COLOURS[problem.severity])))
            item.setToolTip(2, f"{problem}")
            item.setData(0, Qt.ItemDataRole.UserRole, (problem.node_id, problem.field))
            items.append(item)
        self.tree.addTopLevelItems(items)
        self._show_empty(not self.problems)
        errors = sum(p.severity == "error" for p in self.problems)
        warnings = len(self.problems) - errors
        self.setWindowTitle(f"Problems ({errors} error{'s' if errors != 1 else ''}, "
                            f"{warnings} warning{'s' if warnings != 1 else ''})" if self.problems else "Problems")

    def _activated(self, item: QTreeWidgetItem) -> None:
        node_id, field = item.data(0, Qt.ItemDataRole.UserRole)
        self.problem_activated.emit(node_id, field)

    def activate_row(self, row: int) -> None:
        self._activated(self.tree.topLevelItem(row))
