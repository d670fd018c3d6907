"""Asks the designer for a tool's result when a node called a tool that has no mock result: what the
game would answer."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from editor.docks.conversation.chat_view import ChatView, tool_text
from editor.docks.conversation.status import TurnStatus
from editor.session.view import SessionView


class ToolAnswer(QFrame):
    def __init__(self, view: SessionView, chat: ChatView, status: TurnStatus,
                 come_forward: Callable[[], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.chat = chat
        self.status = status
        self.come_forward = come_forward
        self.setStyleSheet("QFrame { background: #1f3a24; border-radius: 3px; }")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.result = QLineEdit(self)
        self.result.setPlaceholderText("The tool's result, as the game would return it")
        self.send_button = QPushButton("Send result", self)
        self.send_button.clicked.connect(self.send_tool_result)
        self.result.returnPressed.connect(self.send_tool_result)
        layout.addWidget(self.label, 2)
        layout.addWidget(self.result, 2)
        layout.addWidget(self.send_button)
        self.hide()

    def ask(self, node_id: str, tool: str, arguments: object) -> None:
        self.label.setText(f"<b>{node_id}</b> called <tt>{tool_text(tool, dict(arguments))}</tt>, which has "
                           "no mock result. What does the game answer?")
        self.show()
        self.come_forward()
        self.result.setFocus()
        self.status.set_status("Waiting for the tool's result\u2026")

    def send_tool_result(self) -> None:
        self.actions.answer_tool(self.result.text())
        self.chat.note(f"\u2192 result: {self.result.text()}")
        self.result.clear()
        self.hide()
