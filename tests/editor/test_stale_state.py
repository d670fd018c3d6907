"""Nothing stale: after a failed test run on one asset, opening another asset whose nodes share ids
(``classify``) or starting a new one leaves no dock showing the old asset's turn, marks or results."""

from __future__ import annotations

import json

import pytest

from editor.docks.raw_json.dock import RawJsonDock
from editor.docks.tests.dock import TestsDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from tests.editor.docks.tests.listing import open_listed

ROUTER = {
    "version": 1, "name": "router", "default_model": "m.gguf", "start_node": "classify",
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "intents": [{"name": "greet", "exit": "hello"}],
         "fallback_exit": "hello"},
        {"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet.", "template": "Hi"},
    ],
}
SUITE = """\
asset: router.json
cases:
  - name: impossible
    turns:
      - say: "greet me please"
        expect:
          reply: {contains: ["zebra"]}
"""


@pytest.fixture
def failed_run(window, tmp_path, qtbot):
    """The router asset after a failed run, its failed turn open in the Turn Inspector."""
    (tmp_path / "router.json").write_text(json.dumps(ROUTER), encoding="utf-8")
    (tmp_path / "router.suite.yaml").write_text(SUITE, encoding="utf-8")
    window.suite_run.make_backend = ScriptedBackend
    tests = open_listed(qtbot, window, tmp_path / "router.json")
    with qtbot.waitSignal(tests.run.finished, timeout=30_000):
        assert tests.run_all()
    with qtbot.waitSignal(tests.turn_opened):
        tests.tree.itemClicked.emit(tests.tree.topLevelItem(0).child(0).child(0), 0)
    inspector = window.dock(TurnInspectorDock)
    # what would go stale
    assert tests.windowTitle() == "Tests (1 failed)"
    assert inspector.record is not None and inspector.note_label.isVisibleTo(inspector)
    assert window.canvas.highlighted_path() == ["classify", "hello"]
    assert window.canvas.visit_badge("classify") == "\u00d71"
    return tests


def assert_nothing_stale(window) -> None:
    tests, inspector = window.dock(TestsDock), window.dock(TurnInspectorDock)
    assert tests.windowTitle() == "Tests", "the old asset's failures"
    assert "failed" not in tests.status.text()
    assert tests.coverage is None and tests.results == {}
    assert inspector.record is None, f"the Turn Inspector still shows {inspector.turn_picker.currentText()!r}"
    assert inspector.turn_picker.count() == 0
    assert not inspector.note_label.isVisibleTo(inspector)
    assert window.canvas.highlighted_path() == [], "path marks on the new asset's same-id nodes"
    for node_id in window.document.asset.node_ids():
        assert window.canvas.visit_badge(node_id) == "", f"coverage on {node_id}"
    assert window.dock(RawJsonDock).data is None


def test_opening_an_example_with_same_id_nodes_leaves_nothing_stale(window, failed_run, qtbot):
    assert window.open_path(str(examples_dir() / "intent_router.json"), as_example=True)
    assert window.document.has_node("classify")
    assert_nothing_stale(window)
    window.grab().save("/tmp/n/stale_after_open.png")


def test_opening_another_file_leaves_nothing_stale(window, failed_run, qtbot, tmp_path):
    other = tmp_path / "other" / "router.json"
    other.parent.mkdir()
    other.write_text(json.dumps(ROUTER), encoding="utf-8")
    assert window.open_path(str(other))
    assert_nothing_stale(window)


def test_file_new_leaves_nothing_stale(window, failed_run, qtbot):
    window.new_asset()
    assert_nothing_stale(window)


def test_a_live_turn_of_one_example_leaves_nothing_on_the_next(window, qtbot):
    """chat and long_conversation share the node id ``reply``."""
    assert window.open_path(str(examples_dir() / "chat.json"), as_example=True)
    window.conversation.use_backend(ScriptedBackend)
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=30_000):
        assert window.conversation.say("hello")
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=30_000)
    inspector = window.dock(TurnInspectorDock)
    assert inspector.record is not None and window.canvas.highlighted_path() == ["reply"]
    assert window.dock(RawJsonDock).data is not None
    assert window.open_path(str(examples_dir() / "long_conversation.json"), as_example=True)
    assert window.document.has_node("reply")
    assert_nothing_stale(window)
    # the worker starts the new conversation on its thread: the chat follows when it has
    qtbot.waitUntil(lambda: "hello" not in window.conversation_dock.chat.toPlainText(), timeout=10_000)
