"""Expectations in the UI, in the real window on the scripted backend: "Save as test" shows each
turn's recorded path to confirm or correct before it writes, and the Tests dock edits a case's
expectations in a form, writing YAML that keeps the file's comments and order."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from editor.dialogs.expectations import ExpectationsDialog, parse_exits, parse_nodes
from editor.docks.tests.dock import TestsDock
from runtime.backends.scripted import ScriptedBackend
from runtime.suites.file import load_suite
from tests.editor.docks.tests.listing import listed, open_listed
from tests.editor.docks.tests.test_dock import ASSET

SUITE = """\
# Hand-written: the router's greetings.
asset: router.json
cases:
  - name: impossible  # fails until its reply check is fixed
    turns:
      - say: "greet me please"
        expect:
          path: [classify, hello]
          reply: {contains: ["zebra"], max_words: 40}
"""


@pytest.fixture
def dock(window, tmp_path, qtbot) -> TestsDock:
    (tmp_path / "router.json").write_text(json.dumps(ASSET), encoding="utf-8")
    (tmp_path / "router.suite.yaml").write_text(SUITE, encoding="utf-8")
    window.suite_run.make_backend = ScriptedBackend
    window.conversation.worker._make_backend = ScriptedBackend
    window.workspace.switch("Test")
    return open_listed(qtbot, window, tmp_path / "router.json")


def ok(dialog: ExpectationsDialog) -> None:
    button = dialog.buttons.button(dialog.buttons.StandardButton.Ok)
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


def type_into(edit, text: str) -> None:
    edit.selectAll()
    QTest.keyClicks(edit, text)


def test_parsing_what_is_typed() -> None:
    assert parse_nodes("classify \u2192 hello") == parse_nodes("classify > hello") == parse_nodes("classify, hello") \
        == ["classify", "hello"]
    assert parse_exits("classify = intent:greet; tools = default_exit") == {"classify": "intent:greet",
                                                                           "tools": "default_exit"}
    with pytest.raises(ValueError, match="write node = exit"):
        parse_exits("classify intent:greet")


def test_the_tests_dock_edits_a_cases_expectations_in_a_form(dock, qtbot, window, tmp_path) -> None:
    suite = tmp_path / "router.suite.yaml"
    case = dock.case_items["router.suite.yaml", "impossible"]
    QTest.mouseClick(dock.tree.viewport(), Qt.MouseButton.LeftButton, pos=dock.tree.visualItemRect(case).center())
    QTest.mouseClick(dock.edit_button, Qt.MouseButton.LeftButton)
    dialog = dock.findChild(ExpectationsDialog)
    assert dialog is not None and dialog.isVisible()
    (turn,) = dialog.turns
    assert turn.path.text() == "classify \u2192 hello" and turn.contains.text() == "zebra"
    window.grab().save(str(tmp_path / "edit.png"))

    type_into(turn.path, "classify > nowhere")
    ok(dialog)
    assert dialog.isVisible() and "turn 1, Path: no node 'nowhere'" in dialog.error.text(), "refused, saying why"
    type_into(turn.path, "classify > hello")
    type_into(turn.contains, "heard")
    type_into(turn.exits, "classify = intent:greet")
    with listed(qtbot, dock):
        ok(dialog)
    text = suite.read_text(encoding="utf-8")
    assert text.startswith("# Hand-written: the router's greetings.\n")
    assert "  - name: impossible  # fails until its reply check is fixed\n" in text
    assert '          reply: {contains: ["heard"], max_words: 40}\n' in text, "in place, its style and the rest kept"
    assert '          exits: {classify: intent:greet}\n' in text
    expect = load_suite(suite).suite.cases[0].turns[0].expect
    assert expect.path == ["classify", "hello"] and expect.exits == {"classify": "intent:greet"}

    with qtbot.waitSignal(dock.run.finished, timeout=30_000) as finished:
        assert dock.run_all()
    assert finished.args[0].passed, finished.args[0].results[0].failures


def test_save_as_test_shows_each_turns_recorded_path_to_correct_before_it_writes(dock, qtbot, window, tmp_path):
    conversation = window.conversation
    for line in ("greet me", "I want to shop for a sword"):
        with qtbot.waitSignal(conversation.turn_finished, timeout=10_000):
            conversation.say(line)
    suite = tmp_path / "router.suite.yaml"
    before = suite.read_text(encoding="utf-8")
    chat = window.conversation_dock
    chat.save_test_button.click()
    dialog = chat.findChild(ExpectationsDialog)
    assert dialog is not None and dialog.isVisible()
    assert suite.read_text(encoding="utf-8") == before, "nothing is written before it is confirmed"
    assert dialog.name_edit.text() == "greet me"
    first, second = dialog.turns
    assert first.path.text() == "classify \u2192 hello" and second.exits.text() == "classify = intent:shop"
    dialog.resize(640, 560)
    dialog.grab().save(str(tmp_path / "save.png"))

    # The designer sees the shopping line took the greeting's route by mistake... and says what it should do
    type_into(second.exits, "classify = intent:greet")
    type_into(dialog.name_edit, "corrected")
    with listed(qtbot, dock), qtbot.waitSignal(chat.test_case_saved):
        ok(dialog)
    text = suite.read_text(encoding="utf-8")
    assert text.startswith("# Hand-written"), "the file's comments are kept"
    case = load_suite(suite).suite.cases[-1]
    assert case.name == "corrected" and [t.say for t in case.turns] == ["greet me", "I want to shop for a sword"]
    assert case.turns[0].expect.path == ["classify", "hello"]
    assert case.turns[1].expect.exits == {"classify": "intent:greet"}, "the correction, not the recorded exit"
    assert dock.case_items.get(("router.suite.yaml", "corrected")) is not None


def test_cancel_saves_nothing(dock, qtbot, window, tmp_path):
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=10_000):
        window.conversation.say("greet me")
    before = (tmp_path / "router.suite.yaml").read_text(encoding="utf-8")
    window.conversation_dock.save_test_button.click()
    dialog = window.conversation_dock.findChild(ExpectationsDialog)
    dialog.reject()
    assert (tmp_path / "router.suite.yaml").read_text(encoding="utf-8") == before
