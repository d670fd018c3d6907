"""The backend picker at the top of the Conversation dock: where the agent runs (this computer, or a
saved server profile), and what the next turn runs on. The choice belongs to the editor's settings,
never to the asset."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from editor.dialogs.backends import open_backends_dialog
from editor.docks.conversation.status import TurnStatus, tool_button
from editor.services.backend_choice import BUILT_IN, BackendChoice


class BackendBar(QWidget):
    """Always in view while talking: the picker, Backends… and the label of the backend in use."""

    def __init__(self, backends: BackendChoice, status: TurnStatus, busy: Callable[[], bool],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backends = backends
        self.status = status
        self.busy = busy  # whether a turn is running (the switch then waits for it)
        self.backend_in_use = ""  # the label of the backend the latest turn on the chosen one ran on
        picker = QHBoxLayout(self)
        picker.setContentsMargins(0, 0, 0, 0)
        caption = QLabel("Backend", self)
        caption.setToolTip("Where the agent runs. Kept in your settings, never in the asset.")
        picker.addWidget(caption)
        self.combo = QComboBox(self)
        self.combo.setObjectName("backend_combo")
        self.combo.setToolTip("Where the agent runs: this computer, canned replies (Scripted: no model, to check "
                              "the wiring), or a server saved in Backends… "
                              "The next turn runs on the choice; the conversation so far stays.")
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        picker.addWidget(self.combo)
        self.backends_button = tool_button(self, "Backends…", "Add, edit, remove and check server profiles",
                                           self.edit_backends)
        picker.addWidget(self.backends_button)
        self.label = QLabel(self)
        self.label.setObjectName("backend_label")
        self.label.setStyleSheet("color: #8a8a8a;")
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setMinimumWidth(40)
        picker.addWidget(self.label, 1)
        backends.profiles_changed.connect(self.fill)
        backends.changed.connect(self._changed)
        self.combo.activated.connect(self._picked)
        # The owner calls fill() once the bar is in its dock: the combo's least width is then the empty
        # picker's, so a long profile name never sets the dock's minimum width.

    def fill(self) -> None:
        """The picker's entries: this computer, canned replies, then every saved profile."""
        combo = self.combo
        combo.blockSignals(True)
        combo.clear()
        for title, spec, tip in BUILT_IN:
            combo.addItem(title, spec)
            combo.setItemData(combo.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        for profile in self.backends.profiles:
            combo.addItem(profile.name, profile.name)
            combo.setItemData(combo.count() - 1, profile.description, Qt.ItemDataRole.ToolTipRole)
        combo.setCurrentIndex(max(0, combo.findData(self.backends.spec)))
        combo.blockSignals(False)
        self.show_label()

    def show_label(self) -> None:
        """The backend the next turn runs on, as exactly as known: the label of the latest turn that
        ran on it (with its model), else what the profile says."""
        choice = self.backends
        text = self.backend_in_use if self.is_chosen(self.backend_in_use) else choice.description
        if choice.load_error:
            self.label.setText("backends.json could not be read: see Backends\u2026")
            self.label.setToolTip(choice.load_error)
            self.label.setStyleSheet("color: #ff8080;")
            return
        if choice.scripted:
            # said where the designer looks: these replies are canned, not a model's
            self.label.setStyleSheet("color: #e5c07b;")
            self.label.setText("Canned replies")  # the picker says the rest; the tooltip says all
            self.label.setToolTip(f"The next turn runs on {choice.description}")
            return
        self.label.setStyleSheet("color: #8a8a8a;")
        self.label.setText(text)
        self.label.setToolTip(f"The next turn runs on {text}")

    def is_chosen(self, label: str) -> bool:
        """Whether a turn's backend label is the chosen backend's."""
        return self.backends.ran_on_choice(label)

    def turn_ran_on(self, label: str) -> None:
        """A turn ran on ``label``: the label shows it when it is the chosen backend."""
        if label and self.is_chosen(label):
            self.backend_in_use = label
            self.show_label()

    def _picked(self, index: int) -> None:
        spec = self.combo.itemData(index)
        if spec is None or spec == self.backends.spec:
            return
        problem = self.backends.choose(str(spec))
        if problem:
            self.combo.setCurrentIndex(max(0, self.combo.findData(self.backends.spec)))
            self.status.show_error(f"Cannot run on {spec}: {problem}")

    def _changed(self) -> None:
        self.combo.setCurrentIndex(max(0, self.combo.findData(self.backends.spec)))
        self.backend_in_use = ""
        self.show_label()
        if self.backends.note:
            self.status.show_error(self.backends.note)
            return
        busy = " once the running turn has finished" if self.busy() else ""
        self.status.set_status(f"The next turn runs on {self.backends.description}{busy}; "
                               "the conversation so far stays.")

    def edit_backends(self) -> None:
        open_backends_dialog(self.backends, self)
