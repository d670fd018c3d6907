"""From a red test to its cause, in the real window on the sample model: a suite passes, an edit to
the asset makes a case fail, and one click on the failed turn opens the Turn Inspector on the
classifier whose exit failed, beside the same turn of the last passing run, the first differing prompt
part marked, and the edit listed field by field."""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from editor.docks.tests.dock import TestsDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.docks.turn_inspector.side_by_side import FIRST_MARK
from runtime.asset.file import save_asset
from runtime.resources import examples_dir
from tests.editor.docks.tests.listing import open_listed
from tests.editor.live import example, sample_model

pytestmark = pytest.mark.model

RUN_TIMEOUT_MS = 300_000


@pytest.fixture(scope="module")
def model() -> str:
    return sample_model()


@pytest.fixture
def router(tmp_path, model) -> Path:
    path = tmp_path / "intent_router.json"
    save_asset(example("intent_router", model), path)
    shutil.copy(examples_dir() / "intent_router.suite.yaml", tmp_path / "intent_router.suite.yaml")
    return path


def click(qtbot, widget, pos) -> None:
    QTest.mouseClick(widget, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, pos)


def run_all(qtbot, dock: TestsDock):
    with qtbot.waitSignal(dock.run.finished, timeout=RUN_TIMEOUT_MS) as finished:
        click(qtbot, dock.run_all_button, dock.run_all_button.rect().center())
    return finished.args[0]


def test_one_click_from_a_failed_turn_to_the_edit_that_broke_it(make_window, qtbot, router):
    window = make_window()
    window.resize(1920, 1080)
    window.workspace.switch("Test")
    dock = open_listed(qtbot, window, router)
    assert run_all(qtbot, dock).passed

    # The designer's slip: directions now go to small talk (in the editor, unsaved: tests run on it)
    classify = window.document.node("classify")
    intents = [i.model_copy(update={"exit": "smalltalk"}) if i.name == "ask_directions" else i
               for i in classify.intents]
    window.document.set_node_field("classify", "intents", intents)
    report = run_all(qtbot, dock)
    failed = next(r for r in report.results if not r.passed)
    assert failed.case == "asks the way"

    case = dock.case_items["intent_router.suite.yaml", "asks the way"]
    turn = case.child(0)
    assert case.isExpanded() and turn.text(1).startswith("\u2717"), "the failed turn is on show"
    inspector = window.dock(TurnInspectorDock)
    inspector.compare_picker.setCurrentIndex(0)  # whatever Diff was left before does not matter
    # The one action: a click on the failed turn
    rect = dock.tree.visualItemRect(turn)
    with qtbot.waitSignal(dock.turn_opened):
        click(qtbot, dock.tree.viewport(), rect.center())

    assert inspector.isVisible()
    assert inspector.turn_picker.currentText() == "Test: asks the way \u00b7 turn 1"
    assert inspector.current_node_id() == "classify", "the classifier whose exit failed, not the replying node"
    assert inspector.compare_picker.currentText().startswith("Test: asks the way \u00b7 turn 1 \u00b7 passed")
    assert inspector.tabs.currentWidget() is inspector.diff_page
    # the Diff has room at 1920x1080 in the Test workspace (it showed about 2 lines)
    lines = inspector.diff_view.viewport().height() / inspector.diff_view.fontMetrics().lineSpacing()
    assert lines >= 8, f"the Diff shows {lines:.1f} lines"
    diff = inspector.diff_view.toPlainText()
    assert "OUTPUT" in diff and "PROMPT" in diff
    changes = inspector.changes_list
    assert changes.isVisibleTo(inspector) and changes.topLevelItemCount() == 1
    row = changes.topLevelItem(0)
    assert [row.text(i) for i in range(4)] == ["classify", "intents[ask_directions].exit", "directions", "smalltalk"]
    # the classifier's prompt did not change (only where its exit leads): so the output is the same
    assert "The same:" in diff and FIRST_MARK not in diff and "The prompts are the same." in diff
    note = html.unescape(inspector.note_label.text())
    assert "\u2717 path: classify \u2192 directions (took classify \u2192 smalltalk)" in note

    # The replying node differs: its prompt side by side, the first differing part marked
    inspector.show_node("smalltalk")
    assert "did not run on both turns" in inspector.diff_view.toPlainText()
