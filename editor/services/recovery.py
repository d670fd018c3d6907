"""Autosave to a recovery file, and recovery files offered back after a crash.

While a document has unsaved changes it is written every ``interval_ms`` to a recovery file of its
own (the asset plus where it came from). Once the window's test conversation has turns, it is kept
too, in a dialog file beside it (the format of Export History), and right before each turn both are
written at once with the player's line: a native crash in the turn (llama.cpp on a bad GGUF) ends the
process before any timer could. Saving or closing normally deletes what is no longer needed, so a
recovery file still there when Parley Studio starts was left by a crash; the crash report its process
left (``runtime.crashes``, ``CRASH_NAME``) says what crashed, and both are offered back together. A
recovery folder that cannot be written never stops the editor: autosave says why (``Autosave.failed``)
and tries again later.
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
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from editor.model.document import Document
from editor.threads.thread_job import ThreadJob
from runtime.asset.file import asset_from_dict, asset_to_dict, load_asset
from runtime.asset.model import Asset
from runtime.crashes import Crash, process_running
from runtime.crashes import left_behind as crashes_left_behind
from runtime.dialogue.dialog_file import load_history, save_history
from runtime.dialogue.history import SavedDialog
from runtime.files.reading import read_input_text
from runtime.files.writing import atomic_write_text
from runtime.problems import InputError
from runtime.suites.kept import asset_changes

if TYPE_CHECKING:
    from editor.session.local import LiveConversation

SUFFIX = ".recovery.json"
CONVERSATION_SUFFIX = ".conversation.json"  # the conversation beside it, as Export History writes one
CRASH_NAME = "parley-studio"  # its crash reports: parley-studio-PID.crash in the recovery folder
# A conversation with more turns than this is written on a thread of its own (about 7 ms per 1,000 turns).
LARGE_CONVERSATION_TURNS = 1_000
log = logging.getLogger("parley.editor")


@dataclass
class Recovery:
    """A recovery file left behind: what it holds and where the asset came from, the conversation and
    the line of the turn that was running, and the crash report its process left (None: none)."""

    file: Path
    original_path: str
    saved_at: float
    asset: Asset
    modified: bool = True  # the asset had unsaved changes (else it is the file at original_path)
    folder: str = ""  # where an untitled asset's relative paths are read from
    conversation: SavedDialog | None = None
    line: str = ""  # the player's line of the turn that was running ("" between turns)
    crash: Crash | None = None

    @property
    def conversation_file(self) -> Path:
        return _conversation_file(self.file)

    def forget(self) -> None:
        """Delete the recovery file, its conversation and its crash report."""
        for file in (self.file, self.conversation_file):
            _delete(file)
        if self.crash is not None:
            self.crash.forget()


def _conversation_file(record: Path) -> Path:
    return record.with_name(record.name[:-len(SUFFIX)] + CONVERSATION_SUFFIX)


def _turns(saved: SavedDialog) -> int:
    return len(saved.tree) if saved.tree is not None else len(saved.history.turns)


class Autosave(QObject):
    """Writes the window's unsaved state to its recovery file: the asset while it has unsaved changes
    (on a timer), and ``conversation`` once it has turns; right before a turn, at once, with its line.
    When the file cannot be written, ``failed`` says why (once per new reason) and ``problem`` keeps
    it; nothing raises."""

    failed = Signal(str)

    def __init__(self, document: Document, directory: Path, interval_ms: int = 30_000,
                 parent: QObject | None = None, conversation: LiveConversation | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.conversation = conversation
        self.file = directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self.conversation_file = _conversation_file(self.file)
        self.line = ""  # the player's line of the turn running now
        self._written: tuple | None = None  # what the file holds (``_state``); None: no file
        self._conversation_written: SavedDialog | None = None  # what the conversation file holds
        self._writer: ThreadJob | None = None  # writing a large conversation
        self._stopped = False
        self.problem = ""
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.save_now)
        self.timer.start()
        document.undo_stack.cleanChanged.connect(self._clean_changed)
        if conversation is not None:
            # Direct connections: the turn's request reaches the worker only once these return.
            conversation.turn_started.connect(self.turn_starting)
            conversation.busy_changed.connect(self._busy_changed)
            conversation.history_changed.connect(self._conversation_changed)

    def _conversation(self) -> SavedDialog | None:
        saved = self.conversation.saved if self.conversation is not None else None
        return saved if saved is not None and _turns(saved) else None

    def _state(self) -> tuple:
        doc = self.document
        return (doc.undo_stack.index(), doc.modified, doc.path, self._conversation(), self.line)

    def save_now(self) -> bool:
        """Write the recovery file if it would hold something it does not yet: unsaved changes to the
        asset, the conversation, the line of the running turn. With nothing left to keep it goes."""
        if self._stopped:
            return False
        doc = self.document
        conversation = self._conversation()
        if not (doc.modified or conversation is not None or self.line):
            if self._written is not None or self._writer is not None or self.file.exists():
                self.discard()
            return False
        state = self._state()
        if self._written is not None and _same(state, self._written) and self.file.exists():
            return False
        record = {"original_path": doc.path, "saved_at": time.time(), "modified": doc.modified,
                  "folder": str(doc.folder or ""), "asset": asset_to_dict(doc.asset)}
        if conversation is not None or self.line:
            # The conversation itself is in conversation_file (none kept: 0 turns, the first turn's line)
            record["conversation"] = {"turns": _turns(conversation) if conversation is not None else 0,
                                      "line": self.line}
        written = True
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            if conversation is not None:
                written = self._write_conversation(conversation)
            # ASCII with escapes: a lone surrogate in the asset (a "\\ud800" in its JSON) is kept exactly.
            atomic_write_text(self.file, json.dumps(record))
        except (OSError, InputError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else exc.problems[0].message
            self._report(f"Autosave failed: cannot write a recovery file in {self.file.parent} "
                         f"({reason or exc}). Save the asset to keep your changes, or set "
                         "PARLEY_STUDIO_RECOVERY to a folder you can write.")
            return False
        self.problem = ""
        self._written = state if written else None  # None: the next save tries the conversation again
        return True

    def _write_conversation(self, conversation: SavedDialog) -> bool:
        """Write the conversation file, now when it is small; a large one on a thread of its own (a
        crash meanwhile finds the one before). False when an earlier one is still being written (this
        one waits for the next save). Raises what the last such write or this one raised."""
        writer = self._writer
        if writer is not None and not writer.is_running():
            self._writer = None
            writer.stop()  # ended: only forgets it
            writer.deleteLater()
            if writer.error is not None:
                self._conversation_written = None  # written again next time
                if not isinstance(writer.error, (OSError, InputError)):
                    log.error("writing %s failed", self.conversation_file, exc_info=writer.error)
                    return False
                raise writer.error
        if conversation is self._conversation_written:
            return True
        if self._writer is not None:
            return False
        if _turns(conversation) <= LARGE_CONVERSATION_TURNS:
            save_history(conversation, self.conversation_file)
            self._conversation_written = conversation
            return True
        self._conversation_written = conversation  # SavedDialogs are replaced, never changed
        file = self.conversation_file
        self._writer = ThreadJob(lambda: save_history(conversation, file), name="parley-recovery-conversation",
                                 parent=self).start()
        return True

    def turn_starting(self, line: str) -> None:
        """Right before a turn: the asset, the conversation so far and ``line`` on disk now."""
        self.line = line
        self.save_now()

    def _busy_changed(self, busy: bool) -> None:
        if not busy:
            self.line = ""  # the turn ended (its line is in the conversation now, or back in the box)
            self.save_now()

    def _conversation_changed(self, _saved: SavedDialog) -> None:
        if self.conversation is not None and not self.conversation.busy:  # a running turn's ends with it
            self.save_now()

    def _report(self, message: str) -> None:
        if message != self.problem:
            self.problem = message
            log.warning("%s", message)
            self.failed.emit(message)

    def discard(self) -> None:
        """Delete the recovery file and the conversation's (a new asset, or one saved and nothing else kept)."""
        if self._writer is not None:
            self._writer.stop(None)  # else it would write the file again once it is deleted
            self._writer = None
        self._written = self._conversation_written = None
        for file in (self.file, self.conversation_file):
            try:
                file.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:  # the folder went away or became unwritable: nothing of ours is there to keep
                log.warning("could not delete the recovery file %s: %s", file, exc.strerror or exc)

    def _clean_changed(self, clean: bool) -> None:
        if clean:
            self.save_now()  # the conversation may still need keeping; the asset no longer does

    def stop(self) -> None:
        """The window closes: nothing is kept, and nothing is written any more."""
        self._stopped = True
        self.timer.stop()
        self.discard()


