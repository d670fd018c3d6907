"""An editor for a list of small records: a node's tools, intents, attributes or knowledge."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QHBoxLayout, QListWidget, QPushButton, QVBoxLayout, QWidget

from editor.docks.properties.field_editors import FieldEditor
from runtime.nodes import Strict

if TYPE_CHECKING:  # pragma: no cover
    from editor.docks.properties.form import ModelForm


def _label(record: dict[str, Any]) -> str:
    for key in ("name", "id", "text"):
        if record.get(key):
            text = str(record[key])
            return text if len(text) <= 40 else text[:39] + "\u2026"
    return "(unnamed)"


class ModelListEditor(FieldEditor):
    """A list of records on the left, the selected record's form below it."""

    def __init__(self, item_model: type[Strict], form: ModelForm, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.item_model = item_model
        self._records: list[dict[str, Any]] = []
        box = QWidget(self)
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        self.list = QListWidget(box)
        self.list.setMaximumHeight(110)
        layout.addWidget(self.list)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add", box)
        self.remove_button = QPushButton("Remove", box)
        self.up_button = QPushButton("Up", box)
        self.down_button = QPushButton("Down", box)
        for button in (self.add_button, self.remove_button, self.up_button, self.down_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        self.form = form  # the selected record's fields (made by the caller: forms hold list editors too)
        form.setParent(box)
        layout.addWidget(self.form)
        self._finish(box)
        self.add_button.clicked.connect(self.add_record)
        self.remove_button.clicked.connect(self.remove_record)
        self.up_button.clicked.connect(lambda: self._move(-1))
        self.down_button.clicked.connect(lambda: self._move(1))
        self.list.currentRowChanged.connect(self._show_record)
        self.form.field_edited.connect(self._record_edited)
        self._show_record(-1)

    def value(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._records)

    def set_value(self, value: Any) -> None:
        records = [r.model_dump() if isinstance(r, BaseModel) else dict(r) for r in (value or [])]
        if records == self._records:
            return
        self._records = records
        row = self.list.currentRow()
        with QSignalBlocker(self.list):
            self.list.clear()
            self.list.addItems([_label(r) for r in records])
            row = min(max(row, 0), len(records) - 1) if records else -1
            self.list.setCurrentRow(row)
        self._show_record(row)

    def refresh_choices(self) -> None:
        self.form.refresh_choices()

    def _show_record(self, row: int) -> None:
        has = 0 <= row < len(self._records)
        self.form.setVisible(has)
        self.remove_button.setEnabled(has)
        self.up_button.setEnabled(has and row > 0)
        self.down_button.setEnabled(has and row < len(self._records) - 1)
        if has:
            self.form.refresh_choices()
            self.form.set_values(self._records[row])

    def _emit(self, merge: bool) -> None:
        row = self.list.currentRow()
        with QSignalBlocker(self.list):
            for index, record in enumerate(self._records):
                self.list.item(index).setText(_label(record))
        self._show_record(row)
        self.edited.emit(self.value(), merge)

    def _record_edited(self, field: str, value: Any, merge: bool) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self._records):
            self._records[row][field] = value
            self.edited.emit(self.value(), merge)
            self.list.item(row).setText(_label(self._records[row]))

    def add_record(self) -> None:
        taken = {r.get("name") or r.get("id") for r in self._records}
        n = len(self._records) + 1
        record = self.item_model.new_record(n)
        while (record.get("name") or record.get("id")) and (record.get("name") or record.get("id")) in taken:
            n += 1
            record = self.item_model.new_record(n)
        self._records.append(record)
        with QSignalBlocker(self.list):
            self.list.addItem(_label(record))
            self.list.setCurrentRow(len(self._records) - 1)
        self._emit(False)

    def remove_record(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self._records):
            del self._records[row]
            with QSignalBlocker(self.list):
                self.list.takeItem(row)
                self.list.setCurrentRow(min(row, len(self._records) - 1))
            self._emit(False)

    def _move(self, step: int) -> None:
        row = self.list.currentRow()
        other = row + step
        if 0 <= row < len(self._records) and 0 <= other < len(self._records):
            self._records[row], self._records[other] = self._records[other], self._records[row]
            with QSignalBlocker(self.list):
                self.list.setCurrentRow(other)
            self._emit(False)
