"""The scripted backend in the editor's picker: named for what it is (instant, no model, canned replies),
usable for talking and for the Tests dock's runs, and remembered like any other choice."""

from __future__ import annotations

import json
from pathlib import Path

from editor.docks.tests.dock import TestsDock
from editor.services.backend_choice import SCRIPTED_LABEL, SCRIPTED_TITLE, SETTINGS_KEY, BackendChoice
from editor.settings import app_settings
from runtime.asset.model import Asset
from runtime.backends.scripted import ScriptedBackend
from tests.editor.docks.tests.listing import open_listed

SHOTS = Path("/tmp/parley-backends-shots")

ASSET = {
    "version": 1, "name": "hello", "default_model": "no-such-model.gguf", "start_node": "hello",
    "nodes": [{"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet."}],
}

SUITE = """\
asset: hello.json
cases:
  - name: the greeting is reached
    turns:
      - say: "good morning"
        expect:
          path: [hello]
"""


def shot(widget, name: str) -> Path:
    from PySide6.QtWidgets import QApplication

    for _ in range(3):
        QApplication.processEvents()
    SHOTS.mkdir(parents=True, exist_ok=True)
    out = SHOTS / name
    assert widget.grab().save(str(out))
    return out


def test_scripted_is_a_choice_that_needs_no_profile_and_is_remembered():
    choice = BackendChoice()
    assert choice.choose("scripted") == "", "no profile is needed for canned replies"
    assert choice.spec == "scripted" and choice.scripted and not choice.remote
    assert choice.title == SCRIPTED_TITLE
    assert "canned" in choice.description and "no model" in choice.description
    assert app_settings().value(SETTINGS_KEY) == "scripted"
    assert isinstance(choice.maker()(), ScriptedBackend)
    assert isinstance(choice.factory("")(), ScriptedBackend)
    again = BackendChoice()
    assert again.spec == "scripted" and again.note == "", "a new window starts on it"


def test_the_conversation_picker_offers_scripted_and_talks_on_it_without_a_model(window, qtbot):
    dock = window.conversation_dock
    combo = dock.backend_combo
    index = combo.findData("scripted")
    assert index >= 0, "the picker lists the scripted backend"
    assert combo.itemText(index) == SCRIPTED_TITLE
    assert "instant" in SCRIPTED_TITLE.lower() and "no model" in SCRIPTED_TITLE.lower()
    combo.setCurrentIndex(index)
    combo.activated.emit(index)
    assert window.backends.spec == "scripted"
    assert "canned replies" in dock.backend_label.text().lower(), "the dock says the replies are canned"
    assert "canned" in dock.status.text().lower()

    window.set_asset(Asset.model_validate(ASSET))  # its model file is nowhere: scripted needs none
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=10_000) as done:
        window.conversation.say("good morning")
    record = done.args[0]
    assert record.diagnostics.backend == SCRIPTED_LABEL
    assert record.diagnostics.path == ["hello"]
    assert "canned replies" in dock.backend_label.text().lower(), "still said after a turn"
    shot(dock, "conversation-scripted.png")
    dock.resize(560, dock.height())
    shot(dock, "conversation-scripted-wide.png")


def test_the_tests_dock_runs_on_scripted_and_says_the_replies_were_canned(window, qtbot, tmp_path):
    (tmp_path / "hello.json").write_text(json.dumps(ASSET), encoding="utf-8")
    (tmp_path / "hello.suite.yaml").write_text(SUITE, encoding="utf-8")
    assert window.backends.choose("scripted") == ""
    window.workspace.switch("Test")
    dock = open_listed(qtbot, window, tmp_path / "hello.json")
    with qtbot.waitSignal(dock.run.finished, timeout=30_000) as finished:
        assert dock.run_all()
    report = finished.args[0]
    assert [r.passed for r in report.results] == [True]
    assert report.results[0].server == SCRIPTED_LABEL
    status = dock.status.text()
    assert "1 passed" in status and "canned replies" in status, status
    shot(window.dock(TestsDock), "tests-scripted.png")
