"""The Tests dock on the scripted backend (exact, no model): it lists the suites beside the asset and
a broken one's problems with file, line, case and field; runs cases on its own thread with results
per case as they finish; a failing case never stops the others; a click on a failed turn opens it in
the Turn Inspector with its checks; coverage goes onto the canvas and comes off; Stop and closing the
window end the run; and a conversation saved as a test case is listed and passes."""

from __future__ import annotations

import html
import json
import threading
from pathlib import Path

import pytest

from editor.docks.tests.dock import TestsDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from runtime.asset.model import Asset
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.suites.file import load_suite
from tests.editor.docks.tests.listing import listed, open_listed

ASSET = {
    "version": 1, "name": "router", "default_model": "m.gguf", "start_node": "classify",
    "variables": {"mood": "calm"},
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "intents": [
            {"name": "greet", "exit": "hello"}, {"name": "shop", "exit": "hello"}], "fallback_exit": "hello"},
        {"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet.", "template": "Mood: {{vars.mood}}"},
    ],
}

SUITE = """\
asset: router.json
cases:
  - name: impossible
    turns:
      - say: "greet me please"
        expect:
          path: [classify, hello]
          reply: {contains: ["zebra"]}
  - name: greets
    turns:
      - say: "greet me please"
        expect:
          exits: {classify: "intent:greet"}
          intent: greet
      - say: "greet me again"
        expect:
          visits: [hello]
"""

BROKEN = """\
asset: router.json
cases:
  - name: typo
    turns:
      - say: "hi"
        expect:
          visitz: [hello]
"""


@pytest.fixture
def suites(tmp_path) -> Path:
    (tmp_path / "router.json").write_text(json.dumps(ASSET), encoding="utf-8")
    (tmp_path / "router.suite.yaml").write_text(SUITE, encoding="utf-8")
    (tmp_path / "broken.suite.yaml").write_text(BROKEN, encoding="utf-8")
    # Beside the asset but testing another one: not listed
    (tmp_path / "other.suite.yaml").write_text(SUITE.replace("router.json", "other.json"), encoding="utf-8")
    return tmp_path / "router.json"


@pytest.fixture
def dock(window, suites, qtbot):
    window.suite_run.make_backend = ScriptedBackend
    window.workspace.switch("Test")  # the Tests dock on screen, as when a designer runs the tests
    return open_listed(qtbot, window, suites)


def rows(item) -> list[tuple[str, str]]:
    return [(item.child(i).text(0), item.child(i).text(1)) for i in range(item.childCount())]


def run(qtbot, dock, start) -> object:
    with qtbot.waitSignal(dock.run.finished, timeout=30_000) as finished:
        assert start()
    return finished.args[0]


def test_lists_the_suites_beside_the_asset_and_a_broken_ones_problems(dock):
    tree = dock.tree
    names = [tree.topLevelItem(i).text(0) for i in range(tree.topLevelItemCount())]
    assert names == ["broken.suite.yaml", "router.suite.yaml"], "only the suites that name this asset"
    broken, router = tree.topLevelItem(0), tree.topLevelItem(1)
    assert rows(router) == [("impossible", "not run"), ("greets", "not run")]
    assert router.text(1) == "2 cases"
    assert "cannot be read" in broken.text(1)
    (problem, _), = rows(broken)
    # file, line, case and field
    assert problem.startswith("broken.suite.yaml, line 7, column 19: case 'typo', cases.0.turns.0.expect.visitz: unknown key")
    assert dock.windowTitle() == "Tests"


def test_run_all_shows_each_turn_and_a_failing_case_does_not_stop_the_others(dock, qtbot, window):
    seen: list[tuple[str, str, str, bool]] = []

    def case_done(result) -> None:  # connected after the dock: the tree shows this case already
        items = dock.case_items
        seen.append((result.case, items["router.suite.yaml", "impossible"].text(1),
                     items["router.suite.yaml", "greets"].text(1), dock.run.busy))

    dock.run.case_done.connect(case_done)
    report = run(qtbot, dock, dock.run_all)
    router = dock.tree.topLevelItem(1)
    assert [(r.case, r.passed) for r in report.results] == [("impossible", False), ("greets", True)]
    assert seen[0][0] == "impossible" and seen[0][1].startswith("\u2717 failed")
    assert seen[0][2:] == ("waiting\u2026", True), "results appear per case, while the run goes on"
    assert not dock.progress.isVisible() and dock.progress.value() == 2 and dock.progress.maximum() == 2

    impossible, greets = router.child(0), router.child(1)
    assert impossible.text(1).startswith("\u2717 failed") and greets.text(1).startswith("\u2713 passed")
    assert router.text(1) == "\u2717 1 failed, 1 passed"
    (turn, result), = rows(impossible)
    assert turn == "Turn 1: greet me please" and result == "\u2717 1 of 2 checks failed"
    checks = [t for t, _ in rows(impossible.child(0))]
    assert checks[0] == "\u2717 reply: contains 'zebra'", "the failed check first"
    assert checks[1] == "\u2713 path: classify \u2192 hello (took classify \u2192 hello)", "reads as a sentence"
    assert [r for _t, r in rows(greets)] == ["\u2713 passed (2 checks)", "\u2713 passed (1 check)"]
    assert "1 passed, 1 failed" in dock.status.text() and dock.windowTitle() == "Tests (1 failed)"
    # which backend ran the cases: in the summary and each case's tooltip
    backend = report.results[0].server
    assert backend and f"in {report.seconds:.1f} s on {backend}" in dock.status.text()
    assert greets.toolTip(0).endswith(f"ran on {backend}")