def _same(state: tuple, written: tuple) -> bool:
    """Whether ``state`` is what was written (conversations by identity: replaced, never changed)."""
    return all(a is b if isinstance(a, SavedDialog) else a == b for a, b in zip(state, written, strict=True))


def left_behind(directory: Path) -> list[Recovery]:
    """Recovery files of sessions that are no longer running, newest first, each with its conversation
    and the crash report its process left. A folder that cannot be read has none; a file that cannot be
    read is left where it is for a person to look at (a conversation that cannot be read: the asset is
    offered without it)."""
    try:
        files = sorted(directory.glob(f"*{SUFFIX}"))
    except OSError:
        return []
    crashes = {crash.pid: crash for crash in crashes_left_behind(directory, CRASH_NAME)}
    found: list[Recovery] = []
    for file in files:
        pid = _pid(file)
        if pid == os.getpid() or (pid is not None and pid not in crashes and process_running(pid)):
            continue
        try:
            record = json.loads(read_input_text(file, InputError))  # a regular file of bounded size
            asset = asset_from_dict(record["asset"], str(file))
        except (OSError, ValueError, KeyError, TypeError, RecursionError, InputError):
            continue  # unreadable: leave it for a person to look at, never delete it silently
        # The asset is what matters; a damaged path, time or conversation still offers it back.
        original = record.get("original_path")
        folder = record.get("folder")
        recovery = Recovery(file, original if isinstance(original, str) else "", _time(record.get("saved_at")), asset,
                            modified=record.get("modified") is not False, folder=folder if isinstance(folder, str) else "",
                            crash=crashes.get(pid) if pid is not None else None)
        _read_conversation(recovery, record.get("conversation"))
        found.append(recovery)
    return sorted(found, key=lambda r: r.saved_at, reverse=True)


