"""The backend picker, the Backends dialog, and which backend each turn ran on (no model needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from editor.dialogs.backends import BackendsDialog
from editor.docks.vram_estimator.dock import VramEstimatorDock
from editor.services.backend_choice import EMBEDDED_LABEL, SCRIPTED_TITLE, SETTINGS_KEY, BackendChoice
from editor.settings import app_settings
from runtime.asset.model import Asset
from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.backends.profiles import load_profiles
from runtime.backends.scripted import ScriptedBackend
from tests.servers import free_port

SHOTS = Path("/tmp/parley-backends-shots")

PROFILES = {"version": 1, "backends": [
    {"name": "gpu-box", "kind": "llama-server", "url": "http://10.0.0.5:8080"},
    {"name": "vllm", "kind": "openai", "url": "http://10.0.0.6:8000/v1", "model": "Qwen/Qwen2.5-7B-Instruct",
     "api_key_env": "PARLEY_TEST_VLLM_KEY"},
]}

ASSET = {
    "version": 1, "name": "hello", "default_model": "m.gguf", "start_node": "hello",
    "nodes": [{"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet."}],
}


@pytest.fixture
def profiles_file() -> Path:
    path = Path(os.environ["PARLEY_BACKENDS"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(PROFILES), encoding="utf-8")
    return path


def shot(widget, name: str) -> Path:
    from PySide6.QtWidgets import QApplication

    for _ in range(3):
        QApplication.processEvents()  # pending layouts first
    SHOTS.mkdir(parents=True, exist_ok=True)
    out = SHOTS / name
    assert widget.grab().save(str(out))
    return out


def combo_entries(combo) -> list[tuple[str, str]]:
    return [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())]


# --- the picker -----------------------------------------------------------------------------------


def test_the_picker_lists_profiles_and_the_choice_is_remembered(profiles_file, make_window, qtbot, monkeypatch):
    monkeypatch.setenv("PARLEY_TEST_VLLM_KEY", "sk-secret")
    window = make_window()
    dock = window.conversation_dock
    combo = dock.backend_combo
    assert combo_entries(combo) == [("Embedded (this computer)", "embedded"), (SCRIPTED_TITLE, "scripted"),
                                    ("gpu-box", "gpu-box"), ("vllm", "vllm")]
    assert combo.currentData() == "embedded" and dock.backend_label.text() == EMBEDDED_LABEL
    menu = [(a.text(), a.isChecked()) for a in window.backend_menu.actions() if a.isCheckable()]
    assert menu == [("Embedded (this computer)", True), (SCRIPTED_TITLE, False), ("gpu-box", False), ("vllm", False)]
    assert window.conversation.worker._make_backend is None, "embedded: the worker's own default"

    gpu = combo.findData("gpu-box")
    combo.setCurrentIndex(gpu)
    combo.activated.emit(gpu)
    assert window.backends.spec == "gpu-box"
    assert app_settings().value(SETTINGS_KEY) == "gpu-box", "remembered in the editor's settings"
    assert "gpu-box (http://10.0.0.5:8080)" in dock.backend_label.text()
    assert "The next turn runs on gpu-box" in dock.status.text()
    assert [a.text() for a in window.backend_menu.actions() if a.isChecked()] == ["gpu-box"]
    made = window.conversation.worker._make_backend()
    try:
        assert isinstance(made, LlamaServerBackend) and made.server.url == "http://10.0.0.5:8080"
    finally:
        made.close()
    run_backend = window.suite_run._maker("")()  # the Tests dock's runs use the same choice
    try:
        assert isinstance(run_backend, LlamaServerBackend)
    finally:
        run_backend.close()
    shot(dock, "picker-gpu-box.png")

    # The menu chooses too, and a new window starts on the remembered choice.
    vllm = next(a for a in window.backend_menu.actions() if a.text() == "vllm")
    vllm.trigger()
    assert window.backends.spec == "vllm" and dock.backend_combo.currentData() == "vllm"
    again = make_window()
    assert again.backends.spec == "vllm" and again.conversation_dock.backend_combo.currentText() == "vllm"
    made = again.conversation.worker._make_backend()
    try:
        assert isinstance(made, OpenAIBackend) and made.api.api_key == "sk-secret"
    finally:
        made.close()

    # Back to this computer.
    combo.setCurrentIndex(0)
    combo.activated.emit(0)
    assert window.backends.spec == "embedded" and window.conversation.worker._make_backend is None
    assert app_settings().value(SETTINGS_KEY) == "embedded"
    assert window.suite_run._maker("").__name__ == "embedded"


def test_the_choice_is_never_saved_in_the_asset(profiles_file, window, tmp_path):
    window.backends.choose("gpu-box")
    window.set_asset(Asset.model_validate(ASSET))
    out = tmp_path / "hello.json"
    assert window.save_to(str(out))
    text = out.read_text(encoding="utf-8")
    assert "gpu-box" not in text and "10.0.0.5" not in text and "backend" not in text


def test_a_profile_whose_key_variable_is_unset_is_refused(profiles_file, window, monkeypatch):
    monkeypatch.delenv("PARLEY_TEST_VLLM_KEY", raising=False)
    dock = window.conversation_dock
    index = dock.backend_combo.findData("vllm")
    dock.backend_combo.setCurrentIndex(index)
    dock.backend_combo.activated.emit(index)
    assert window.backends.spec == "embedded" and dock.backend_combo.currentData() == "embedded"
    assert "PARLEY_TEST_VLLM_KEY" in dock.status.text() and dock.status.styleSheet()


def test_a_remembered_profile_that_is_gone_falls_back_to_embedded(profiles_file, make_window):
    store = app_settings()
    store.setValue(SETTINGS_KEY, "retired-box")
    store.sync()
    window = make_window()
    assert window.backends.spec == "embedded"
    dock = window.conversation_dock
    assert "retired-box" in dock.status.text() and "this computer" in dock.status.text()
    assert dock.backend_combo.currentData() == "embedded"


def test_a_broken_profiles_file_is_said_in_the_picker_and_menu(make_window):
    path = Path(os.environ["PARLEY_BACKENDS"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"version": 1, "backends": [{"name": "x", "kind": "llama-server", "url": "ftp://x"}]}')
    window = make_window()
    dock = window.conversation_dock
    assert combo_entries(dock.backend_combo) == [("Embedded (this computer)", "embedded"), (SCRIPTED_TITLE, "scripted")]
    assert "could not be read" in dock.backend_label.text()
    assert str(path) in dock.backend_label.toolTip() and "backends[0]" in dock.backend_label.toolTip()
    assert any("could not be read" in a.text() for a in window.backend_menu.actions())


# --- switching keeps the conversation --------------------------------------------------------------


class _Alpha(ScriptedBackend):
    label = "alpha (http://127.0.0.1:1) \u00b7 OpenAI-compatible \u00b7 tiny.gguf"


class _Here(ScriptedBackend):
    label = EMBEDDED_LABEL  # as the embedded runtime names itself, without loading a model


def test_switching_backend_keeps_the_conversation_and_each_turn_says_where_it_ran(window, qtbot):
    conversation = window.conversation
    dock = window.conversation_dock
    window.set_asset(Asset.model_validate(ASSET))
    conversation.worker._make_backend = _Here
    with qtbot.waitSignal(conversation.turn_finished, timeout=10_000) as first:
        conversation.say("hello there")
    assert first.args[0].diagnostics.backend == EMBEDDED_LABEL
    assert "via" not in dock.chat.toPlainText(), "all on this computer: no line per turn"

    closed = []
    old = conversation.worker.backend
    old.close = lambda: closed.append(True)
    assert conversation.use_backend(_Alpha)
    with qtbot.waitSignal(conversation.turn_finished, timeout=10_000) as second:
        conversation.say("and again")
    assert closed == [True], "the old backend was closed"
    assert second.args[0].diagnostics.backend == _Alpha.label
    assert [t.player for t in conversation.saved.history.turns] == ["hello there", "and again"]
    text = dock.chat.toPlainText()
    assert f"via {EMBEDDED_LABEL}" in text and f"via {_Alpha.label}" in text
    assert text.index("hello there") < text.index(f"via {EMBEDDED_LABEL}") < text.index("and again")
    shot(dock, "conversation-two-backends.png")

    vram = window.dock(VramEstimatorDock)
    assert not vram.backend_note.isHidden()
    note = vram.backend_note.text()
    assert "on this computer" in note and f"Turn 2 ran on {_Alpha.label}" in note
    assert "Turn 1 ran on this computer" in note
    shot(vram, "vram-turns-by-backend.png")

    # A new conversation forgets the turns' backends.
    with qtbot.waitSignal(conversation.history_changed, timeout=10_000):
        conversation.restart()
    assert conversation.turn_backends == {}
    qtbot.waitUntil(lambda: vram.backend_note.isHidden(), timeout=5_000)


def test_a_failing_server_leaves_the_conversation_and_names_the_backend(profiles_file, window, qtbot):
    port = free_port()  # nothing listens there
    profiles_file.write_text(json.dumps({"version": 1, "backends": [
        {"name": "down-box", "kind": "llama-server", "url": f"http://127.0.0.1:{port}", "timeout": 5}]}))
    window.backends.reload()
    window.set_asset(Asset.model_validate(ASSET))
    conversation = window.conversation
    dock = window.conversation_dock
    conversation.worker._make_backend = ScriptedBackend
    with qtbot.waitSignal(conversation.turn_finished, timeout=10_000):
        conversation.say("hello there")
    assert window.choose_backend("down-box")
    dock.line.setText("are you there?")
    with qtbot.waitSignal(conversation.turn_failed, timeout=30_000) as failed:
        dock.send_button.click()
    qtbot.waitUntil(lambda: not conversation.busy, timeout=10_000)
    message = failed.args[0].message
    assert "down-box" in message, message
    assert [t.player for t in conversation.saved.history.turns] == ["hello there"], "as before the turn"
    assert dock.line.text() == "are you there?", "the line is back in the box"
    status = dock.status.text()
    assert "down-box" in status and "as it was before this turn" in status
    assert "are you there?" not in dock.chat.toPlainText()
    shot(dock, "conversation-server-down.png")


# --- the dialog -----------------------------------------------------------------------------------


@pytest.fixture
def dialog(qtbot, profiles_file):
    choice = BackendChoice()
    made = []

    def make() -> BackendsDialog:
        d = BackendsDialog(choice)
        qtbot.addWidget(d)
        d.show()
        made.append(d)
        return d

    yield make
    for d in made:
        d.check.shutdown()


def _type(edit, text: str) -> None:
    edit.setText(text)
    edit.textEdited.emit(text)


def test_the_dialog_adds_edits_and_removes_profiles(dialog, profiles_file, monkeypatch):
    monkeypatch.setenv("PARLEY_TEST_STUDIO_KEY", "sk-very-secret")
    d = dialog()
    assert [d.list.item(i).text() for i in range(d.list.count())] == ["gpu-box", "vllm"]
    assert d.select("vllm") and d.model_edit.isEnabled() and d.context_spin.isEnabled()
    assert d.select("gpu-box") and not d.model_edit.isEnabled(), "model: OpenAI-compatible servers only"

    d.add_profile()
    assert d.name_edit.text() == "server-1" and d.list.currentItem().text() == "server-1"
    _type(d.name_edit, "studio")
    d.kind_combo.setCurrentIndex(d.kind_combo.findData("openai"))
    _type(d.url_edit, "http://192.168.1.20:8000/v1")
    _type(d.key_env_edit, "PARLEY_TEST_STUDIO_KEY")
    assert "is set" in d.key_state.text(), "whether the variable is set now"
    _type(d.model_edit, "qwen")
    d.context_spin.setValue(8192)
    d.timeout_spin.setValue(30)
    assert d.list.currentItem().text() == "studio"
    shot(d, "dialog-new-profile.png")

    d.select("gpu-box")
    _type(d.url_edit, "http://10.0.0.9:8080")
    d.select("vllm")
    d.remove_profile()
    assert d.save()

    text = profiles_file.read_text(encoding="utf-8")
    assert "sk-very-secret" not in text, "the key itself is never written"
    saved = json.loads(text)["backends"]
    assert all("api_key" not in entry for entry in saved)
    assert saved == [
        {"name": "gpu-box", "kind": "llama-server", "url": "http://10.0.0.9:8080"},
        {"name": "studio", "kind": "openai", "url": "http://192.168.1.20:8000/v1",
         "api_key_env": "PARLEY_TEST_STUDIO_KEY", "model": "qwen", "context_size": 8192, "timeout": 30.0},
    ]
    assert [p.name for p in load_profiles()] == ["gpu-box", "studio"]
    assert [p.name for p in d.choice.profiles] == ["gpu-box", "studio"], "the picker has them at once"


def test_bad_values_are_shown_at_the_field_and_nothing_is_saved(dialog, profiles_file):
    before = profiles_file.read_text(encoding="utf-8")
    d = dialog()
    d.select("vllm")
    _type(d.url_edit, "10.0.0.6 port 8000")
    error = d.errors["url"]
    assert not error.isHidden() and "not a server address" in error.text() and "http://HOST:PORT" in error.text()
    _type(d.key_env_edit, "MY KEY")
    assert "not an environment variable" in d.errors["api_key_env"].text()
    d.select("gpu-box")
    _type(d.name_edit, "vllm")
    assert "another profile is named 'vllm'" in d.errors["name"].text()
    _type(d.name_edit, "embedded")
    assert "not a profile name" in d.errors["name"].text()
    _type(d.name_edit, "gpu-box")
    assert d.errors["name"].isHidden()

    assert not d.save() and d.isVisible()
    assert d.list.currentItem().text() == "vllm", "the first profile with a bad value is shown"
    assert "Nothing was saved" in d.status.text()
    assert profiles_file.read_text(encoding="utf-8") == before
    shot(d, "dialog-bad-values.png")


def test_a_broken_profiles_file_is_shown_and_not_replaced_without_asking(dialog, profiles_file, monkeypatch):
    broken = json.dumps({"version": 1, "backends": [
        {"name": "ok", "kind": "llama-server", "url": "http://a:1"},
        {"name": "bad", "kind": "llama-server", "url": "http://b:1", "api_key": "sk-leaked"}]})
    profiles_file.write_text(broken, encoding="utf-8")
    d = dialog()
    assert not d.file_error.isHidden()
    assert str(profiles_file) in d.file_error.text() and "backends[1] ('bad')" in d.file_error.text()
    assert d.list.count() == 0
    shot(d, "dialog-broken-file.png")
    d.add_profile()
    asked = []
    monkeypatch.setattr(d, "ask_overwrite", lambda: (asked.append(True), False)[1])
    assert not d.save()
    assert asked and profiles_file.read_text(encoding="utf-8") == broken
    monkeypatch.setattr(d, "ask_overwrite", lambda: True)
    assert d.save()
    assert [p.name for p in load_profiles()] == ["server-1"]
    assert profiles_file.with_name(profiles_file.name + ".broken").read_text(encoding="utf-8") == broken


def test_check_connection_says_why_a_server_is_not_reached(dialog, qtbot):
    d = dialog()
    d.select("gpu-box")
    port = free_port()
    _type(d.url_edit, f"http://127.0.0.1:{port}")
    with qtbot.waitSignal(d.check.finished, timeout=30_000) as done:
        assert d.check_connection()
        assert not d.check_button.isEnabled(), "one check at a time"
    ok, text = done.args
    assert not ok and "gpu-box" in text
    assert d.check_result.text().startswith("\u2716 Not reached:") and f"127.0.0.1:{port}" in d.check_result.text()
    assert d.check_button.isEnabled()
    _type(d.url_edit, "nope")
    assert not d.check_connection() and "Fix the fields" in d.check_result.text()


def test_editing_the_chosen_profile_applies_to_the_next_turn_and_removing_it_falls_back(
        profiles_file, window, qtbot):
    assert window.choose_backend("gpu-box")
    d = BackendsDialog(window.backends, window)
    qtbot.addWidget(d)
    d.select("gpu-box")
    _type(d.url_edit, "http://10.0.0.7:8080")
    with qtbot.waitSignal(window.backends.changed):
        assert d.save()
    made = window.conversation.worker._make_backend()
    try:
        assert made.server.url == "http://10.0.0.7:8080", "the edited profile is what the next turn uses"
    finally:
        made.close()
    assert "10.0.0.7" in window.conversation_dock.backend_label.text()

    d = BackendsDialog(window.backends, window)
    qtbot.addWidget(d)
    d.select("gpu-box")
    d.remove_profile()
    with qtbot.waitSignal(window.backends.changed):
        assert d.save()
    dock = window.conversation_dock
    assert window.backends.spec == "embedded" and window.conversation.worker._make_backend is None
    assert combo_entries(dock.backend_combo) == [("Embedded (this computer)", "embedded"), (SCRIPTED_TITLE, "scripted"),
                                                 ("vllm", "vllm")]
    assert "gpu-box" in dock.status.text() and "this computer" in dock.status.text()
    assert [a.text() for a in window.backend_menu.actions() if a.isChecked()] == ["Embedded (this computer)"]
