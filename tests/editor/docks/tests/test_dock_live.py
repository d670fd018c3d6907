"""The Tests dock on the real sample model: the intent router example's suite runs and passes turn by
turn, coverage marks the exit it never takes, a suite made to fail shows the failed check and opens the
failed turn in the Turn Inspector with it, a broken suite shows its line, and a conversation saved as a
test case runs and passes."""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import pytest

from editor.docks.turn_inspector.dock import TurnInspectorDock
from runtime.asset.file import save_asset
from runtime.resources import examples_dir
from tests.editor.docks.tests.listing import listed, open_listed
from tests.editor.live import example, sample_model, talk

pytestmark = pytest.mark.model

RUN_TIMEOUT_MS = 300_000

IMPOSSIBLE = """\
asset: intent_router.json
cases:
  - name: speaks of unicorns
    turns:
      - say: "Excuse me, how do I get to the market square?"
        expect:
          visits: [directions]
          reply: {contains: ["purple unicorn"]}
"""

BROKEN = """\
asset: intent_router.json
cases:
  - name: asks the way
    turns:
      - say: "Where is the inn?"
        expect:
          intent: ask_directions
          reply: {max_words: many}
"""


@pytest.fixture(scope="module")
def model() -> str:
    return sample_model()


@pytest.fixture
def router(tmp_path, model) -> Path:
    """The intent router example and its suite, copied beside each other (on the sample model)."""
    path = tmp_path / "intent_router.json"
    save_asset(example("intent_router", model), path)
    shutil.copy(examples_dir() / "intent_router.suite.yaml", tmp_path / "intent_router.suite.yaml")
    return path


def run_all(qtbot, dock):
    with qtbot.waitSignal(dock.run.finished, timeout=RUN_TIMEOUT_MS) as finished:
        assert dock.run_all()
    return finished.args[0]


def test_the_example_suite_passes_turn_by_turn_and_coverage_marks_what_it_never_took(window, qtbot, router):
    dock = open_listed(qtbot, window, router)
    suite = dock.tree.topLevelItem(0)
    assert suite.text(0) == "intent_router.suite.yaml"
    assert [suite.child(i).text(0) for i in range(suite.childCount())] == ["asks the way",
                                                                          "small talk takes the fallback"]
    report = run_all(qtbot, dock)
    assert report.passed, [r.failures for r in report.results]
    suite = dock.tree.topLevelItem(0)
    assert suite.text(1) == "\u2713 2 passed"
    for i in range(2):
        case = suite.child(i)
        assert case.text(1).startswith("\u2713 passed")
        assert case.child(0).text(1).startswith("\u2713 passed"), "pass per turn"

    canvas = window.canvas
    assert canvas.visit_badge("classify") == "\u00d72"
    assert canvas.visit_badge("directions") == "\u00d71" and canvas.visit_badge("warn") == "\u00d70"
    assert canvas.exit_label("classify", "intent:ask_directions") == ("ask_directions \u00d71", False)
    assert canvas.exit_label("classify", "intent:threaten") == ("threaten \u00d70", True), "never taken: marked"
    assert "never taken: classify.intent:threaten" in dock.status.text()


def test_a_failing_suite_shows_the_check_and_opens_the_turn_in_the_inspector(window, qtbot, router):
    (router.parent / "intent_router.suite.yaml").unlink()
    (router.parent / "unicorns.suite.yaml").write_text(IMPOSSIBLE, encoding="utf-8")
    (router.parent / "broken.suite.yaml").write_text(BROKEN, encoding="utf-8")
    dock = open_listed(qtbot, window, router)
    broken = dock.tree.topLevelItem(0)
    assert broken.text(0) == "broken.suite.yaml"
    assert broken.child(0).text(0) == ("broken.suite.yaml, line 8, column 30: case 'asks the way', "
                                       "cases.0.turns.0.expect.reply.max_words: Input should be a valid integer, "
                                       "unable to parse string as an integer")

    report = run_all(qtbot, dock)
    (result,) = report.results
    assert not result.passed and result.failures == ["turn 1: reply: contains 'purple unicorn'"]
    turn = dock.tree.topLevelItem(1).child(0).child(0)
    assert turn.text(1) == "\u2717 1 of 2 checks failed"
    assert turn.child(0).text(0) == "\u2717 reply: contains 'purple unicorn'"

    inspector = window.dock(TurnInspectorDock)
    dock.tree.itemClicked.emit(turn, 0)
    assert inspector.turn_picker.currentText() == "Test: speaks of unicorns \u00b7 turn 1"
    note = html.unescape(inspector.note_label.text())
    assert "\u2717 reply: contains 'purple unicorn'" in note and "\u2713 path: visits directions" in note
    assert inspector.current_node_id() == "directions", "opens on the node that replied"
    prompt = inspector.prompt_view.toPlainText()
    assert "Excuse me, how do I get to the market square?" in prompt and "You are Brann" in prompt
    assert result.turns[0].reply.strip()[:20] in prompt, "the reply it gave"


def test_a_conversation_saved_as_a_test_case_runs_and_passes(window, qtbot, router):
    (router.parent / "intent_router.suite.yaml").unlink()
    dock = open_listed(qtbot, window, router)
    lines = ["Excuse me, where is the inn?", "Lovely weather we are having today."]
    for line in lines:
        talk(qtbot, window.conversation, line)
    chat = window.conversation_dock
    with listed(qtbot, dock):
        assert chat.save_as_test_case("my walk to the inn") == "my walk to the inn"
    suite = router.parent / "intent_router.suite.yaml"
    assert suite.is_file() and "my walk to the inn" in suite.read_text(encoding="utf-8")
    case = dock.tree.topLevelItem(0).child(0)
    assert case.text(0) == "my walk to the inn" and case.text(1) == "not run"

    report = run_all(qtbot, dock)
    assert report.passed, report.results[0].failures
    turns = report.results[0].turns
    assert [t.line for t in turns] == lines
    assert [t.path for t in turns] == [window.conversation.record(i).diagnostics.path for i in range(2)]