def _pid(file: Path) -> int | None:
    pid = file.name.split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _read_conversation(recovery: Recovery, kept: object) -> None:
    if not isinstance(kept, dict):
        return
    line = kept.get("line")
    recovery.line = line if isinstance(line, str) else ""
    if not kept.get("turns"):
        return  # a new conversation's first turn: only its line
    try:
        recovery.conversation = load_history(recovery.conversation_file)
    except (OSError, InputError) as exc:
        log.warning("the conversation kept with %s cannot be read (%s); the asset is offered without it",
                    recovery.file, exc)


def lone_crashes(directory: Path) -> list[Crash]:
    """Crash reports of sessions that left no recovery file (nothing was unsaved), newest first."""
    try:
        kept = {_pid(file) for file in directory.glob(f"*{SUFFIX}")}
    except OSError:
        kept = set()
    return [crash for crash in crashes_left_behind(directory, CRASH_NAME) if crash.pid not in kept]


def tell_lone_crashes(directory: Path) -> str:
    """Log and forget the crash reports of sessions that left nothing unsaved; the latest as the window's
    status line says it ("" when there is none)."""
    crashes = lone_crashes(directory)
    for crash in crashes:
        log.warning("Parley Studio (pid %d) %s. Its report, from %s:\n%s", crash.pid, crash.summary(), crash.file,
                    crash.text.rstrip() or "(empty)")
        crash.forget()
    if not crashes or not crashes[0].fatal:
        return ""  # killed, or shut down with its machine: nothing to say, and nothing was lost
    return f"Parley Studio {crashes[0].summary(detailed=False)} last time; nothing unsaved was lost."


def _time(value: object) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def describe(found: Recovery) -> str:
    """One recovery file as a person knows it: the asset's file (or "an untitled asset") and when,
    with its conversation and the line that was being said."""
    name = found.original_path or "an untitled asset"
    try:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(found.saved_at))
    except (OverflowError, OSError, ValueError):
        when = "at an unknown time"
    text = f"{name} (autosaved {when})"
    if found.conversation is not None:
        turns = len(found.conversation.history.turns)
        text += f", with its conversation of {turns} turn{'s' if turns != 1 else ''}"
    if found.line:
        line = found.line if len(found.line) <= 60 else found.line[:59] + "\u2026"
        text += f", and the line \u201c{line}\u201d being said"
    return text


