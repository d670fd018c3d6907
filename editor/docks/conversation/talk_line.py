"""The player's line at the bottom of the dock: the box, Send and Stop."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QPushButton, QWidget

from editor.session.view import SessionView

PLACEHOLDER = "What the player says\u2026 (Enter to send)"


class TalkLine(QWidget):
    """``read_only`` says why the conversation cannot be changed here ("" when it can)."""

    def __init__(self, view: SessionView, read_only: Callable[[], str],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.read_only = read_only
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.line = QLineEdit(self)
        self.line.setPlaceholderText(PLACEHOLDER)
        self.line.returnPressed.connect(self.send)
        self.send_button = QPushButton("Send", self)
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(view.actions.stop)
        layout.addWidget(self.line, 1)
        layout.addWidget(self.send_button)
        layout.addWidget(self.stop_button)

    def send(self) -> None:
        if self.read_only():
            return
        text = self.line.text().strip()
        if text and self.actions.say(text):
            self.line.clear()

    def enable(self, busy: bool) -> None:
        editable = not self.read_only()
        self.send_button.setEnabled(not busy and editable)
        self.line.setEnabled(editable)
        self.stop_button.setEnabled(busy and editable)

    def show_read_only(self, reason: str) -> None:
        self.line.setPlaceholderText(f"Read-only: {reason}" if reason else PLACEHOLDER)
