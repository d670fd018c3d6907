"""Autosave to a recovery file, and recovery files offered back after a crash.

While a document has unsaved changes it is written every ``interval_ms`` to a
recovery file of its own (the asset plus where it came from). Saving or closing
normally deletes the file, so a recovery file that is still there when Parley
Studio starts was left by a crash. A recovery folder that cannot be written never
stops the editor: autosave says why (``Autosave.failed``) and tries again later.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from editor.document import Document
from runtime.asset.file import asset_from_dict, asset_to_dict
from runtime.asset.model import Asset
from runtime.files.reading import read_input_text
from runtime.files.writing import atomic_write_text
from runtime.problems import InputError

SUFFIX = ".recovery.json"
log = logging.getLogger("parley.editor")


@dataclass
class Recovery:
    """A recovery file left behind: what it holds and where the asset came from."""

    file: Path
    original_path: str
    saved_at: float
    asset: Asset


class Autosave(QObject):
    """Writes the document's unsaved state to its recovery file on a timer. When the file cannot
    be written, ``failed`` says why (once per new reason) and ``problem`` keeps it; nothing raises."""

    failed = Signal(str)

    def __init__(self, document: Document, directory: Path, interval_ms: int = 30_000,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.file = directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self._written_index = -1
        self.problem = ""
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.save_now)
        self.timer.start()
        document.undo_stack.cleanChanged.connect(self._clean_changed)

    def save_now(self) -> bool:
        """Write the recovery file if there are unsaved changes not yet written."""
        doc = self.document
        if not doc.modified:
            return False
        if doc.undo_stack.index() == self._written_index and self.file.exists():
            return False
        record = {"original_path": doc.path, "saved_at": time.time(), "asset": asset_to_dict(doc.asset)}
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            # ASCII with escapes: a lone surrogate in the asset (a "\\ud800" in its JSON) is kept exactly.
            atomic_write_text(self.file, json.dumps(record))
        except OSError as exc:
            self._report(f"Autosave failed: cannot write a recovery file in {self.file.parent} "
                         f"({exc.strerror or exc}). Save the asset to keep your changes, or set "
                         "PARLEY_STUDIO_RECOVERY to a folder you can write.")
            return False
        self.problem = ""
        self._written_index = doc.undo_stack.index()
        return True

    def _report(self, message: str) -> None:
        if message != self.problem:
            self.problem = message
            log.warning("%s", message)
            self.failed.emit(message)

    def discard(self) -> None:
        self._written_index = -1
        try:
            self.file.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:  # the folder went away or became unwritable: nothing of ours is there to keep
            log.warning("could not delete the recovery file %s: %s", self.file, exc.strerror or exc)

    def _clean_changed(self, clean: bool) -> None:
        if clean:
            self.discard()

    def stop(self) -> None:
        self.timer.stop()
        self.discard()


def left_behind(directory: Path) -> list[Recovery]:
    """Recovery files of sessions that are no longer running, newest first. A folder that cannot be
    read has none; a file that cannot be read is left where it is for a person to look at."""
    try:
        files = sorted(directory.glob(f"*{SUFFIX}"))
    except OSError:
        return []
    found: list[Recovery] = []
    for file in files:
        pid = file.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and _running(int(pid)):
            continue
        if pid.isdigit() and int(pid) == os.getpid():
            continue
        try:
            record = json.loads(read_input_text(file, InputError))  # a regular file of bounded size
            asset = asset_from_dict(record["asset"], str(file))
        except (OSError, ValueError, KeyError, TypeError, RecursionError, InputError):
            continue  # unreadable: leave it for a person to look at, never delete it silently
        # The asset is what matters; a damaged path or time still offers it back.
        original = record.get("original_path")
        found.append(Recovery(file, original if isinstance(original, str) else "", _time(record.get("saved_at")), asset))
    return sorted(found, key=lambda r: r.saved_at, reverse=True)


def _time(value: object) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def describe(found: Recovery) -> str:
    """One recovery file as a person knows it: the asset's file (or "an untitled asset") and when."""
    name = found.original_path or "an untitled asset"
    try:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(found.saved_at))
    except (OverflowError, OSError, ValueError):
        when = "at an unknown time"
    return f"{name} (autosaved {when})"


class RecoveryDialog(QDialog):
    """One question for several recovery files: open one of them (the newest is selected),
    discard them all, or keep them all for later."""

    OPEN, DISCARD_ALL, KEEP = 1, 2, 0

    def __init__(self, found: list[Recovery], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Recover unsaved changes")
        self.found = found
        self.choice = self.KEEP
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(
            f"Parley Studio closed without saving {len(found)} assets. Open one of the recovered versions? "
            "The others are kept and offered again next time."))
        self.list = QListWidget()
        for recovery in found:
            item = QListWidgetItem(describe(recovery))
            item.setToolTip(str(recovery.file))
            self.list.addItem(item)
        self.list.setCurrentRow(0)
        self.list.itemDoubleClicked.connect(lambda _item: self.choose(self.OPEN))
        layout.addWidget(self.list)
        buttons = QDialogButtonBox()
        buttons.addButton("Open", QDialogButtonBox.ButtonRole.AcceptRole).clicked.connect(
            lambda: self.choose(self.OPEN))
        buttons.addButton("Discard All", QDialogButtonBox.ButtonRole.DestructiveRole).clicked.connect(
            lambda: self.choose(self.DISCARD_ALL))
        buttons.addButton("Keep for Later", QDialogButtonBox.ButtonRole.RejectRole).clicked.connect(
            lambda: self.choose(self.KEEP))
        layout.addWidget(buttons)
        self.setWindowModality(Qt.WindowModality.WindowModal)

    def choose(self, choice: int) -> None:
        self.choice = choice
        self.accept() if choice != self.KEEP else self.reject()

    def selected(self) -> Recovery | None:
        row = self.list.currentRow()
        return self.found[row] if 0 <= row < len(self.found) else None


def offer_left_behind(parent: QWidget | None, directory: Path) -> Recovery | None:
    """Offer back every recovery file a crash left, in one question: one file is asked about alone,
    several are listed together. Files the person discards are deleted. Returns the recovery to open
    (its file still there, for the caller to delete once the asset is open), or None."""
    found = left_behind(directory)
    if not found:
        return None
    if len(found) == 1:
        answer = QMessageBox.question(
            parent, "Recover unsaved changes",
            f"Parley Studio closed without saving the changes to {describe(found[0])}.\n"
            "Open the recovered version?",
            QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Ignore,
            QMessageBox.StandardButton.Open,
        )
        if answer == QMessageBox.StandardButton.Open:
            return found[0]
        if answer == QMessageBox.StandardButton.Discard:
            _delete(found[0].file)
        return None
    dialog = RecoveryDialog(found, parent)
    dialog.exec()
    if dialog.choice == RecoveryDialog.DISCARD_ALL:
        for recovery in found:
            _delete(recovery.file)
        return None
    return dialog.selected() if dialog.choice == RecoveryDialog.OPEN else None


def _delete(file: Path) -> None:
    try:
        file.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not delete the recovery file %s: %s", file, exc.strerror or exc)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