def has_saved_file(found: Recovery) -> bool:
    """Whether the recovered asset has a saved file it may differ from."""
    return bool(found.original_path) and found.modified


def changes_since_saved(found: Recovery) -> str:
    """What the autosave changes in the saved file, a line per node and field (the same comparison the
    Turn Inspector lists edits with), or why there is nothing to compare."""
    if not found.original_path:
        return "An untitled asset: there is no saved file to compare the autosave with."
    if not found.modified:
        return f"The autosave is the saved file {found.original_path} as it was: no unsaved changes."
    try:
        saved = load_asset(found.original_path)
    except (OSError, InputError, ValueError) as exc:
        return f"The saved file {found.original_path} cannot be read to compare with: {exc}"
    changes = asset_changes(saved, found.asset)
    if not changes:
        return f"The autosave and the saved file {found.original_path} hold the same graph."
    count = f"{len(changes)} change{'s' if len(changes) != 1 else ''}"
    lines = [f"{count} in the autosave since {Path(found.original_path).name} was saved (saved \u2192 autosaved):"]
    lines += [f"  {change.text()}" for change in changes]
    return "\n".join(lines)


def what_crashed(found: Recovery) -> str:
    """What became of the session that left ``found``: "Parley Studio crashed (Segmentation fault) in
    llama.cpp while node `reply` ran turn 3 of chat.json on M.gguf." ("" without a crash report)."""
    return f"Parley Studio {found.crash.summary(detailed=False)}." if found.crash is not None else ""