def test_a_failed_turn_opens_in_the_turn_inspector_with_its_checks(dock, qtbot, window):
    run(qtbot, dock, dock.run_all)
    inspector = window.dock(TurnInspectorDock)
    failed_turn = dock.tree.topLevelItem(1).child(0).child(0)
    with qtbot.waitSignal(dock.turn_opened) as opened:
        dock.tree.itemClicked.emit(failed_turn, 0)
    record, label, note, _comparison = opened.args
    assert label == "Test: impossible \u00b7 turn 1"
    assert note.splitlines()[0] == "\u2717 reply: contains 'zebra'"
    assert inspector.turn_picker.currentText() == label
    assert inspector.record is record and record.diagnostics.player == "greet me please"
    assert inspector.note_label.isVisibleTo(inspector)
    assert "\u2717 reply: contains 'zebra'" in html.unescape(inspector.note_label.text())
    assert "greet me please" in inspector.prompt_view.toPlainText(), "the prompt as the model saw it"
    assert window.canvas.highlighted_path() == ["classify", "hello"]
    assert window.conversation.selected_turn == -1, "a test's turn is not the conversation's"
    # A check's row opens its turn too; the live conversation's turns are unaffected
    with qtbot.waitSignal(dock.turn_opened):
        dock.tree.itemClicked.emit(failed_turn.child(0), 0)
    assert inspector.turn_picker.count() == 1


def test_coverage_goes_onto_the_canvas_and_comes_off(dock, qtbot, window):
    canvas = window.canvas
    assert canvas.visit_badge("classify") == "" and canvas.exit_label("classify", "intent:shop") == ("shop", False)
    with qtbot.waitSignal(dock.coverage_changed) as changed:
        run(qtbot, dock, dock.run_all)
    coverage = changed.args[0]
    assert coverage.visits == {"classify": 3, "hello": 3}
    assert canvas.visit_badge("classify") == "\u00d73" and canvas.visit_badge("hello") == "\u00d73"
    assert canvas.exit_label("classify", "intent:greet") == ("greet \u00d73", False)
    assert canvas.exit_label("classify", "intent:shop") == ("shop \u00d70", True), "never taken: marked"
    assert canvas.exit_label("classify", "fallback_exit") == ("fallback \u00d70", True)
    shop = canvas.canvas_node("classify").outputs()["intent:shop"].view
    assert all(tuple(p.color)[:3] == (255, 120, 60) for p in shop.connected_pipes) and shop.connected_pipes
    assert "never taken: classify.intent:shop" in dock.status.text()
    # An edit redraws the node's ports: the counts stay
    window.document.set_node_field("classify", "fallback_exit", "")
    assert canvas.exit_label("classify", "intent:greet") == ("greet \u00d73", False)

    dock.clear_coverage_button.click()
    assert canvas.visit_badge("classify") == "" and canvas.exit_label("classify", "intent:shop") == ("shop", False)
    assert all(tuple(p.color)[:3] != (255, 120, 60) for p in shop.connected_pipes)


def test_run_selected_runs_one_case(dock, qtbot):
    router = dock.tree.topLevelItem(1)
    dock.tree.setCurrentItem(router.child(1).child(0) if router.child(1).childCount() else router.child(1))
    assert dock.selected_cases() == [("router.suite.yaml", "greets")]
    report = run(qtbot, dock, dock.run_selected)
    assert [r.case for r in report.results] == ["greets"]
    router = dock.tree.topLevelItem(1)
    assert router.child(0).text(1) == "not run" and router.child(1).text(1).startswith("\u2713")
    assert router.text(1) == "\u2713 1 passed, 1 not run"
    dock.tree.setCurrentItem(None)
    assert not dock.run_selected() and "Select a case" in dock.status.text()


def test_stop_ends_the_run_and_skips_the_cases_not_run(dock, qtbot, window):
    permits = threading.Semaphore(0)  # one per model call
    calls = []

    def slow(key, request):
        calls.append(key)
        permits.acquire(timeout=10)
        return default_reply(key, request)

    window.suite_run.make_backend = lambda: ScriptedBackend(slow)
    with qtbot.waitSignal(dock.run.started, timeout=10_000):
        assert dock.run_all()  # starts once the suite files are read again
    assert dock.stop_button.isEnabled() and not dock.run_all_button.isEnabled()
    assert dock.progress.isVisible() and dock.progress.maximum() == 2
    with qtbot.waitSignal(dock.run.turn_done, timeout=10_000):
        permits.release(2)  # the first case's one turn: classify, then the reply
    # the worker now waits in the second case's first call (once the first case is kept)
    qtbot.waitUntil(lambda: len(calls) == 3, timeout=10_000)
    with qtbot.waitSignal(dock.run.finished, timeout=10_000) as finished:
        dock.stop_button.click()
        permits.release(10)
    report = finished.args[0]
    assert [r.case for r in report.results] == ["impossible", "greets"]
    assert "cancelled" in report.results[1].turns[0].error
    assert dock.status.text().startswith("Stopped:")
    assert dock.run_all_button.isEnabled() and not dock.stop_button.isEnabled()
    assert dock.case_items["router.suite.yaml", "greets"].text(1).startswith("\u2717")


