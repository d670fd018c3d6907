"""Backend → Cache Snapshot Budget…: how much RAM the embedded backend's cache snapshots may take.

A snapshot is a copy of one node's KV cache, taken before a trim, a new summary or a rewind cuts
cells that earlier turns read; going back across that turn restores it instead of reading the
conversation again. The budget is the designer's setting (``editor.settings.snapshot_budget_mib``);
each window's conversation applies it on its worker thread (``LiveConversation.set_snapshot_budget``).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from editor import settings as app_settings
from editor.session.local import LiveConversation
from editor.session.record import SnapshotUse

EXPLANATION = (
    "Going back to an earlier turn (rewind, regenerate, replay) after a trim or a new summary rewrote a "
    "node's cache restores a snapshot of that cache instead of reading the conversation again. All nodes' "
    "snapshots together stay within this budget, the least recently used dropped first. With less (or 0, "
    "off) such a rewind reads the conversation again: it takes longer, and says exactly the same. "
    "Each window's conversation has its own budget; servers keep no snapshots here.")


def use_text(use: SnapshotUse | None) -> str:
    """What the snapshots hold now, for the dialog."""
    if use is None:
        return "In use now: nothing yet (no turn has run on the embedded backend in this window)."
    return f"In use now: {use.text.removeprefix('snapshots: ')}. {use.detail}"


class SnapshotBudgetDialog(QDialog):
    """The budget in MiB (0: off) and what ``conversation``'s snapshots hold now; OK saves the budget
    and applies it to ``apply_to`` (every open window's conversation; by default ``conversation``)."""

    def __init__(self, conversation: LiveConversation, parent: QWidget | None = None,
                 apply_to: list[LiveConversation] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Cache Snapshot Budget")
        self.conversation = conversation
        self.apply_to = apply_to if apply_to is not None else [conversation]
        layout = QVBoxLayout(self)
        about = QLabel(EXPLANATION, self)
        about.setWordWrap(True)
        layout.addWidget(about)
        form = QFormLayout()
        self.budget = QSpinBox(self)
        self.budget.setRange(0, app_settings.MAX_SNAPSHOT_BUDGET_MIB)
        self.budget.setSuffix(" MiB")
        self.budget.setSpecialValueText("0 MiB (off)")
        self.budget.setSingleStep(64)
        self.budget.setValue(app_settings.snapshot_budget_mib())
        self.budget.setToolTip(f"Default {app_settings.default_snapshot_budget_mib()} MiB; 0 turns snapshots off")
        form.addRow("Cache snapshot budget:", self.budget)
        layout.addLayout(form)
        self.use_label = QLabel(use_text(conversation.snapshot_use), self)
        self.use_label.setWordWrap(True)
        self.use_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.use_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.setMinimumWidth(480)
        conversation.snapshots_changed.connect(self._show_use)

    def _show_use(self, use: SnapshotUse) -> None:
        self.use_label.setText(use_text(use))

    def accept(self) -> None:
        apply_snapshot_budget(self.budget.value(), self.apply_to)
        super().accept()


def apply_snapshot_budget(mib: int, conversations: list[LiveConversation]) -> None:
    """Save ``mib`` as the designer's budget and give it to each of ``conversations`` now."""
    app_settings.set_snapshot_budget_mib(mib)
    for conversation in conversations:
        conversation.set_snapshot_budget(mib)
