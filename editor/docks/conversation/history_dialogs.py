"""Dialogs of the Conversation dock: seed and edit the dialog history, change agent variables."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from runtime.agent import Agent
from runtime.asset.model import VariableValue
from runtime.dialogue.history import Reply, SavedDialog, Turn

PLAYER, REPLY, NODE = range(3)


class HistoryEditor(QDialog):
    """Past turns as rows (player line, first reply, the node that wrote it): edit, add, remove.

    Rewriting turns in place keeps the summaries and each node's window (``Agent.edit_turn``);
    adding or removing turns starts the conversation afresh from the rows (``Agent.seed_history``)."""

    def __init__(self, saved: SavedDialog, default_node: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Seed and edit dialog history")
        self.resize(760, 420)
        self._original = [Turn(t.player, list(t.entries)) for t in saved.history.turns]
        self._default_node = default_node
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(
            "Each row is one turn. Editing rows rewrites them (later prompts change from there); adding or removing "
            "rows seeds a new history: summaries are dropped and every node's window starts at turn 0."))
        layout.itemAt(0).widget().setWordWrap(True)
        self.table = QTableWidget(0, 3, self)
        self.table.setHorizontalHeaderLabels(["Player line", "Reply", "Node"])
        self.table.horizontalHeader().setSectionResizeMode(PLAYER, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(REPLY, QHeaderView.ResizeMode.Stretch)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(True)
        layout.addWidget(self.table)
        for turn in self._original:
            reply = next((e for e in turn.entries if isinstance(e, Reply)), None)
            self._add_row(turn.player, reply.text if reply else "", reply.node if reply else default_node)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add turn")
        self.remove_button = QPushButton("Remove turn")
        self.add_button.clicked.connect(lambda: self._add_row("", "", self._default_node))
        self.remove_button.clicked.connect(self._remove_selected)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        layout.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _add_row(self, player: str, reply: str, node: str) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        for column, text in ((PLAYER, player), (REPLY, reply), (NODE, node)):
            self.table.setItem(row, column, QTableWidgetItem(text))

    def _remove_selected(self) -> None:
        for row in sorted({i.row() for i in self.table.selectedIndexes()}, reverse=True):
            self.table.removeRow(row)

    def rows(self) -> list[tuple[str, str, str]]:
        def text(row: int, column: int) -> str:
            item = self.table.item(row, column)
            return item.text() if item is not None else ""

        return [(text(r, PLAYER), text(r, REPLY), text(r, NODE).strip() or self._default_node)
                for r in range(self.table.rowCount())]

    def turns(self) -> list[Turn]:
        """The rows as turns; a row that was there keeps its other entries (tool calls, more replies)."""
        turns = []
        for index, (player, reply, node) in enumerate(self.rows()):
            old = self._original[index] if index < len(self._original) else None
            entries = list(old.entries) if old is not None else []
            first = next((i for i, e in enumerate(entries) if isinstance(e, Reply)), None)
            if first is None:
                if reply:
                    entries.insert(0, Reply(node, reply))
            elif reply:
                entries[first] = Reply(node, reply, entries[first].replay)
            else:
                del entries[first]
            turns.append(Turn(player, entries))
        return turns

    def operation(self):
        """What to do to the agent: edit the changed turns in place, or seed a new history."""
        turns = self.turns()
        if len(turns) == len(self._original):
            changed = [(i, t) for i, t in enumerate(turns) if t != self._original[i]]

            def edit(agent: Agent) -> None:
                for index, turn in changed:
                    agent.edit_turn(index, turn.player, turn.entries)

            return edit
        return lambda agent: agent.seed_history(turns)


class VariablesDialog(QDialog):
    """The agent variables of this conversation, one typed editor each."""

    def __init__(self, values: dict[str, VariableValue], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Change agent variables")
        self.setMinimumWidth(380)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.editors: dict[str, QWidget] = {}
        for name, value in values.items():
            if isinstance(value, bool):
                editor: QWidget = QCheckBox()
                editor.setChecked(value)
            elif isinstance(value, int):
                editor = QSpinBox()
                editor.setRange(-2_000_000_000, 2_000_000_000)
                editor.setValue(value)
            elif isinstance(value, float):
                editor = QDoubleSpinBox()
                editor.setRange(-1e12, 1e12)
                editor.setDecimals(4)
                editor.setValue(value)
            else:
                editor = QLineEdit(str(value))
            self.editors[name] = editor
            form.addRow(name, editor)
        if not values:
            form.addRow(QLabel("This agent has no variables. Add them in the agent settings (Properties dock)."))
        layout.addLayout(form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def values(self) -> dict[str, VariableValue]:
        out: dict[str, VariableValue] = {}
        for name, editor in self.editors.items():
            if isinstance(editor, QCheckBox):
                out[name] = editor.isChecked()
            elif isinstance(editor, (QSpinBox, QDoubleSpinBox)):
                out[name] = editor.value()
            else:
                out[name] = editor.text()
        return out


class EditTurnDialog(QDialog):
    """Edit one past turn: the player's line (a new reply is generated for it) or the reply (kept as
    written), and whether the later turns are then replayed."""

    def __init__(self, number: int, player: str, reply: str, later: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Edit turn {number}")
        self.original = (player, reply)
        form = QFormLayout(self)
        self.player = QLineEdit(player, self)
        self.reply = QPlainTextEdit(reply, self)
        self.reply.setMinimumHeight(80)
        self.replay = QCheckBox(f"Then replay the {later} later turn{'s' if later != 1 else ''} with the graph as it is",
                                self)
        self.replay.setChecked(later > 0)
        self.replay.setEnabled(later > 0)
        note = QLabel("A changed line gets a new reply; a changed reply is kept as you wrote it. Either way the "
                      "original stays as an alternative of this turn.", self)
        note.setWordWrap(True)
        form.addRow("Player", self.player)
        form.addRow("Reply", self.reply)
        form.addRow(self.replay)
        form.addRow(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def values(self) -> tuple[str, str, bool]:
        return self.player.text().strip(), self.reply.toPlainText(), self.replay.isChecked()
