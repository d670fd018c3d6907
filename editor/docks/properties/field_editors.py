"""Typed editors for pydantic fields, chosen from each field's type and constraints.

``ModelForm`` builds one editor per field of a pydantic model, grouped by the
field's ``json_schema_extra["group"]``, with the description as tooltip and the
default and range added to it. Every editor emits ``edited(value, merge)``;
``merge`` says the edit continues the previous one (typing, spinning), so the
undo stack can fold it into one step. Editors never change the document: the
dock turns their edits into commands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from editor.docks.properties.mustache import MustacheHighlighter
from editor.model.document import EDITOR_METADATA_KEY
from runtime.models.folder import format_parameters, list_models, models_dir

EXIT_FIELDS = ("default_exit", "fallback_exit", "exit", "start_node")
MODEL_FILTER = "Models (*.gguf)"
FILE_FIELDS = {"source_file": "Knowledge (*.jsonl *.txt)", "behaviour": "Parley behaviours (*.json)"}
# Fields that name a model file, with what an empty value means.
MODEL_FIELDS = {"model_name": "The agent's default model", "default_model": "No default model",
                "embedding_model": "None (rank with BM25)"}
INT_MAX = 2_147_483_647

# Choices for exit combos: (label, value) pairs, '' is END. The dock provides it.
ExitChoices = Callable[[], list[tuple[str, str]]]


def field_label(name: str) -> str:
    return name.replace("_", " ").title().replace("Id", "ID").replace("Json", "JSON")


def field_group(info: FieldInfo) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return str(extra.get("group", "General"))


def field_flag(info: FieldInfo, flag: str) -> bool:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return bool(extra.get(flag, False))


def bounds(info: FieldInfo) -> dict[str, float]:
    """ge/gt/le/lt constraints of a field."""
    out: dict[str, float] = {}
    for meta in info.metadata:
        for key in ("ge", "gt", "le", "lt"):
            value = getattr(meta, key, None)
            if value is not None:
                out[key] = value
    return out


def tooltip(name: str, info: FieldInfo) -> str:
    parts = [f"<b>{field_label(name)}</b>"]
    if info.description:
        parts.append(info.description)
    limits = bounds(info)
    if limits:
        text = []
        if "ge" in limits:
            text.append(f"at least {limits['ge']}")
        if "gt" in limits:
            text.append(f"above {limits['gt']}")
        if "le" in limits:
            text.append(f"at most {limits['le']}")
        if "lt" in limits:
            text.append(f"below {limits['lt']}")
        parts.append("Range: " + ", ".join(text) + ".")
    if not info.is_required():
        default = info.get_default(call_default_factory=True)
        if isinstance(default, str) and len(default) > 60:
            default = default[:57] + "..."
        parts.append(f"Default: {json.dumps(default) if not isinstance(default, str) else repr(default)}")
    return "<br/>".join(parts)


class FieldEditor(QWidget):
    """Base of every field editor."""

    edited = Signal(object, bool)  # value, merge with the previous edit

    def refresh_choices(self) -> None:
        """Read choices that depend on the document again (exit targets); most editors have none."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(2)
        self._error = QLabel(self)
        self._error.setObjectName("fieldError")
        self._error.setWordWrap(True)
        self._error.setStyleSheet("color: #f14c4c;")
        self._error.hide()

    def _finish(self, widget: QWidget) -> None:
        self._layout.addWidget(widget)
        self._layout.addWidget(self._error)
        self.focus_widget = widget

    def value(self) -> Any:
        raise NotImplementedError

    def set_value(self, value: Any) -> None:
        """Show ``value`` without emitting ``edited``."""
        raise NotImplementedError

    def set_error(self, message: str) -> None:
        self._error.setText(message)
        self._error.setVisible(bool(message))

    @property
    def error(self) -> str:
        return self._error.text()

    def set_read_only(self, read_only: bool) -> None:
        self.setEnabled(not read_only)


