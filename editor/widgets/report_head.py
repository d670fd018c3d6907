"""The head of a report panel in the Tests dock (a variant comparison, a red-team run): its summary,
rich text the designer can select, and a × button that closes the report."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


class ReportHead(QHBoxLayout):
    """``summary`` (a QLabel) stretched beside ``close_button``, which calls ``close``."""

    def __init__(self, parent: QWidget, close_tip: str, close: Callable[[], object]) -> None:
        super().__init__()
        self.setContentsMargins(0, 0, 0, 0)
        self.summary = QLabel(parent)
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button = QToolButton(parent)
        self.close_button.setText("\u00d7")
        self.close_button.setToolTip(close_tip)
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(lambda _checked=False: close())
        self.addWidget(self.summary, 1)
        self.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