def test_closing_the_window_mid_run_stops_the_thread(make_window, suites, qtbot):
    window = make_window()
    release = threading.Event()
    window.suite_run.make_backend = lambda: ScriptedBackend(lambda k, r: (release.wait(0.2), default_reply(k, r))[1])
    window.open_path(str(suites))
    dock = window.dock(TestsDock)
    with qtbot.waitSignal(dock.run.turn_done, timeout=10_000):
        dock.run_all()
    window.close()  # the conftest fails the test if the run's thread is still going
    assert window.suite_run.closed and not window.suite_run.busy


def test_an_unsaved_asset_and_an_asset_without_suites_say_what_to_do(window, tmp_path, qtbot):
    dock = window.dock(TestsDock)
    assert "Save the asset to a file" in dock.tree.topLevelItem(0).text(0)
    assert not dock.run_all() and "save the asset to a file" in dock.status.text()
    (tmp_path / "lonely.json").write_text(json.dumps(ASSET), encoding="utf-8")
    open_listed(qtbot, window, tmp_path / "lonely.json")
    assert "No test suites beside lonely.json" in dock.tree.topLevelItem(0).text(0)
    assert "lonely.suite.yaml" in dock.tree.topLevelItem(0).text(0)


def test_runs_use_the_graph_as_edited_unsaved(dock, qtbot, window):
    """A designer edits, then runs: the run tests the edit, not the file."""
    window.document.set_node_field("classify", "intents", [{"name": "shop", "exit": "hello"}])
    report = run(qtbot, dock, dock.run_all)
    greets = next(r for r in report.results if r.case == "greets")
    assert greets.failures[0] == "turn 1: exits: classify takes intent:greet (took fallback_exit)"


def test_a_conversation_saved_as_a_test_case_is_listed_and_passes(dock, qtbot, window, suites):
    window.conversation.worker._make_backend = ScriptedBackend
    chat = window.conversation_dock
    conversation = window.conversation
    assert chat.save_as_test_case("empty") == "" and "talk to the character first" in chat.status.text()
    for line in ("greet me", "I want to shop for a sword"):
        with qtbot.waitSignal(conversation.turn_finished, timeout=10_000):
            conversation.say(line)
    with listed(qtbot, dock), qtbot.waitSignal(chat.test_case_saved) as saved:
        assert chat.save_as_test_case("greets") == "greets (2)", "names are made unique in the suite"
    assert saved.args == [str(suites.with_name("router.suite.yaml"))]
    assert "Saved the test case \u201cgreets (2)\u201d (2 turns) to router.suite.yaml" in chat.status.text()
    case = load_suite(saved.args[0]).suite.cases[-1]
    assert [t.say for t in case.turns] == ["greet me", "I want to shop for a sword"]
    assert case.turns[1].expect.exits == {"classify": "intent:shop"}

    router = dock.tree.topLevelItem(1)
    assert router.child(2).text(0) == "greets (2)", "the dock lists it once saved"
    dock.tree.setCurrentItem(router.child(2))
    report = run(qtbot, dock, dock.run_selected)
    assert [(r.case, r.passed) for r in report.results] == [("greets (2)", True)]


def test_saving_a_test_case_needs_a_saved_asset(window, qtbot):
    window.conversation.worker._make_backend = ScriptedBackend
    window.set_asset(Asset.model_validate(ASSET))
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=10_000):
        window.conversation.say("greet me")
    assert window.conversation_dock.save_as_test_case("x") == ""
    assert "Save the asset to a file first" in window.conversation_dock.status.text()
    assert window.conversation_dock.status.styleSheet(), "shown as an error"


def test_the_save_button_asks_for_a_name(dock, qtbot, window, suites):
    from editor.dialogs.expectations import ExpectationsDialog

    window.conversation.worker._make_backend = ScriptedBackend
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=10_000):
        window.conversation.say("greet me")
    window.conversation_dock.save_test_button.click()
    dialog = window.conversation_dock.findChild(ExpectationsDialog)
    assert dialog.name_edit.text() == "greet me", "the first line is offered as the name"
    dialog.name_edit.setText("asked")
    with listed(qtbot, dock):
        dialog.accept()
    assert "asked" in suites.with_name("router.suite.yaml").read_text(encoding="utf-8")
    assert dock.tree.topLevelItem(1).child(2).text(0) == "asked"
