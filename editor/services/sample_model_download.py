"""Downloading the sample model from inside the editor, and opening the models folder.

The desktop app has no ``parley`` command and no pip, so the editor fetches the sample
model itself (``runtime.models.folder.ensure_sample_model``) when the designer asks: from the
Models menu, or from the offer the Conversation dock makes when a turn fails because the
sample model is missing. It never downloads on its own.

The download runs as a ``ThreadJob``; ``SampleModelDownload`` lives on the UI thread
and re-emits what the thread reports, so widgets only ever see signals from the UI thread.
Closing the window stops the download (pip is killed, or the next block is not read) and
waits for the thread.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from PySide6.QtCore import QObject, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QWidget

from editor.threads.thread_service import OneRunService
from runtime.asset.model import Asset
from runtime.models import folder as models
from runtime.models.folder import SAMPLE_MODEL, FetchCancelled, ModelFileError

log = logging.getLogger("parley.editor")

# What the offer says the download weighs (the GGUF; the wheel it comes in is a little larger).
SAMPLE_MODEL_SIZE = "94 MB"


def open_models_folder() -> Path:
    """Show the models folder in the platform's file manager (made first, so there is something to open)."""
    folder = models.models_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("could not create the models folder %s: %s", folder, exc)
    QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
    return folder


def missing_models(asset: Asset, asset_dir: str | Path | None) -> list[str]:
    """The model names ``asset`` uses that resolve to no file on this machine, in asset order."""
    names = dict.fromkeys(asset.model_for(n) for n in asset.nodes if n.uses_model() and asset.model_for(n))
    if asset.default_model:
        names.setdefault(asset.default_model)
    missing = []
    for name in names:
        try:
            models.resolve_model(name, asset_dir)
        except ModelFileError:
            missing.append(name)
    return missing


def with_copy_hint(message: str) -> str:
    """A failed download's message, ending with how to put the file in place by hand (once)."""
    folder = str(models.models_dir())
    if folder in message:  # the runtime's message already says where to copy it
        return message
    return f"{message}\nOr copy {SAMPLE_MODEL.file_name} into {folder} yourself."


def is_sample_model(name: str) -> bool:
    return Path(name).name == SAMPLE_MODEL.file_name


# The downloads running in this process (ids of SampleModelDownload objects): at most one.
_running: set[int] = set()


class SampleModelDownload(OneRunService):
    """The window's sample model download (one per window, shared by the Models menu and the
    Conversation dock). Lives on the UI thread; all its signals are emitted there."""

    started = Signal()
    progress = Signal(str)  # a line of progress from the runtime ("  40 of 95 MB")
    finished = Signal(str)  # the model's path
    failed = Signal(str, bool)  # message (what went wrong and what to do), cancelled

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("parley-sample-model-download", parent)
        self.last_message = ""

    def start(self) -> bool:
        """Start downloading the sample model; False when a download is running (here or in another
        window: two would write the same file) or the window closed."""
        if self.busy or self.closed or _running:
            return False
        self._cancel = threading.Event()
        # A fresh thread per download: it ends when the download does, so nothing idles in the background.
        # Through the module, so the one place that knows how to fetch is the runtime's.
        cancel = self._cancel
        job = self._new_job(lambda: models.ensure_sample_model(job.report, cancel))
        job.yielded.connect(self._on_progress)
        job.returned.connect(self._on_finished)
        job.errored.connect(self._on_failed)
        self.last_message = "Starting the download\u2026"
        self.started.emit()
        job.start()
        return True

    def _busy_now(self, busy: bool) -> None:
        if busy:
            _running.add(id(self))
        else:
            _running.discard(id(self))

    # After shutdown the window is gone: what the ending thread still reports goes nowhere.

    def _on_progress(self, message: str) -> None:
        if self.closed:
            return
        self.last_message = message.strip()
        self.progress.emit(self.last_message)

    def _on_finished(self, path: Path) -> None:
        if self.closed:
            return
        self._end()
        self.finished.emit(str(path))

    def _on_failed(self, exc: Exception) -> None:
        if self.closed:
            return
        if isinstance(exc, ModelFileError):  # FetchCancelled is one: the download was stopped
            message = str(exc)
        else:  # anything else still ends the download with a message
            log.error("the sample model download failed", exc_info=exc)
            message = f"{type(exc).__name__}: {exc}"
        self._end()
        self.failed.emit(message, isinstance(exc, FetchCancelled))



ALREADY_DOWNLOADING = "The sample model is already being downloaded."


class DownloadReactions(QObject):
    """How one place follows the window's sample model download, written once for both places that
    show it: the window (its status bar and Models menu) and the Conversation dock (its missing-model
    offer).

    The place gives its busy ``bar`` and, if it shows the download only at times, the widget that
    shows it (``shown_in``: the dock's offer). While that is shown, the bar runs from the download's
    start to its end and the place hears of each step: ``running`` (at the start, or when it begins to
    show one under way: ``show_running``), ``step`` (a progress line), ``done`` (the model's path) and
    ``failed``. ``ask`` starts a download, or says through ``refused`` why not. Signals, not callbacks:
    this object holds no reference to its place, so neither keeps the other alive."""

    running = Signal()
    step = Signal(str)  # a line of progress ("  40 of 95 MB")
    done = Signal(str)  # the model's path
    failed = Signal(str, bool)  # message, cancelled
    refused = Signal(str)  # the sentence to say when a download is asked for while one runs

    def __init__(self, download: SampleModelDownload, bar: QWidget, shown_in: QWidget | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.download = download
        self.bar = bar
        self.shown_in = shown_in
        download.started.connect(self.show_running)
        download.progress.connect(self._on_progress)
        download.finished.connect(self._on_finished)
        download.failed.connect(self._on_failed)

    def watching(self) -> bool:
        return self.shown_in is None or not self.shown_in.isHidden()

    def ask(self) -> bool:
        """Start the download; False (and ``refused``) when one is running already."""
        if self.download.start():
            return True
        self.refused.emit(ALREADY_DOWNLOADING)
        return False

    def show_running(self) -> None:
        """Show the download as running (also when the place begins to show one already under way)."""
        if self.watching():
            self.bar.show()
            self.running.emit()

    def _on_progress(self, message: str) -> None:
        if self.watching():
            self.step.emit(message)

    def _on_finished(self, path: str) -> None:
        self.bar.hide()
        if self.watching():
            self.done.emit(path)

    def _on_failed(self, message: str, cancelled: bool) -> None:
        self.bar.hide()
        if self.watching():
            self.failed.emit(message, cancelled)
