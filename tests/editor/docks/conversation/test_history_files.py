"""Import and Export in the Conversation dock run on a thread of their own: the window keeps
answering while a large history is read or written, and every outcome (a broken file, an error
no one expected) is shown, never lost on the thread."""

from __future__ import annotations

import json
import threading

import pytest
from PySide6.QtCore import QTimer

from editor.docks.conversation import history_files as dock_module
from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.dialogue.dialog_file import load_history, save_history
from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Turn
from runtime.dialogue.tree import AgentState, ConversationTree
from runtime.resources import examples_dir

ALTERNATIVES = 20_000
WAIT_MS = 120_000  # generous: the machine may be busy; nothing waits this long when all is well


@pytest.fixture()
def dock(window):
    window.set_asset(load_asset(examples_dir() / "chat.json"))
    window.conversation.use_backend(ScriptedBackend)
    return window.conversation_dock


def large_history(path, alternatives: int = ALTERNATIVES) -> SavedDialog:
    """One first turn and ``alternatives`` alternatives of the second, for the example's node."""
    tree = ConversationTree()
    first = tree.add(None, Turn("hello", [Reply("reply", "hi")]), AgentState((), {"reply": 0}))
    last = first
    for i in range(alternatives):
        last = tree.add(first, Turn("and now?", [Reply("reply", f"alternative {i}")]), AgentState((), {"reply": 1}))
    tree.select(last)
    saved = SavedDialog(DialogHistory(tree.turns()), {"reply": 1}, tree=tree)
    save_history(saved, path)
    return saved


class _UiAnswered:
    """Set by a zero-interval timer on the UI thread: the work on the file thread waits for it, so
    the file is read (or written) only once the UI thread has handled events while the job ran.
    Work on the UI thread would wait for it in vain (and fail after a bound, not hang)."""

    def __init__(self, dock) -> None:
        self.event = threading.Event()
        self.ticks_while_running = 0
        self.timer = QTimer()
        self.timer.setInterval(0)
        self.timer.timeout.connect(lambda: self._tick(dock))

    def _tick(self, dock) -> None:
        if dock.file_job is not None:
            self.ticks_while_running += 1
            self.event.set()

    def wait(self) -> None:
        assert self.event.wait(timeout=WAIT_MS / 1000), "the UI thread handled no event while the job ran"


def test_a_large_import_runs_while_the_ui_thread_keeps_handling_events(dock, qtbot, tmp_path, monkeypatch):
    path = tmp_path / "large.json"
    saved = large_history(path)
    answered = _UiAnswered(dock)

    def load_once_the_ui_answered(p):
        answered.wait()
        return load_history(p)

    monkeypatch.setattr(dock_module, "load_history", load_once_the_ui_answered)
    answered.timer.start()
    try:
        with qtbot.waitSignal(dock.history_file_done, timeout=WAIT_MS) as done:
            assert dock.start_import(str(path))
            assert dock.file_job is not None and not dock.import_button.isEnabled() and not dock.export_button.isEnabled()
            assert "Reading large.json" in dock.status.text()
    finally:
        answered.timer.stop()
    assert done.args == [True], dock.status.text()
    assert answered.ticks_while_running > 0
    assert dock.file_job is None and dock.import_button.isEnabled()
    conversation = dock.actions
    qtbot.waitUntil(lambda: conversation.saved.tree is not None and len(conversation.saved.tree) == ALTERNATIVES + 1,
                    timeout=WAIT_MS)
    assert conversation.saved.history.turns == saved.history.turns
    assert f"Imported 2 turns from {path}" in dock.status.text()


def test_a_large_export_runs_while_the_ui_thread_keeps_handling_events(dock, qtbot, tmp_path, monkeypatch):
    source = tmp_path / "large.json"
    large_history(source)
    assert dock.import_from(str(source))
    conversation = dock.actions
    qtbot.waitUntil(lambda: conversation.saved.tree is not None and len(conversation.saved.tree) == ALTERNATIVES + 1,
                    timeout=WAIT_MS)
    answered = _UiAnswered(dock)

    def save_once_the_ui_answered(saved, p):
        answered.wait()
        save_history(saved, p)

    monkeypatch.setattr(dock_module, "save_history", save_once_the_ui_answered)
    out = tmp_path / "out.json"
    answered.timer.start()
    try:
        with qtbot.waitSignal(dock.history_file_done, timeout=WAIT_MS) as done:
            assert dock.start_export(str(out))
            assert not dock.export_button.isEnabled()
    finally:
        answered.timer.stop()
    assert done.args == [True], dock.status.text()
    assert answered.ticks_while_running > 0
    assert load_history(out) == conversation.saved
    assert f"Exported 2 turns to {out}" in dock.status.text()


def test_one_file_job_at_a_time(dock, qtbot, tmp_path):
    path = tmp_path / "large.json"
    large_history(path, 2_000)
    with qtbot.waitSignal(dock.history_file_done, timeout=WAIT_MS):
        assert dock.start_import(str(path))
        assert not dock.start_export(str(tmp_path / "out.json"))
        assert "still running" in dock.status.text()


def test_a_broken_tree_is_shown_with_the_field_and_nothing_changes(dock, tmp_path):
    """Issue 20, item 12: a start state naming a summary past the end showed nothing (the error
    was raised in a slot); now it is a located error in the dock."""
    bad = tmp_path / "bad.json"
    raw = {"format": "parley-dialog", "version": 3, "start": {"summaries": [4]}, "turns": []}
    bad.write_text(json.dumps(raw), encoding="utf-8")
    before = dock.view.saved
    assert not dock.import_from(str(bad))
    assert "Could not import bad.json; nothing changed." in dock.status.text()
    assert f"{bad}:start.summaries.0: error: names summary 4" in dock.status.text()
    assert dock.view.saved is before


def test_an_error_no_one_expected_is_shown_not_lost_on_the_thread(dock, tmp_path, monkeypatch):
    def broken(_path):
        raise RuntimeError("the disk caught fire")

    monkeypatch.setattr(dock_module, "load_history", broken)
    assert not dock.import_from(str(tmp_path / "any.json"))
    assert "Could not import any.json: the disk caught fire; nothing changed." in dock.status.text()
    assert dock.import_button.isEnabled()


def test_a_history_too_large_to_read_back_is_not_exported(dock, tmp_path, monkeypatch):
    from runtime.dialogue import dialog_file

    out = tmp_path / "out.json"
    out.write_text("the old file", encoding="utf-8")
    monkeypatch.setattr(dialog_file, "MAX_HISTORY_BYTES", 10)
    assert not dock.export_to(str(out))
    assert "Could not export" in dock.status.text() and "cannot be read back" in dock.status.text()
    assert out.read_text(encoding="utf-8") == "the old file"
