"""A native crash loses nothing: right before each turn the window's graph, its test conversation and
the player's line are on disk, the crash report says what crashed, and the next start gives them back."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from editor import settings as app_settings
from editor.services import recovery as recovery_module
from editor.services.recovery import CONVERSATION_SUFFIX, CRASH_NAME, SUFFIX, RecoveryDialog, left_behind
from runtime.asset.file import asset_to_dict, save_asset
from runtime.asset.model import Asset, new_node
from runtime.backends.scripted import ScriptedBackend
from runtime.crashes import CRASH_SUFFIX, RUNNING_SUFFIX, CrashWatch
from runtime.dialogue.dialog_file import save_history
from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Turn
from tests.editor.live import example, sample_model, talk

ROOT = Path(__file__).resolve().parents[2]
DEAD = 999_999_999  # a process id no process has
TURN_MS = 20_000


def _agent() -> Asset:
    return Asset(name="Mira", nodes=[new_node("Generate", "reply")], start_node="reply", default_model="Mira-7B.gguf")


def _left_by_a_dead_session(folder: Path, record: Path) -> Path:
    """Copies of ``record`` and its conversation as a session that is no longer running left them."""
    dead = folder / f"{DEAD}-copy{SUFFIX}"
    shutil.copy(record, dead)
    conversation = record.with_name(record.name.replace(SUFFIX, CONVERSATION_SUFFIX))
    if conversation.exists():
        shutil.copy(conversation, dead.with_name(dead.name.replace(SUFFIX, CONVERSATION_SUFFIX)))
    return dead


@pytest.fixture
def held_turns():
    """A scripted backend whose replies wait until ``release`` is set: a turn can be looked at mid-way."""
    release = threading.Event()

    def reply(_key, _request) -> str:
        release.wait(TURN_MS / 1000)
        return "Welcome, traveller."

    yield release, (lambda: ScriptedBackend(reply))
    release.set()


def test_a_turn_is_on_disk_before_it_starts_and_kept_current_after_it(window, qtbot, tmp_path, held_turns):
    release, backend = held_turns
    release.set()
    path = tmp_path / "mira.json"
    save_asset(_agent(), str(path))
    assert window.open_path(str(path))
    conversation = window.conversation
    conversation.worker._make_backend = backend
    folder = app_settings.recovery_dir()
    assert not window.autosave.file.exists(), "an unmodified asset with no conversation keeps nothing"
    talk(qtbot, conversation, "Hello", timeout=TURN_MS)
    # The turn ended: the conversation is kept, the asset unmodified (its file named), no line in flight
    record = json.loads(window.autosave.file.read_text(encoding="utf-8"))
    assert record["original_path"] == str(path) and record["modified"] is False
    assert record["conversation"] == {"turns": 1, "line": ""}

    release.clear()
    assert conversation.say("Any rooms free?")  # the turn now waits in the backend
    dead = _left_by_a_dead_session(folder, window.autosave.file)
    (found,) = [r for r in left_behind(folder) if r.file == dead]
    assert found.line == "Any rooms free?" and found.original_path == str(path) and not found.modified
    assert [t.player for t in found.conversation.history.turns] == ["Hello"]
    assert found.crash is None  # no crash report: this copy's "process" never had a watch
    found.forget()
    assert not dead.exists() and not found.conversation_file.exists()

    release.set()
    qtbot.waitUntil(lambda: not conversation.busy, timeout=TURN_MS)
    qtbot.waitUntil(lambda: len(conversation.saved.history.turns) == 2, timeout=TURN_MS)
    qtbot.waitUntil(lambda: json.loads(window.autosave.file.read_text(encoding="utf-8"))["conversation"]
                    == {"turns": 2, "line": ""}, timeout=TURN_MS)


def test_a_clean_close_leaves_nothing_behind(make_window, qtbot, held_turns):
    release, backend = held_turns
    release.set()
    window = make_window()
    window.set_asset(_agent())
    window.conversation.worker._make_backend = backend
    talk(qtbot, window.conversation, "Hello", timeout=TURN_MS)
    window.canvas.add_node("Generate", (200, 0))
    assert window.autosave.save_now() or window.autosave.file.exists()
    window.document.undo_stack.setClean()
    window.close()
    assert list(app_settings.recovery_dir().iterdir()) == []


def test_saving_the_asset_keeps_the_conversation(window, qtbot, tmp_path, held_turns):
    release, backend = held_turns
    release.set()
    window.set_asset(_agent())
    window.conversation.worker._make_backend = backend
    talk(qtbot, window.conversation, "Hello", timeout=TURN_MS)
    assert window.save_to(str(tmp_path / "mira.json"))
    record = json.loads(window.autosave.file.read_text(encoding="utf-8"))
    assert record["modified"] is False and record["original_path"] == str((tmp_path / "mira.json").resolve())
    assert window.autosave.conversation_file.exists()


def test_the_running_turn_is_noted_at_its_node(make_window, qtbot, tmp_path, held_turns):
    release, backend = held_turns
    watch = CrashWatch(tmp_path / "reports", CRASH_NAME)
    assert watch.start()
    try:
        window = make_window(crash_watch=watch)
        path = tmp_path / "mira.json"
        save_asset(_agent(), str(path))
        assert window.open_path(str(path))
        window.conversation.worker._make_backend = backend
        with qtbot.waitSignal(window.conversation.event, timeout=TURN_MS,
                              check_params_cb=lambda event: event.kind == "node_started"):
            assert window.conversation.say("Hello")
        assert watch.running_file.read_text(encoding="utf-8") == "node `reply` ran turn 1 of mira.json on Mira-7B.gguf\n"
        release.set()
        qtbot.waitUntil(lambda: not window.conversation.busy, timeout=TURN_MS)
        assert not watch.running_file.exists(), "a turn that ended is no longer noted"
    finally:
        watch.stop()
    assert not (tmp_path / "reports" / watch.file.name).exists()


FAKE_REPORT = """Fatal Python error: Segmentation fault

