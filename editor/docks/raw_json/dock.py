"""The Raw JSON dock: the picked turn's diagnostics exactly as the runtime wrote them
(``resources/schemas/turn-diagnostics.schema.json``), as a collapsible tree and as highlighted text."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont, QSyntaxHighlighter, QTextCharFormat, QTextDocument
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSizePolicy,
    QTabWidget,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QTreeWidgetItemIterator,
    QVBoxLayout,
    QWidget,
)

from editor.session.view import SessionView

COLOURS = {
    "key": QColor(217, 165, 91),
    "string": QColor(143, 209, 143),
    "number": QColor(127, 178, 229),
    "literal": QColor(196, 155, 232),
    "punctuation": QColor(150, 150, 150),
}
MATCH_BRUSH = QBrush(QColor(90, 80, 20))
PATH_ROLE = Qt.ItemDataRole.UserRole
VALUE_ROLE = Qt.ItemDataRole.UserRole + 1


class JsonHighlighter(QSyntaxHighlighter):
    """Colours JSON text: keys, strings, numbers, true/false/null."""

    _RULES: ClassVar[list[tuple[re.Pattern[str], str]]] = [
        (re.compile(r'"(?:[^"\\]|\\.)*"(?=\s*:)'), "key"),
        (re.compile(r'(?<=:\s)"(?:[^"\\]|\\.)*"|^\s*"(?:[^"\\]|\\.)*"(?=,?\s*$)'), "string"),
        (re.compile(r"-?\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b"), "number"),
        (re.compile(r"\b(?:true|false|null)\b"), "literal"),
    ]

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        self._formats = {}
        for name, colour in COLOURS.items():
            fmt = QTextCharFormat()
            fmt.setForeground(colour)
            self._formats[name] = fmt

    def highlightBlock(self, text: str) -> None:
        taken = [False] * len(text)
        for pattern, name in self._RULES:
            for match in pattern.finditer(text):
                start, end = match.span()
                if any(taken[start:end]):
                    continue
                self.setFormat(start, end - start, self._formats[name])
                for i in range(start, end):
                    taken[i] = True


def _scalar_text(value: Any) -> tuple[str, str]:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False), "string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value), "literal"
    return json.dumps(value), "number"


class RawJsonDock(QDockWidget):
    def __init__(self, view: SessionView, parent: QWidget | None = None) -> None:
        super().__init__("Raw JSON", parent)
        self.view = view
        self.data: dict[str, Any] | None = None
        self.turn: int | None = None
        self._matches: list[QTreeWidgetItem] = []
        self._match_index = -1
        body = QWidget(self)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)

        row = QHBoxLayout()
        self.title = QLabel("No turn yet", self)
        # a long turn title is cut, never widening the dock past the column it sits in
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.title, 1)
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search keys and values (Enter: next)")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.find)
        self.search.returnPressed.connect(self.next_match)
        row.addWidget(self.search, 1)
        self.matches_label = QLabel(self)
        row.addWidget(self.matches_label)
        for text, tip, slot in (
            ("Expand", "Expand every level", lambda: self.tree.expandAll()),
            ("Collapse", "Collapse to the top level", lambda: self.tree.collapseAll()),
            ("Copy", "Copy the selected value as JSON (the whole turn when nothing is selected)", self.copy),
            ("Save\u2026", "Save this turn's diagnostics as a .json file", self.save_dialog),
        ):
            button = QToolButton(self)
            button.setText(text)
            button.setToolTip(tip)
            button.clicked.connect(lambda _c=False, s=slot: s())
            row.addWidget(button)
        layout.addLayout(row)

        self.tabs = QTabWidget(self)
        self.tree = QTreeWidget(self.tabs)
        self.tree.setHeaderLabels(["Key", "Value"])
        self.tree.setColumnWidth(0, 270)
        self.tree.setUniformRowHeights(True)
        self.text_view = QPlainTextEdit(self.tabs)
        self.text_view.setReadOnly(True)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.text_view.setFont(mono)
        self.tree.setFont(mono)
        self.highlighter = JsonHighlighter(self.text_view.document())
        self.tabs.addTab(self.tree, "Tree")
        self.tabs.addTab(self.text_view, "Text")
        layout.addWidget(self.tabs, 1)
        self.setWidget(body)

        view.turn_selected.connect(self.show_turn)
        # Bound methods, not lambdas: Qt drops a connection when its receiver is destroyed.
        view.turn_finished.connect(self._turn_finished)
        view.restarted.connect(self._restarted)

    def _turn_finished(self, record: object) -> None:
        if record is not None:
            self.show_turn(record.turn_id)  # type: ignore[attr-defined]

    def _restarted(self) -> None:
        self.show_turn(-1)

    # --- showing a turn ---------------------------------------------------------------------

    def show_turn(self, turn_id: int) -> None:
        """Show the diagnostics of the turn with this id in the conversation tree."""
        record = self.view.records.get(turn_id)
        self.turn = record.turn if record is not None else None
        self.set_data(record.diagnostics.model_dump(mode="json") if record is not None else None)

    def set_data(self, data: dict[str, Any] | None) -> None:
        self.data = data
        self.tree.clear()
        self._matches = []
        if data is None:
            self.title.setText("No turn yet")
            self.text_view.setPlainText("")
            return
        turn = data.get("turn")
        number = turn + 1 if isinstance(turn, int) else turn
        self.title.setText(f"Turn {number} diagnostics (the JSON counts turns from 0)")
        self.text_view.setPlainText(self.text())
        self._fill(self.tree.invisibleRootItem(), data, "")
        self.tree.expandToDepth(0)
        self.find(self.search.text())

    def text(self) -> str:
        """The diagnostics as JSON text (what Copy and Save write)."""
        return json.dumps(self.data, indent=2, ensure_ascii=False) + "\n" if self.data is not None else ""

    def _fill(self, parent: QTreeWidgetItem, value: Any, path: str) -> None:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            child_path = f"{path}.{key}" if path else str(key)
            item = QTreeWidgetItem(parent)
            item.setText(0, str(key) if isinstance(value, dict) else f"[{key}]")
            item.setForeground(0, COLOURS["key"] if isinstance(value, dict) else COLOURS["punctuation"])
            item.setData(0, PATH_ROLE, child_path)
            item.setData(0, VALUE_ROLE, child)
            if isinstance(child, (dict, list)):
                count = len(child)
                summary = f"{{{count} keys}}" if isinstance(child, dict) else f"[{count} items]"
                item.setText(1, summary)
                item.setForeground(1, COLOURS["punctuation"])
                self._fill(item, child, child_path)
            else:
                text, kind = _scalar_text(child)
                item.setText(1, text if len(text) < 400 else text[:400] + "\u2026")
                item.setToolTip(1, text[:4000])
                item.setForeground(1, COLOURS[kind])

    # --- search, copy, save -----------------------------------------------------------------

    def find(self, text: str) -> int:
        """Mark every key or value containing ``text``, open their parents and go to the first."""
        for item in self._matches:
            item.setBackground(0, QBrush())
            item.setBackground(1, QBrush())
        self._matches = []
        self._match_index = -1
        needle = text.strip().lower()
        if needle:
            iterator = QTreeWidgetItemIterator(self.tree)
            while iterator.value() is not None:
                item = iterator.value()
                value = item.data(0, VALUE_ROLE)
                scalar = "" if isinstance(value, (dict, list)) else _scalar_text(value)[0]
                if needle in item.text(0).lower() or needle in scalar.lower():
                    self._matches.append(item)
                    item.setBackground(0, MATCH_BRUSH)
                    item.setBackground(1, MATCH_BRUSH)
                    parent = item.parent()
                    while parent is not None:
                        parent.setExpanded(True)
                        parent = parent.parent()
                iterator += 1
            self.text_view.find(text) or self._find_from_top(text)
        self.matches_label.setText(f"{len(self._matches)} found" if needle else "")
        if self._matches:
            self.next_match()
        return len(self._matches)

    def _find_from_top(self, text: str) -> bool:
        cursor = self.text_view.textCursor()
        cursor.setPosition(0)
        self.text_view.setTextCursor(cursor)
        return self.text_view.find(text)

    def next_match(self) -> None:
        if not self._matches:
            return
        self._match_index = (self._match_index + 1) % len(self._matches)
        item = self._matches[self._match_index]
        self.tree.setCurrentItem(item)
        self.tree.scrollToItem(item)
        if self.search.text() and not self.text_view.find(self.search.text()):
            self._find_from_top(self.search.text())

    def selected_json(self) -> str:
        item = self.tree.currentItem()
        if item is None or self.tabs.currentWidget() is not self.tree:
            return self.text()
        return json.dumps(item.data(0, VALUE_ROLE), indent=2, ensure_ascii=False)

    def copy(self) -> None:
        QApplication.clipboard().setText(self.selected_json() if self.tree.currentItem() is not None else self.text())

    def save_dialog(self) -> None:
        if self.data is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save turn diagnostics", f"turn-{(self.turn or 0) + 1}.json",
                                              "JSON (*.json);;All files (*)")
        if path:
            self.save_to(path)

    def save_to(self, path: str) -> bool:
        from runtime.files.writing import atomic_write_text

        try:
            atomic_write_text(path, self.text())
        except OSError as exc:
            self.title.setText(f"Could not save {path}: {exc.strerror or exc}")
            return False
        self.title.setText(f"Turn {(self.turn or 0) + 1} saved to {path}")
        return True