class RecoveryDialog(QDialog):
    """One question for what crashes left: open one of the recovered versions (the newest is selected),
    discard them all, or keep them all for later. The one selected says what crashed, and its crash
    report is a click away."""

    OPEN, DISCARD_ALL, KEEP = 1, 2, 0

    def __init__(self, found: list[Recovery], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.found = found
        self.choice = self.KEEP
        several = len(found) > 1
        self.setWindowTitle("Recover after a crash" if any(r.crash for r in found) else "Recover unsaved changes")
        self.setMinimumWidth(600)
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning).pixmap(40, 40))
        icon.setAlignment(Qt.AlignmentFlag.AlignTop)
        top.addWidget(icon)
        text = QVBoxLayout()
        self.headline = QLabel()
        self.headline.setWordWrap(True)
        self.headline.setTextFormat(Qt.TextFormat.PlainText)
        font = self.headline.font()
        font.setBold(True)
        self.headline.setFont(font)
        text.addWidget(self.headline)
        self.question = QLabel()
        self.question.setWordWrap(True)
        text.addWidget(self.question)
        # One session: what it kept, in a sentence; several: a list to pick one from.
        self.kept = QLabel()
        self.kept.setWordWrap(True)
        self.kept.setTextFormat(Qt.TextFormat.PlainText)
        self.kept.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.kept.setContentsMargins(0, 6, 0, 0)
        text.addWidget(self.kept)
        text.addStretch(1)
        top.addLayout(text, 1)
        layout.addLayout(top)
        self.list = QListWidget()
        for recovery in found:
            item = QListWidgetItem(describe(recovery))
            item.setToolTip(f"{describe(recovery)}\n{recovery.file}")
            self.list.addItem(item)
        self.list.itemDoubleClicked.connect(lambda _item: self.choose(self.OPEN))
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setMaximumHeight(self.list.sizeHintForRow(0) * min(len(found), 6) + 2 * self.list.frameWidth() + 4)
        self.list.setVisible(several)
        layout.addWidget(self.list)
        self.report_button = QToolButton()
        self.report_button.setText("Crash report")
        self.report_button.setCheckable(True)
        self.report_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.report_button.setArrowType(Qt.ArrowType.RightArrow)
        self.report_button.setAutoRaise(True)
        self.report_button.toggled.connect(self._show_report)
        layout.addWidget(self.report_button)
        # What the autosave changes in the saved file, before choosing to open or discard it
        self.changes_button = QToolButton()
        self.changes_button.setText("Changes since the saved file")
        self.changes_button.setCheckable(True)
        self.changes_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.changes_button.setArrowType(Qt.ArrowType.RightArrow)
        self.changes_button.setAutoRaise(True)
        self.changes_button.toggled.connect(self._show_changes)
        layout.addWidget(self.changes_button)
        self.changes = QPlainTextEdit()
        self.changes.setReadOnly(True)
        self.changes.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.changes.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.changes.setMinimumHeight(160)
        self.changes.hide()
        layout.addWidget(self.changes)
        self.report = QPlainTextEdit()
        self.report.setReadOnly(True)
        self.report.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.report.setMinimumHeight(200)
        self.report.hide()
        layout.addWidget(self.report)
        buttons = QDialogButtonBox()
        buttons.addButton("Open", QDialogButtonBox.ButtonRole.AcceptRole).clicked.connect(
            lambda: self.choose(self.OPEN))
        buttons.addButton("Discard All" if several else "Discard", QDialogButtonBox.ButtonRole.DestructiveRole
                          ).clicked.connect(lambda: self.choose(self.DISCARD_ALL))
        buttons.addButton("Keep for Later", QDialogButtonBox.ButtonRole.RejectRole).clicked.connect(
            lambda: self.choose(self.KEEP))
        layout.addWidget(buttons)
        self.list.currentRowChanged.connect(self._selected)
        self.list.setCurrentRow(0)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self._fit()

    def _fit(self) -> None:
        """As tall as the wrapped text needs at the dialog's width (Qt's size hint wraps it narrower)."""
        width = max(self.width(), self.minimumWidth())
        self.resize(width, self.heightForWidth(width))

    def _selected(self, row: int) -> None:
        recovery = self.found[row] if 0 <= row < len(self.found) else None
        if recovery is None:
            return
        several = len(self.found) > 1
        crash = recovery.crash
        self.headline.setText(what_crashed(recovery) or (
            f"Parley Studio closed without saving {len(self.found)} sessions." if several else
            "Parley Studio closed without saving."))
        talk = recovery.conversation is not None or recovery.line
        kept = ("The graph and the conversation so far were kept" + (", with the line being said" if recovery.line
                else "") if talk else "The graph was kept")
        self.question.setText(f"{kept}. Open {'them' if talk else 'it'} to carry on where it stopped?" + (
            " The sessions not opened are kept and offered again next time." if several else ""))
        self.kept.setText("" if several else describe(recovery))
        self.kept.setVisible(not several)
        self.changes.setPlainText(changes_since_saved(recovery))
        self.changes_button.setVisible(has_saved_file(recovery))
        if not has_saved_file(recovery):
            self.changes_button.setChecked(False)
        self.report_button.setVisible(crash is not None)
        if crash is None:
            self.report_button.setChecked(False)
            return
        where = crash.where or "where it crashed is not known"
        self.report.setPlainText(f"{where}\n{crash.file}\n\n{crash.text.rstrip() or '(the report is empty)'}")

    def _show_changes(self, shown: bool) -> None:
        self.changes_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.changes.setVisible(shown)
        self._fit()

    def _show_report(self, shown: bool) -> None:
        self.report_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.report.setVisible(shown)
        self._fit()

    def choose(self, choice: int) -> None:
        self.choice = choice
        self.accept() if choice != self.KEEP else self.reject()

    def selected(self) -> Recovery | None:
        row = self.list.currentRow()
        return self.found[row] if 0 <= row < len(self.found) else None


def offer_left_behind(parent: QWidget | None, directory: Path) -> Recovery | None:
    """Offer back every recovery file a crash left, in one question: one file without a crash report
    or a conversation is asked about alone, the others in a ``RecoveryDialog`` that says what crashed.
    What the person discards is deleted. Returns the recovery to open (its files still there, for the
    caller to ``forget`` once it is open), or None."""
    found = left_behind(directory)
    if not found:
        return None
    alone = found[0]  # with nothing more to say than its name: a plain question (else the dialog shows it)
    if len(found) == 1 and alone.crash is None and alone.conversation is None and not alone.line \
            and not has_saved_file(alone):
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
            found[0].forget()
        return None
    dialog = RecoveryDialog(found, parent)
    dialog.exec()
    if dialog.choice == RecoveryDialog.DISCARD_ALL:
        for recovery in found:
            recovery.forget()
        return None
    return dialog.selected() if dialog.choice == RecoveryDialog.OPEN else None


def _delete(file: Path) -> None:
    try:
        file.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not delete the recovery file %s: %s", file, exc.strerror or exc)