Thread 0x00007f0fc0a2c6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f0fc6a2cb80 (most recent call first):
  File "/opt/parley/runtime/backends/llama.py", line 696 in _decode
  File "/opt/parley/runtime/backends/llama.py", line 665 in _hold
  File "/opt/parley/runtime/agent.py", line 420 in _run_node
"""


def _crash_left(folder: Path, note: str, report: str = FAKE_REPORT) -> None:
    (folder / f"{CRASH_NAME}-{DEAD}{CRASH_SUFFIX}").write_text(report, encoding="utf-8")
    (folder / f"{CRASH_NAME}-{DEAD}{RUNNING_SUFFIX}").write_text(note + "\n", encoding="utf-8")


def _session_left(folder: Path, asset: Asset, original: str, turns: list[str], line: str) -> None:
    saved = SavedDialog(history=DialogHistory(turns=[Turn(t, [Reply("reply", f"Reply to {t}")]) for t in turns]))
    record = {"original_path": original, "saved_at": 1.7e9, "modified": True, "asset": asset_to_dict(asset),
              "conversation": {"turns": len(turns), "line": line}}
    (folder / f"{DEAD}-abc{SUFFIX}").write_text(json.dumps(record), encoding="utf-8")
    save_history(saved, folder / f"{DEAD}-abc{CONVERSATION_SUFFIX}")


def test_opening_a_recovery_gives_back_the_graph_the_conversation_and_the_line(window, qtbot, monkeypatch):
    folder = app_settings.recovery_dir()
    note = "node `reply` ran turn 3 of chat.json on SmolLM2-135M-Instruct.Q4_1.gguf"
    _session_left(folder, _agent(), "/games/chat.json", ["Hello", "A room, please"], "How much for the night?")
    _crash_left(folder, note)
    shown: list[RecoveryDialog] = []

    def open_it(dialog: RecoveryDialog) -> int:
        shown.append(dialog)
        dialog.choose(RecoveryDialog.OPEN)
        return 1

    monkeypatch.setattr(RecoveryDialog, "exec", open_it)
    window.conversation.worker._make_backend = ScriptedBackend
    assert window.offer_recovery()
    (dialog,) = shown
    assert dialog.headline.text() == f"Parley Studio crashed (Segmentation fault) in llama.cpp while {note}."
    assert "runtime/backends/llama.py, line 696, in _decode" in dialog.report.toPlainText()
    assert window.document.asset.node_ids() == ["reply"] and window.document.path == "/games/chat.json"
    assert window.isWindowModified()
    qtbot.waitUntil(lambda: [t.player for t in window.conversation.saved.history.turns] == ["Hello", "A room, please"],
                    timeout=TURN_MS)
    dock = window.conversation_dock
    assert dock.line.text() == "How much for the night?"
    assert dock.status.text().startswith("Parley Studio crashed (Segmentation fault) in llama.cpp")
    assert "press Enter to send it again" in dock.status.text()
    left = sorted(p.name for p in folder.iterdir())
    assert all(name.startswith(f"{os.getpid()}-") for name in left), left  # the dead session's files are gone
    qtbot.waitUntil(lambda: window.autosave.conversation_file.exists(), timeout=TURN_MS)


def test_discarding_forgets_the_crash_and_what_it_kept(window, monkeypatch):
    folder = app_settings.recovery_dir()
    _session_left(folder, _agent(), "", ["Hello"], "")
    _crash_left(folder, "node `reply` ran turn 2 of an untitled asset")
    monkeypatch.setattr(RecoveryDialog, "exec", lambda dialog: dialog.choose(RecoveryDialog.DISCARD_ALL))
    assert window.offer_recovery() is False
    assert list(folder.iterdir()) == []


def test_a_crash_that_left_nothing_unsaved_is_said_in_the_status_bar(window):
    folder = app_settings.recovery_dir()
    _crash_left(folder, "turn 1 of chat.json loaded SmolLM2-135M-Instruct.Q4_1.gguf")
    assert window.offer_recovery() is False
    assert window.statusBar().currentMessage() == (
        "Parley Studio crashed (Segmentation fault) in llama.cpp while turn 1 of chat.json loaded "
        "SmolLM2-135M-Instruct.Q4_1.gguf last time; nothing unsaved was lost.")
    assert list(folder.iterdir()) == []


def test_a_killed_session_says_it_ended_without_shutting_down(window, monkeypatch):
    folder = app_settings.recovery_dir()
    _session_left(folder, _agent(), "", ["Hello"], "Again")
    _crash_left(folder, "node `reply` ran turn 2 of an untitled asset", report="")
    monkeypatch.setattr(RecoveryDialog, "exec", lambda dialog: dialog.choose(RecoveryDialog.KEEP))
    (found,) = left_behind(folder)
    assert recovery_module.what_crashed(found) == (
        "Parley Studio ended without shutting down while node `reply` ran turn 2 of an untitled asset.")
    assert window.offer_recovery() is False
    assert len(list(folder.iterdir())) == 4, "Keep for Later keeps the files and the crash report"


# --- a real native crash in llama.cpp ---------------------------------------------------------------

# The editor as parley-studio starts it (editor.app.main) on ASSET: two lines typed into the
# Conversation dock; the second turn hands llama.cpp a NULL context, a real SIGSEGV inside it.
CRASHING_EDITOR = """
import sys
import editor  # first, as when the app starts (it loads pydantic before PySide6's import hook)
from runtime.backends.llama import LlamaNodeSession

