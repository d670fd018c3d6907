"""The window's Models menu (Download Sample Model…, Open Models Folder) and the sample model download
as the window shows it: a busy bar and messages in the status bar, and a message box when a download
asked for from the menu fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QMenu, QMenuBar, QMessageBox, QProgressBar

from editor.services.sample_model_download import (
    SAMPLE_MODEL_SIZE,
    DownloadReactions,
    open_models_folder,
    with_copy_hint,
)

if TYPE_CHECKING:
    from editor.window.main_window import MainWindow


class ModelsMenu(QObject):
    """``model_ready`` runs once the sample model is in place (the model names that were missing resolve)."""

    def __init__(self, window: MainWindow, model_ready: Callable[[], None]) -> None:
        super().__init__(window)
        self.window = window
        self.download = window.download
        self.model_ready = model_ready
        self.download_sample_action = window._action(
            "&Download Sample Model\u2026", self.download_sample_model,
            tip=f"Download the sample model ({SAMPLE_MODEL_SIZE}) into the models folder")
        self.open_models_action = window._action("&Open Models Folder", open_models_folder,
                                                 tip="Show the folder the editor looks for model files in")
        self.menu: QMenu | None = None
        self.download_progress = QProgressBar(window)
        self.download_progress.setRange(0, 0)  # pip reports nothing until it is done: a busy bar
        self.download_progress.setMaximumWidth(120)
        self.download_progress.setMaximumHeight(14)
        self.download_progress.setToolTip("Downloading the sample model")
        self.download_progress.hide()
        self._download_from_menu = False
        self.download_reactions = r = DownloadReactions(self.download, self.download_progress, parent=self)
        r.running.connect(self._download_started)
        r.step.connect(self._download_progress)
        r.done.connect(self._download_finished)
        r.failed.connect(self._download_failed)
        r.refused.connect(self._download_refused)
        self.download.busy_changed.connect(self._download_busy)

    def add_to(self, bar: QMenuBar) -> QMenu:
        self.menu = bar.addMenu("&Models")
        self.menu.addActions([self.download_sample_action, self.open_models_action])
        return self.menu

    def download_sample_model(self) -> bool:
        """Models > Download Sample Model: fetch it on a background thread; the status bar shows how it goes."""
        if not self.download_reactions.ask():
            return False
        self._download_from_menu = True
        return True

    def _message(self, text: str, ms: int = 0) -> None:
        self.window.statusBar().showMessage(text, ms)

    def _download_refused(self, sentence: str) -> None:
        self._message(sentence, 5000)

    def _download_busy(self, busy: bool) -> None:
        self.download_sample_action.setEnabled(not busy)

    def _download_started(self) -> None:
        self._message(f"Downloading the sample model ({SAMPLE_MODEL_SIZE})\u2026")

    def _download_progress(self, message: str) -> None:
        self._message(f"Sample model: {message}")

    def _download_finished(self, path: str) -> None:
        self._download_from_menu = False
        self._message(f"The sample model is ready: {path}", 10_000)
        self.model_ready()

    def _download_failed(self, message: str, cancelled: bool) -> None:
        from_menu, self._download_from_menu = self._download_from_menu, False
        self._message("The sample model download stopped." if cancelled
                      else "The sample model could not be downloaded.", 10_000)
        if cancelled or not from_menu:
            return  # the Conversation dock shows its own offer's errors
        box = QMessageBox(QMessageBox.Icon.Warning, "Sample model not downloaded",
                          "The sample model could not be downloaded.", QMessageBox.StandardButton.Ok, self.window)
        box.setInformativeText(with_copy_hint(message))
        box.setObjectName("download_failed")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        open_button = box.addButton("Open Models Folder", QMessageBox.ButtonRole.ActionRole)
        open_button.clicked.connect(lambda _c=False: open_models_folder())
        box.open()  # not exec(): the window stays live behind it
