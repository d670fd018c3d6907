"""File > Export Strings… and Import Strings…: the asset's authored texts as a CSV string table for
translators and voice actors, and their translation back (``runtime.asset.strings``, docs/localisation.md).

Import changes the open asset, as one undo step: every changed node field, comment and the agent's
language together, so Undo puts the source texts back. The file changes only when the designer saves,
and Save As keeps the translation as a copy beside the original. A table the runtime refuses changes
nothing; a message names each bad row and column.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMenu, QMessageBox

from editor.model.commands import MacroCommand, SetAgentFieldCommand, SetCommentCommand, SetNodeFieldCommand
from editor.model.document import Document
from runtime.asset.model import Asset
from runtime.asset.strings import StringTableError, read_string_table, save_string_table, translate

if TYPE_CHECKING:
    from PySide6.QtGui import QAction

TABLE_FILTER = "String tables (*.csv);;All files (*)"
SHOWN_PROBLEMS = 12  # in the refusal's message; the rest are counted


def translation_command(document: Document, translated: Asset, text: str = "Import strings") -> MacroCommand | None:
    """One undo step that turns the document's asset into ``translated`` (the same graph with other
    texts): each node field, comment and the language that differ; None when nothing does."""
    asset = document.asset
    command = MacroCommand(text)
    for node, new in zip(asset.nodes, translated.nodes, strict=True):
        for field in type(node).model_fields:
            old_value, new_value = getattr(node, field), getattr(new, field)
            if field != "id" and old_value != new_value:
                SetNodeFieldCommand(document, node.id, field, old_value, new_value, command)
    for comment, new in zip(asset.comments, translated.comments, strict=True):
        changed = {f: getattr(new, f) for f in type(comment).model_fields if getattr(comment, f) != getattr(new, f)}
        if changed:
            SetCommentCommand(document, comment.id, {f: getattr(comment, f) for f in changed}, changed, parent=command)
    if translated.language != asset.language:
        SetAgentFieldCommand(document, "language", asset.language, translated.language, command)
    return command if command.parts else None


class StringsActions:
    """The File menu's Export Strings… and Import Strings… of ``window`` (the editor's MainWindow,
    typed as a QMainWindow as in ``editor.model.bypass``)."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self.last_refusal = ""  # the message of the last table refused (tests read it)
        self.export_action: QAction = window._action(
            "E&xport Strings\u2026", self.export_dialog,
            tip="Write the agent's prompts, templates, canned lines, descriptions and notes as a CSV string table "
                "for translators and voice actors")
        self.import_action: QAction = window._action(
            "&Import Strings\u2026", self.import_dialog,
            tip="Put a translated string table's texts into the agent, as one undo step (Save As keeps the "
                "translation as a copy)")

    @property
    def document(self) -> Document:
        return self.window.document

    def _suggested(self) -> str:
        path = self.document.path
        if path:
            return str(Path(path).with_suffix(".strings.csv"))
        return f"{self.document.asset.name.lower().replace(' ', '_')}.strings.csv"

    def export_dialog(self) -> bool:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export strings", self._suggested(), TABLE_FILTER)
        return bool(path) and self.export_to(path if path.lower().endswith(".csv") else f"{path}.csv")

    def export_to(self, path: str) -> bool:
        try:
            written = save_string_table(self.document.asset, path)
        except OSError as exc:
            self._refuse("Export strings", f"Could not write {path}:\n{exc.strerror or exc}\nNothing was written.")
            return False
        self.window.statusBar().showMessage(
            f"Exported {written} text{'s' if written != 1 else ''} to {path}: fill in its translation column", 8000)
        return True

    def import_dialog(self) -> bool:
        start = str(Path(self.document.path).parent) if self.document.path else ""
        path, _ = QFileDialog.getOpenFileName(self.window, "Import strings", start, TABLE_FILTER)
        return bool(path) and self.import_from(path)

    def import_from(self, path: str) -> bool:
        """Put the table's translations into the open asset as one undo step; False (a message says
        why, the asset unchanged) when the table is refused."""
        try:
            translation = translate(self.document.asset, read_string_table(path), path)
        except StringTableError as exc:
            shown = [str(p) for p in exc.problems[:SHOWN_PROBLEMS]]
            more = len(exc.problems) - len(shown)
            self._refuse("Import strings", f"{path} was not imported; the agent is unchanged.\n\n"
                         + "\n".join(shown) + (f"\n... and {more} more" if more > 0 else ""))
            return False
        command = translation_command(self.document, translation.asset, f"Import strings from {Path(path).name}")
        if command is not None:
            self.document.push(command)
        kept = len(translation.untranslated)
        self.window.statusBar().showMessage(
            f"Imported {len(translation.translated)} translation{'s' if len(translation.translated) != 1 else ''} "
            f"from {Path(path).name}" + (f"; {kept} text{'s' if kept != 1 else ''} kept the source" if kept else "")
            + ". Undo puts the source back; Save As keeps the translation as a copy.", 15_000)
        return True

    def _refuse(self, title: str, message: str) -> QMessageBox:
        box = QMessageBox(QMessageBox.Icon.Warning, title, message, QMessageBox.StandardButton.Ok, self.window)
        box.setObjectName("strings_refused")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()  # not exec(): the window stays live behind it
        self.last_refusal = message
        return box


def install_strings(window: QMainWindow, file_menu: QMenu) -> StringsActions:
    actions = StringsActions(window)
    file_menu.addActions([actions.export_action, actions.import_action])
    return actions