generate = LlamaNodeSession.generate
calls = []

def crashing_generate(self, *args, **kwargs):
    calls.append(self.key)
    if len(calls) == 2:
        self._context.ctx = None
    return generate(self, *args, **kwargs)

LlamaNodeSession.generate = crashing_generate

from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

app = QApplication(sys.argv[:1])
from editor.app import main
from editor.window.main_window import MainWindow

LINES = ["Good evening! Is there a room free?", "What news from the road?"]

def type_lines():
    window = next(w for w in app.topLevelWidgets() if isinstance(w, MainWindow))
    dock = window.conversation_dock
    lines = iter(LINES)

    def type_next(*_ignored):
        line = next(lines, None)
        if line is not None:
            QTest.keyClicks(dock.line, line)
            QTest.keyClick(dock.line, Qt.Key.Key_Return)

    window.conversation.turn_finished.connect(type_next)
    window.conversation.turn_failed.connect(lambda failure: sys.exit(f"a turn failed: {failure.message}"))
    type_next()

QTimer.singleShot(0, type_lines)
sys.exit(main([sys.argv[1]]))
"""


@pytest.mark.model
def test_a_native_crash_in_llama_cpp_gives_back_the_graph_and_the_conversation(
        make_window, qtbot, tmp_path, monkeypatch, private_settings):
    model = sample_model()
    asset_file = tmp_path / "chat.json"
    save_asset(example("chat", model, reply={"max_tokens": 16}), str(asset_file))
    folder = app_settings.recovery_dir()
    crashed = subprocess.run([sys.executable, "-c", CRASHING_EDITOR, str(asset_file)], check=False, cwd=ROOT,
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert crashed.returncode == -signal.SIGSEGV, crashed.stderr[-3000:]
    assert "Fatal Python error" not in crashed.stderr, "the report goes to the crash file, not to stderr"

    shown: list[RecoveryDialog] = []

    def look_then_open(dialog: RecoveryDialog) -> int:
        dialog.show()
        dialog.report_button.setChecked(True)
        qtbot.waitExposed(dialog)
        dialog.grab().save(str(tmp_path / "recovery_dialog.png"))
        if os.environ.get("PARLEY_SHOTS"):  # a person looks at it: PARLEY_SHOTS=/tmp
            dialog.grab().save(os.path.join(os.environ["PARLEY_SHOTS"], "recovery_dialog.png"))
        shown.append(dialog)
        dialog.choose(RecoveryDialog.OPEN)
        return 1

    monkeypatch.setattr(RecoveryDialog, "exec", look_then_open)
    window = make_window()
    window.conversation.worker._make_backend = ScriptedBackend  # the graph and history come back; no model needed
    assert window.offer_recovery()
    (dialog,) = shown
    what = f"node `reply` ran turn 2 of chat.json on {Path(model).name}"
    assert dialog.headline.text() == f"Parley Studio crashed (Segmentation fault) in llama.cpp while {what}."
    report = dialog.report.toPlainText()
    assert "in llama.cpp (runtime/backends/llama.py, line " in report and "Current thread" in report
    assert window.document.path == str(asset_file.resolve()) and not window.isWindowModified()
    assert window.document.asset == example("chat", model, reply={"max_tokens": 16})
    dock = window.conversation_dock
    assert dock.line.text() == "What news from the road?"
    qtbot.waitUntil(lambda: [t.player for t in window.conversation.saved.history.turns]
                    == ["Good evening! Is there a room free?"], timeout=TURN_MS)
    assert window.conversation.saved.history.turns[0].entries[0].text.strip(), "Mira's first reply is back"
    assert not list(folder.glob(f"{CRASH_NAME}-*")), "told once: the crash report is forgotten"


def test_a_large_conversation_is_written_off_the_ui_thread(window, qtbot, monkeypatch, held_turns):
    release, backend = held_turns
    release.set()
    monkeypatch.setattr(recovery_module, "LARGE_CONVERSATION_TURNS", 0)
    written_on: list[str] = []
    save = recovery_module.save_history

    def recording_save(saved, path, *args):
        written_on.append(threading.current_thread().name)
        save(saved, path, *args)

    monkeypatch.setattr(recovery_module, "save_history", recording_save)
    window.set_asset(_agent())
    window.conversation.worker._make_backend = backend
    talk(qtbot, window.conversation, "Hello", timeout=TURN_MS)
    qtbot.waitUntil(lambda: window.autosave.conversation_file.exists(), timeout=TURN_MS)
    assert written_on and set(written_on) == {"parley-recovery-conversation"}
    window.autosave.stop()  # waits for the writer, then deletes what it wrote
    assert list(app_settings.recovery_dir().iterdir()) == []
