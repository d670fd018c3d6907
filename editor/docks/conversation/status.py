"""The line under the chat that says what the conversation is doing, and the bar shown while a
model's weights load. Every panel of the dock speaks through the one ``TurnStatus``."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QToolButton, QWidget

from editor.services.backend_choice import BackendChoice


class TurnStatus(QLabel):
    """One sentence about the conversation: red when it is an error."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def set_status(self, text: str, error: bool = False) -> None:
        self.setStyleSheet("color: #ff8080;" if error else "")
        self.setText(text)

    def show_error(self, text: str) -> None:
        self.set_status(text, error=True)


class ModelLoadBar(QProgressBar):
    """Shown only while a model's weights load, one model after the other; on a server, which loads
    nothing here, the status says the server is being asked instead."""

    def __init__(self, backends: BackendChoice, status: TurnStatus, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backends = backends
        self.status = status
        self.setRange(0, 100)
        self.setTextVisible(True)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hide()

    def loading(self, model: str, percent: int, number: int, count: int) -> None:
        if self.backends.remote:  # nothing loads here: the server is asked what it serves
            self.status.set_status(f"Contacting {self.backends.spec}\u2026" if percent < 100
                                   else f"{self.backends.spec} answered; thinking\u2026")
            return
        if percent >= 100 and number == count:
            self.hide()
            self.status.set_status(f"Loaded {model}; thinking\u2026" if count == 1
                                   else f"Loaded {count} models; thinking\u2026")
            return
        which = f" (model {number} of {count})" if count > 1 else ""
        # %p is Qt's placeholder for the percentage; a word joiner keeps a "%" in a file name literal
        literal = model.replace("%", "%\u2060")
        label = f"Loading {literal}{which}  %p %"
        # Dozens of these arrive at once when a load is quick: change only what changed
        if self.format() != label:
            self.setFormat(label)
        self.setValue(percent)
        if self.isHidden():
            self.show()


def tool_button(parent: QWidget, text: str, tip: str, slot) -> QToolButton:
    """A button of the dock's row of actions, calling ``slot()`` when clicked."""
    button = QToolButton(parent)
    button.setText(text)
    button.setToolTip(tip)
    button.clicked.connect(lambda _c=False: slot())
    return button
