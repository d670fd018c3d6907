"""Export, Import and the repro bundle: the conversation to and from files, each read or written on a
thread of its own so the window keeps answering."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMenu, QToolButton, QWidget

from editor.docks.conversation.status import TurnStatus, tool_button
from editor.services.backend_choice import BackendChoice
from editor.session.view import SessionView
from editor.threads.thread_job import ThreadJob
from runtime.bundle.file import BUNDLE_SUFFIX, make_bundle, write_bundle
from runtime.dialogue.dialog_file import HistoryError, load_history, save_history
from runtime.dialogue.history import SavedDialog
from runtime.problems import InputError

HISTORY_FILTER = "Parley dialog history (*.json);;All files (*)"
BUNDLE_FILTER = f"Parley repro bundle (*{BUNDLE_SUFFIX});;All files (*)"


def _is_embedded(backend: object) -> bool:
    """Whether ``backend`` is the embedded llama.cpp engine (whose settings and journals a bundle holds)."""
    try:
        from runtime.backends.llama import LlamaBackend
    except (ImportError, OSError, RuntimeError):
        return False
    return isinstance(backend, LlamaBackend)


class HistoryFiles(QObject):
    """The Export… (with its repro bundle entry) and Import… buttons and the jobs behind them.
    ``asset`` names the nodes of the conversation shown; ``read_only`` says why it cannot be changed."""

    done = Signal(bool)  # an Import or Export ended (on its thread): whether it worked

    def __init__(self, view: SessionView, backends: BackendChoice, status: TurnStatus,
                 asset: Callable[[], object], read_only: Callable[[], str], parent: QWidget) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.backends = backends
        self.status = status
        self.asset = asset
        self.read_only = read_only
        self.dialog_parent = parent
        self.file_job: ThreadJob | None = None  # an Import or Export running on its own thread
        self.export_button = tool_button(parent, "Export\u2026", "Save the dialog history to a file (the arrow: "
                                         "a repro bundle, which `parley replay` repeats byte for byte)",
                                         self.export_dialog)
        export_menu = QMenu(self.export_button)
        export_menu.addAction("Export dialog history\u2026", self.export_dialog)
        self.export_bundle_action = QAction("Export repro bundle\u2026", export_menu)
        self.export_bundle_action.setToolTip("One file with the asset, the model's SHA-256, the llama.cpp build, "
                                             "the settings that decide the numbers and the whole conversation with "
                                             "each node's decode journal: `parley replay FILE` repeats it elsewhere")
        self.export_bundle_action.triggered.connect(lambda _c=False: self.export_repro_bundle())
        export_menu.addAction(self.export_bundle_action)
        export_menu.setToolTipsVisible(True)
        self.export_button.setMenu(export_menu)
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.import_button = tool_button(parent, "Import\u2026", "Continue from a saved dialog history",
                                         self.import_dialog)

    # --- the buttons' dialogs -----------------------------------------------------------------

    def export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.dialog_parent, "Export dialog history", "dialog.json",
                                              HISTORY_FILTER)
        if path:
            self.start_export(path)

    def import_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.dialog_parent, "Import dialog history", "", HISTORY_FILTER)
        if path:
            self.start_import(path)

    def export_repro_bundle(self) -> None:
        doc = self.actions.document
        name = f"{Path(doc.path).stem if doc.path else 'conversation'}{BUNDLE_SUFFIX}"
        path, _ = QFileDialog.getSaveFileName(self.dialog_parent, "Export repro bundle", name, BUNDLE_FILTER)
        if path:
            self.start_bundle_export(path)

    # --- the jobs -----------------------------------------------------------------------------

    def start_bundle_export(self, path: str) -> bool:
        """Write a repro bundle of the conversation to ``path`` on a thread of its own (hashing the model
        takes a moment the first time); ``done`` says how it went. False, with the reason shown, when it
        cannot start: an Import or Export still running, or a conversation on a server (a bundle replays
        on the embedded engine, which records how each node's cache was read)."""
        backend = self.actions.backend  # only its settings are read; None: the defaults
        if self.backends.remote or (backend is not None and not _is_embedded(backend)):
            where = self.backends.spec if self.backends.remote else getattr(backend, "label", "this backend")
            self.status.show_error(
                f"A repro bundle is for the embedded engine: this conversation runs on {where}, which does not "
                "say how it read each prompt. Pick Embedded (this computer) above and talk again, then export "
                "the bundle.")
            return False
        saved = self.view.saved  # replaced, never changed, by later turns: safe to read from there
        asset = self.asset()
        doc = self.actions.document
        count = len(saved.tree) if saved.tree is not None else len(saved.history.turns)

        def work() -> int:
            bundle = make_bundle(asset, saved, backend, doc.asset_dir, asset_source=doc.path)
            return write_bundle(bundle, path)

        return self._start_file_job(work, f"Writing a repro bundle of {count} turns to {path} (hashing the "
                                    "model)\u2026", lambda size, error: self._bundle_exported(path, count, size, error))

    def export_bundle_to(self, path: str) -> bool:
        """``start_bundle_export`` and wait for it, the window answering meanwhile; whether it worked."""
        return self.start_bundle_export(path) and self.wait_for_history_file()

    def _bundle_exported(self, path: str, count: int, size: object, error: object) -> bool:
        if self._export_failed(path, error, InputError, "write the repro bundle"):
            return False
        kb = f" ({int(size) / 1000:,.0f} kB)" if isinstance(size, int) else ""
        self.status.set_status(f"Wrote a repro bundle of {count} turn{'s' if count != 1 else ''} to {path}{kb}: "
                               f"`parley replay {Path(path).name}` repeats it, byte for byte, on another machine.")
        return True

    def start_export(self, path: str) -> bool:
        """Write the conversation to ``path`` on a thread of its own (the window keeps answering);
        ``done`` says how it went. False when an Import or Export is still running."""
        saved = self.view.saved  # replaced, never changed, by later turns: safe to write from there
        count = len(saved.history.turns)
        return self._start_file_job(lambda: save_history(saved, path), f"Exporting {count} turns to {path}\u2026",
                                    lambda _result, error: self._exported(path, count, error))

    def start_import(self, path: str) -> bool:
        """Read ``path`` on a thread of its own (the window keeps answering), then continue from it.
        A bad file is reported and the conversation stays as it was; ``done`` says how it went. False
        when an Import or Export is still running."""
        return self._start_file_job(lambda: load_history(path), f"Reading {Path(path).name}\u2026",
                                    lambda saved, error: self._imported(path, saved, error))

    def export_to(self, path: str) -> bool:
        """``start_export`` and wait for it, the window answering meanwhile; whether it worked."""
        return self.start_export(path) and self.wait_for_history_file()

    def import_from(self, path: str) -> bool:
        """``start_import`` and wait for the file to be read, the window answering meanwhile;
        whether it was (the conversation then changes as ``history_changed`` says)."""
        return self.start_import(path) and self.wait_for_history_file()

    def wait_for_history_file(self) -> bool:
        """Process events until the running Import or Export ends; whether it worked."""
        outcome: list[bool] = []
        loop = QEventLoop(self)
        done = self.done.connect(lambda ok: (outcome.append(ok), loop.quit()))
        try:
            if self.file_job is not None:
                loop.exec()
        finally:
            self.done.disconnect(done)
        return bool(outcome and outcome[0])

    def _start_file_job(self, work, status: str, then) -> bool:
        if self.file_job is not None:
            self.status.show_error("An Import or Export is still running; wait for it to finish.")
            return False
        # Quitting waits for it to the end: a file half written is not abandoned.
        job = ThreadJob(work, name="parley-history-file", exit_wait_ms=None, parent=self)
        job.finished.connect(lambda: self._file_job_finished(job, then, job.result, job.error))
        self.file_job = job
        self.enable_buttons()
        self.status.set_status(status)
        job.start()
        return True

    def _file_job_finished(self, job: ThreadJob, then, result: object, error: object) -> None:
        self.file_job = None
        job.deleteLater()
        self.enable_buttons()
        ok = then(result, error)
        self.done.emit(ok)

    def enable_buttons(self) -> None:
        idle = self.file_job is None
        self.export_button.setEnabled(idle and not self.view.busy)
        # a bundle replays on the embedded engine; a followed conversation ran elsewhere
        self.export_bundle_action.setEnabled(idle and not self.view.busy and not self.read_only())
        self.import_button.setEnabled(idle and not self.view.busy and not self.read_only())

    def _export_failed(self, path: str, error: object, refused: type[InputError], what: str) -> bool:
        """Say why an export to ``path`` failed (``refused``: problems found in what was to be written)."""
        if isinstance(error, refused):
            self.status.show_error(f"Could not {what}; the conversation is unchanged.\n" + "\n".join(
                str(p) for p in error.problems[:5]))
        elif isinstance(error, OSError):
            self.status.show_error(f"Could not write {path}: {error.strerror or error}. "
                                   "The conversation is unchanged.")
        elif error is not None:
            self.status.show_error(f"Could not {what} to {path}: {error}. The conversation is unchanged.")
        return error is not None

    def _exported(self, path: str, count: int, error: object) -> bool:
        if self._export_failed(path, error, HistoryError, "export"):
            return False
        self.status.set_status(f"Exported {count} turns to {path}")
        return True

    def _imported(self, path: str, saved: object, error: object) -> bool:
        name = Path(path).name
        if isinstance(error, InputError):
            self.status.show_error(f"Could not import {name}; nothing changed.\n" + "\n".join(
                str(p) for p in error.problems[:5]))
            return False
        if error is not None or not isinstance(saved, SavedDialog):
            self.status.show_error(f"Could not import {name}: {error}; nothing changed.")
            return False
        if not self.actions.import_history(saved, path):
            self.status.show_error("Wait for the turn to finish before importing.")
            return False
        self.status.set_status(f"Imported {len(saved.history.turns)} turns from {path}")
        return True