class LineEditor(FieldEditor):
    def __init__(self, file_filter: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.line = QLineEdit(self)
        self.line.editingFinished.connect(self._commit)
        if file_filter:
            row = QWidget(self)
            self.buttons = QHBoxLayout(row)
            self.buttons.setContentsMargins(0, 0, 0, 0)
            self.buttons.addWidget(self.line)
            self.browse_button = QToolButton(row)
            self.browse_button.setText("\u2026")
            self.browse_button.setToolTip("Choose a file")
            self.browse_button.clicked.connect(lambda: self._browse(file_filter))
            self.buttons.addWidget(self.browse_button)
            self._finish(row)
            self.focus_widget = self.line
        else:
            self._finish(self.line)
        self._shown = ""

    def browse_folder(self) -> str:
        """Where the file dialog starts ('' lets Qt choose)."""
        return ""

    def chosen_value(self, path: str) -> str:
        """The field's value for a file picked in the dialog."""
        return path

    def _browse(self, file_filter: str) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a file", self.browse_folder(), file_filter)
        if path:  # an edit even when the same file is picked again: it is read again (a behaviour's ports)
            self._shown = self.chosen_value(path)
            self.line.setText(self._shown)
            self.edited.emit(self._shown, False)

    def _commit(self) -> None:
        if self.line.text() != self._shown:
            self._shown = self.line.text()
            self.edited.emit(self.line.text(), False)

    def value(self) -> str:
        return self.line.text()

    def set_value(self, value: Any) -> None:
        self._shown = "" if value is None else str(value)
        if self.line.text() != self._shown:
            self.line.setText(self._shown)


class ModelEditor(LineEditor):
    """A model file: typed, picked from the models folder's models (the list `parley models list`
    prints), or browsed for, starting in the models folder. A file from the models folder is stored
    by its name, which is how assets name models portably."""

    def __init__(self, empty_label: str, parent: QWidget | None = None) -> None:
        super().__init__(MODEL_FILTER, parent)
        self.empty_label = empty_label
        self.line.setPlaceholderText(empty_label)
        self.pick_button = QToolButton(self)
        self.pick_button.setObjectName("pickModel")
        self.pick_button.setArrowType(Qt.ArrowType.DownArrow)
        self.pick_button.setToolTip("Choose a model from the models folder")
        self.pick_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.pick_button.setStyleSheet("QToolButton::menu-indicator { image: none; }")  # the arrow says it
        self.models_menu = QMenu(self.pick_button)
        self.models_menu.aboutToShow.connect(self.fill_models_menu)
        self.pick_button.setMenu(self.models_menu)
        self.buttons.insertWidget(1, self.pick_button)

    def browse_folder(self) -> str:
        folder = models_dir()
        return str(folder) if folder.is_dir() else ""

    def chosen_value(self, path: str) -> str:
        chosen = Path(path)
        return chosen.name if chosen.parent.resolve() == models_dir().resolve() else path

    def fill_models_menu(self) -> None:
        """One entry per model in the models folder, with what `parley models list` says of it."""
        menu = self.models_menu
        menu.clear()
        current = self.line.text()
        empty = menu.addAction(self.empty_label)
        empty.setCheckable(True)
        empty.setChecked(current == "")
        empty.triggered.connect(lambda _c=False: self.pick(""))
        menu.addSeparator()
        models = list_models()
        for model in models:
            if model.problem:
                details = f"unreadable: {model.problem}"
            else:
                details = (f"{model.architecture} {format_parameters(model.parameters)} {model.quantization}, "
                           f"{model.context_length} ctx")
            # Text after a tab is shown right-aligned, where a menu shows shortcuts.
            action = menu.addAction(f"{model.file_name}\t{details}, {model.file_size / 2**20:.0f} MiB")
            action.setCheckable(True)
            action.setChecked(current == model.file_name)
            action.setEnabled(not model.problem)
            action.triggered.connect(lambda _c=False, name=model.file_name: self.pick(name))
        if not models:
            none = menu.addAction(f"No models in {models_dir()}")
            none.setEnabled(False)
        menu.addSeparator()
        menu.addAction("Browse\u2026", lambda: self._browse(MODEL_FILTER))

    def pick(self, name: str) -> None:
        self.line.setText(name)
        self._commit()


# Past this many characters a text is not loaded into the dock's editor: Qt lays out a long
# paragraph at about 0.5 s and 50 MB of memory per megabyte (a 50 MB system prompt took 11 s and
# 2.2 GB to select). The dock shows its start, read-only, and edits it whole in a dialog.
LARGE_TEXT_CHARS = 100_000
PREVIEW_CHARS = 2_000


def text_size(text: str) -> str:
    size = len(text.encode("utf-8", "surrogatepass"))
    amount = f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{size / 2**10:.0f} KB"
    return f"{len(text):,} characters ({amount})"


class FullTextDialog(QDialog):
    """The whole of a long text in one editor; OK hands it back as one edit."""

    def __init__(self, title: str, text: str, mustache: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fullTextDialog")
        self.setWindowTitle(title)
        self.resize(900, 700)
        layout = QVBoxLayout(self)
        self.size_label = QLabel(text_size(text), self)
        layout.addWidget(self.size_label)
        self.text = QPlainTextEdit(self)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        if mustache:
            self.highlighter = MustacheHighlighter(self.text.document())
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            self.text.setPlainText(text)
        finally:
            QApplication.restoreOverrideCursor()
        # Counted by the document, not by copying a text of megabytes out on every key press.
        self.text.textChanged.connect(
            lambda: self.size_label.setText(f"{self.text.document().characterCount() - 1:,} characters"))
        layout.addWidget(self.text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def value(self) -> str:
        return self.text.toPlainText()


class TextEditor(FieldEditor):
    """Multi-line text; with ``mustache`` the tags are highlighted. A text longer than
    ``LARGE_TEXT_CHARS`` is shown as its start, read-only, with its size and an *Edit Full Text*
    button: the value itself is kept whole, and the dialog's text becomes one undoable edit."""

    def __init__(self, mustache: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.mustache = mustache
        self.text = QPlainTextEdit(self)
        self.text.setTabChangesFocus(True)
        self.text.setMinimumHeight(90)
        self.text.setMaximumHeight(200)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        if mustache:
            self.highlighter = MustacheHighlighter(self.text.document())
            self.text.setPlaceholderText("Mustache: {{vars.NAME}}, {{slots.NAME}}, {{#knowledge}}{{text}}{{/knowledge}}")
        self.text.textChanged.connect(self._typed)
        self._full: str | None = None  # the whole value while it is too long to edit here
        self.large_bar = QWidget(self)
        bar = QHBoxLayout(self.large_bar)
        bar.setContentsMargins(0, 0, 0, 0)
        self.size_label = QLabel(self.large_bar)
        self.size_label.setObjectName("largeTextSize")
        self.size_label.setWordWrap(True)
        self.edit_full = QToolButton(self.large_bar)
        self.edit_full.setText("Edit Full Text\u2026")
        self.edit_full.setObjectName("editFullText")
        self.edit_full.clicked.connect(self.open_full_text)
        bar.addWidget(self.size_label, 1)
        bar.addWidget(self.edit_full)
        self.large_bar.hide()
        self._layout.addWidget(self.large_bar)
        self._finish(self.text)

    @property
    def large(self) -> bool:
        return self._full is not None

    def _typed(self) -> None:
        if self._full is None:
            self.edited.emit(self.text.toPlainText(), True)

    def value(self) -> str:
        return self._full if self._full is not None else self.text.toPlainText()

    def set_value(self, value: Any) -> None:
        value = value or ""
        if len(value) > LARGE_TEXT_CHARS:
            if self._full is not value:
                self._show_large(value)
            return
        if self._full is not None:
            self._full = None
            self.large_bar.hide()
            self.text.setReadOnly(False)
            self.text.setStyleSheet("")
            with QSignalBlocker(self.text):
                self.text.setPlainText(value)
            return
        if self.text.toPlainText() != value:
            with QSignalBlocker(self.text):
                self.text.setPlainText(value)

    def _show_large(self, value: str) -> None:
        self._full = value
        cut = value[:PREVIEW_CHARS]
        self.size_label.setText(f"{text_size(value)}: too long to edit here. The start is shown; "
                                "edit the whole text in its own window.")
        self.large_bar.show()
        self.text.setReadOnly(True)
        self.text.setStyleSheet("color: #9a9a9a;")  # a preview, not the editable text
        with QSignalBlocker(self.text):
            self.text.setPlainText(f"{cut}\u2026\n[{len(value) - len(cut):,} more characters]")

    def open_full_text(self) -> FullTextDialog:
        """The whole text in a dialog (not modal to the app's event loop: ``open``)."""
        title = field_label(self.objectName().removeprefix("field:")) if self.objectName() else "Text"
        dialog = FullTextDialog(title, self.value(), self.mustache, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._full_text_edited(dialog.value()))
        dialog.open()
        return dialog

    def _full_text_edited(self, text: str) -> None:
        if text != self.value():
            self.edited.emit(text, False)  # one undo step of its own


class LinesEditor(TextEditor):
    """A list of strings, one a line (an attribute's allowed values)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(False, parent)
        self.text.setMinimumHeight(60)
        self.text.setPlaceholderText("One value a line")
        self.text.textChanged.disconnect()
        self.text.textChanged.connect(lambda: self.edited.emit(self.value(), True))

    def value(self) -> list[str]:
        return [line for line in self.text.toPlainText().split("\n") if line.strip()]

    def set_value(self, value: Any) -> None:
        if self.value() != list(value or []):
            with QSignalBlocker(self.text):
                self.text.setPlainText("\n".join(value or []))


class JsonEditor(FieldEditor):
    """A JSON value; text that does not parse is kept and the error shown, nothing is lost."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = QPlainTextEdit(self)
        self.text.setTabChangesFocus(True)
        self.text.setMinimumHeight(70)
        self.text.setMaximumHeight(220)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.textChanged.connect(self._parse)
        self._value: Any = None
        self._finish(self.text)

    def _parse(self) -> None:
        try:
            value = json.loads(self.text.toPlainText() or "null")
        except json.JSONDecodeError as exc:
            self.set_error(f"JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}")
            return
        self.set_error("")
        self._value = value
        self.edited.emit(value, True)

    def value(self) -> Any:
        return self._value

    def set_value(self, value: Any) -> None:
        self._value = value
        try:
            current = json.loads(self.text.toPlainText() or "null")
        except json.JSONDecodeError:
            current = object()
        if current != value:
            with QSignalBlocker(self.text):
                self.text.setPlainText(json.dumps(value, indent=2, ensure_ascii=False))


class MetadataEditor(JsonEditor):
    """A ``metadata`` object without the keys the editor keeps there for itself (``hidden``: the
    terminals' places): those stay in the value, and in the file, unchanged, but not in the text."""

    def __init__(self, hidden: tuple[str, ...] = (EDITOR_METADATA_KEY,), parent: QWidget | None = None) -> None:
        self.hidden = hidden
        self._kept: dict[str, Any] = {}
        super().__init__(parent)
        self.text.setToolTip("Free-form data kept as it is. The editor's own layout data is kept too, not shown here.")

    def _parse(self) -> None:
        try:
            shown = json.loads(self.text.toPlainText() or "{}")
        except json.JSONDecodeError as exc:
            self.set_error(f"JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}")
            return
        self.set_error("")
        if isinstance(shown, dict):
            value: Any = {k: v for k, v in shown.items() if k not in self.hidden} | self._kept
        else:
            value = shown  # not an object: the asset's validation says so
        self._value = value
        self.edited.emit(value, True)

    def set_value(self, value: Any) -> None:
        self._value = value
        full = value if isinstance(value, dict) else {}
        self._kept = {k: full[k] for k in self.hidden if k in full}
        shown = {k: v for k, v in full.items() if k not in self.hidden} if isinstance(value, dict) else value
        try:
            current = json.loads(self.text.toPlainText() or "{}")
        except json.JSONDecodeError:
            current = object()
        if current != shown:
            with QSignalBlocker(self.text):
                self.text.setPlainText(json.dumps(shown, indent=2, ensure_ascii=False) if shown else "")


class IntEditor(FieldEditor):
    def __init__(self, info: FieldInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.spin = QSpinBox(self)
        limits = bounds(info)
        low = limits.get("ge", limits.get("gt", -INT_MAX - 1) + 1 if "gt" in limits else -INT_MAX - 1)
        high = limits.get("le", limits.get("lt", INT_MAX + 1) - 1 if "lt" in limits else INT_MAX)
        self.static_range = (int(low), int(min(high, INT_MAX)))
        self.spin.setRange(*self.static_range)
        self.spin.setKeyboardTracking(False)
        self.spin.setAccelerated(True)
        self.spin.valueChanged.connect(lambda v: self.edited.emit(int(v), True))
        self._finish(self.spin)

    def set_maximum(self, maximum: int | None) -> None:
        """Narrow the range for a constraint between fields (max tokens below context size)."""
        top = self.static_range[1] if maximum is None else max(self.static_range[0], min(maximum, self.static_range[1]))
        with QSignalBlocker(self.spin):
            self.spin.setMaximum(top)

    def set_zero_means(self, text: str) -> None:
        """What the field's 0 stands for, shown in place of a bare "0" (Context Size: the model's own)."""
        if self.static_range[0] == 0:
            self.spin.setSpecialValueText(text)

    def value(self) -> int:
        return self.spin.value()

    def set_value(self, value: Any) -> None:
        if self.spin.value() != value:
            with QSignalBlocker(self.spin):
                if value > self.spin.maximum():
                    self.spin.setMaximum(min(int(value), INT_MAX))
                self.spin.setValue(int(value))


class FloatEditor(FieldEditor):
    def __init__(self, info: FieldInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.spin = QDoubleSpinBox(self)
        limits = bounds(info)
        self.spin.setDecimals(2)
        self.spin.setSingleStep(0.05)
        low = limits.get("ge", limits.get("gt", -1e9))
        if "gt" in limits:
            low = limits["gt"] + 0.01
        high = limits.get("le", limits.get("lt", 1e9))
        self.spin.setRange(low, high)
        self.spin.setKeyboardTracking(False)
        self.spin.valueChanged.connect(lambda v: self.edited.emit(round(float(v), 4), True))
        self._finish(self.spin)

    def value(self) -> float:
        return round(self.spin.value(), 4)

    def set_value(self, value: Any) -> None:
        if abs(self.spin.value() - float(value)) > 1e-9:
            with QSignalBlocker(self.spin):
                self.spin.setValue(float(value))


class BoolEditor(FieldEditor):
    def __init__(self, label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.check = QCheckBox(label, self)
        self.check.toggled.connect(lambda v: self.edited.emit(bool(v), False))
        self._finish(self.check)

    def value(self) -> bool:
        return self.check.isChecked()

    def set_value(self, value: Any) -> None:
        if self.check.isChecked() != bool(value):
            with QSignalBlocker(self.check):
                self.check.setChecked(bool(value))


LAZY_CHOICES = 200  # more computed choices than this (exits in a large graph) are listed when used


class _LazyComboBox(QComboBox):
    """A combo box that asks for its whole list (``before_use``) only when the person uses it:
    opens it, types in it or turns the wheel over it."""

    def __init__(self, before_use: Callable[[], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._before_use = before_use

    def showPopup(self) -> None:
        self._before_use()
        super().showPopup()

    def keyPressEvent(self, event) -> None:
        self._before_use()
        super().keyPressEvent(event)

    def wheelEvent(self, event) -> None:
        self._before_use()
        super().wheelEvent(event)


class ChoiceEditor(FieldEditor):
    """A combo box over fixed choices (a Literal) or choices computed when shown (exits).

    Computed choices past ``LAZY_CHOICES`` are listed only when the combo box is used; until then
    it holds just the current value: refilling thousands of exit targets on every edit of a large
    graph took longer than validating it."""

    def __init__(self, choices: list[tuple[str, Any]] | Callable[[], list[tuple[str, Any]]],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = _LazyComboBox(self._fill, self)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self._choices = choices
        self._value: Any = None
        self._filled = True  # whether the combo box lists every choice
        self.combo.activated.connect(self._picked)
        self._finish(self.combo)
        self.refresh_choices()

    def refresh_choices(self) -> None:
        choices = self._choices() if callable(self._choices) else self._choices
        with QSignalBlocker(self.combo):
            self.combo.clear()
            self._filled = not callable(self._choices) or len(choices) <= LAZY_CHOICES
            if self._filled:
                for label, value in choices:
                    self.combo.addItem(label, value)
            else:
                label = next((label for label, value in choices if value == self._value), None)
                if label is not None:
                    self.combo.addItem(label, self._value)
            self._select(self._value)

    @property
    def filled(self) -> bool:
        return self._filled

    def _fill(self) -> None:
        """List every choice now (the combo box is about to be used)."""
        if self._filled:
            return
        choices = self._choices() if callable(self._choices) else self._choices
        with QSignalBlocker(self.combo):
            self.combo.clear()
            for label, value in choices:
                self.combo.addItem(label, value)
            self._filled = True
            self._select(self._value)

    def _select(self, value: Any) -> None:
        index = self.combo.findData(value)
        if index < 0 and value is not None:
            # A value that is not a choice (an exit naming a missing node): show it, lose nothing.
            self.combo.addItem(f"{value} (missing)", value)
            index = self.combo.count() - 1
        self.combo.setCurrentIndex(index)

    def _picked(self, index: int) -> None:
        value = self.combo.itemData(index)
        if value != self._value:
            self._value = value
            self.edited.emit(value, False)

    def value(self) -> Any:
        return self._value

    def set_value(self, value: Any) -> None:
        self._value = value
        if self.combo.currentData() != value or self.combo.currentIndex() < 0:
            if not self._filled:  # the label of the new value is among the choices not listed
                self.refresh_choices()
                return
            with QSignalBlocker(self.combo):
                self._select(value)


class OptionalTextEditor(FieldEditor):
    """Text that may be null (a tool's mock result: null asks the designer)."""

    def __init__(self, none_label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        box = QWidget(self)
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        self.check = QCheckBox(none_label, box)
        self.text = QPlainTextEdit(box)
        self.text.setTabChangesFocus(True)
        self.text.setMaximumHeight(90)
        layout.addWidget(self.check)
        layout.addWidget(self.text)
        self.check.toggled.connect(self._toggled)
        self.text.textChanged.connect(lambda: self.edited.emit(self.text.toPlainText(), True))
        self._finish(box)

    def _toggled(self, is_none: bool) -> None:
        self.text.setEnabled(not is_none)
        self.edited.emit(None if is_none else self.text.toPlainText(), False)

    def value(self) -> str | None:
        return None if self.check.isChecked() else self.text.toPlainText()

    def set_value(self, value: Any) -> None:
        with QSignalBlocker(self.check), QSignalBlocker(self.text):
            self.check.setChecked(value is None)
            self.text.setEnabled(value is not None)
            if value is not None and self.text.toPlainText() != value:
                self.text.setPlainText(value)


class PositionEditor(FieldEditor):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QWidget(self)
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        self.x = QDoubleSpinBox(row)
        self.y = QDoubleSpinBox(row)
        for spin, prefix in ((self.x, "x "), (self.y, "y ")):
            spin.setRange(-1e6, 1e6)
            spin.setDecimals(0)
            spin.setPrefix(prefix)
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(lambda _v: self.edited.emit(self.value(), True))
            layout.addWidget(spin)
        self._finish(row)

    def value(self) -> tuple[float, float]:
        return (float(self.x.value()), float(self.y.value()))

    def set_value(self, value: Any) -> None:
        with QSignalBlocker(self.x), QSignalBlocker(self.y):
            self.x.setValue(float(value[0]))
            self.y.setValue(float(value[1]))
