"""The banner that says an edit takes effect only in a new conversation (context size and model are
fixed for an agent's lifetime), with its Restart button."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget


class RestartBanner(QFrame):
    def __init__(self, restart: Callable[[], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet("QFrame { background: #4a3b1c; border-radius: 3px; }")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.restart_button = QPushButton("Restart conversation", self)
        self.restart_button.clicked.connect(restart)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.restart_button)
        self.hide()

    def offer_restart(self, reasons: list[str]) -> None:
        if not reasons:
            self.hide()
            return
        self.label.setText(
            "Context size and model are fixed for an agent's lifetime: " + "; ".join(reasons)
            + ". Turns keep the old values until you restart the conversation.")
        self.show()
