"""Navigation in the real window: Tab search ranks what is typed, a node named anywhere is one
click from the canvas (selected and centred), and Ctrl+F finds nodes by what they say."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from editor.docks.tests.dock import TestsDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.docks.vram_estimator.dock import VramEstimatorDock
from runtime.resources import examples_dir


def _search_and_enter(qtbot, window, text: str) -> list[str]:
    before = set(window.document.asset.node_ids())
    window.canvas.show_node_search()
    search = window.canvas.search
    qtbot.waitUntil(search.isVisible, timeout=3000)
    qtbot.keyClicks(search.line, text)
    qtbot.keyClick(search.line, Qt.Key.Key_Return)
    return [n.type for n in window.document.asset.nodes if n.id not in before]


@pytest.mark.parametrize(("typed", "added"), [
    ("generate", "Generate"),  # exact label before "Generate and Speak" (a prefix match)
    ("summary", "Summarize"),  # another ending of the same stem
    ("clasify", "ClassifyIntent"),  # a typo
    ("speak", "GenerateAndSpeak"),
])
def test_tab_search_adds_the_best_match(qtbot, window, typed, added):
    assert _search_and_enter(qtbot, window, typed) == [added]


def test_tab_search_lists_the_exact_match_first(qtbot, window):
    window.canvas.show_node_search()
    search = window.canvas.search
    qtbot.waitUntil(search.isVisible, timeout=3000)
    qtbot.keyClicks(search.line, "generate")
    assert search.entries() == {"Reply": ["Generate", "Generate and Speak"]}
    assert search.tree.currentItem().text(0) == "Generate"
    search.hide()


def test_tab_search_says_when_nothing_matches(qtbot, window):
    window.canvas.show_node_search()
    search = window.canvas.search
    qtbot.waitUntil(search.isVisible, timeout=3000)
    qtbot.keyClicks(search.line, "qqqq")
    assert search.entries() == {}
    assert search.nothing.isVisibleTo(search)
    search.hide()


def test_tab_search_hides_categories_without_a_match(qtbot, window):
    window.canvas.show_node_search()
    search = window.canvas.search
    qtbot.waitUntil(search.isVisible, timeout=3000)
    qtbot.keyClicks(search.line, "summ")
    shown = [search.tree.topLevelItem(i).text(0) for i in range(search.tree.topLevelItemCount())
             if not search.tree.topLevelItem(i).isHidden()]
    assert shown == ["Memory"]
    search.grab().save("/tmp/n/search_summ.png")
    search.hide()


# --- a node named in a dock: one click shows it on the canvas --------------------------------------

ROUTER = {
    "version": 1, "name": "router", "default_model": "missing.gguf", "start_node": "classify",
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "intents": [{"name": "greet", "exit": "hello"}],
         "fallback_exit": "hello", "position": [0, 0]},
        {"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet.", "template": "Hi",
         "position": [300, 0]},
        {"id": "far", "type": "Generate", "system_prompt": "Far away.", "position": [4000, 3000]},
    ],
}
SUITE = """\
asset: router.json
cases:
  - name: exits
    turns:
      - say: "greet me please"
        expect:
          exits: {hello: "somewhere"}
"""


def _look_away(window) -> None:
    """Scroll the canvas to the far node, with nothing selected."""
    window.canvas.select([])
    window.canvas.center_on("far")


def assert_shown(window, node_id: str) -> None:
    """``node_id`` alone is selected, and centred in the view."""
    assert window.canvas.selected_ids() == [node_id]
    node = window.canvas.canvas_node(node_id).view.sceneBoundingRect()
    view = window.canvas.drawing.visible_rect()
    assert view.contains(node), f"{node_id} at {node} is not in the view {view}"
    near = 0.02 * max(view.width(), view.height())  # NodeGraphQt centres to the nearest view pixel or so
    assert abs(node.center().x() - view.center().x()) < near and abs(node.center().y() - view.center().y()) < near


def _anchor_point(browser, href: str):
    """Where in ``browser``'s viewport the link ``href`` is drawn (scanning it as a person's eye would)."""
    viewport = browser.viewport()
    for y in range(2, viewport.height(), 3):
        for x in range(2, viewport.width(), 3):
            point = QPoint(x, y)
            if browser.anchorAt(point) == href:
                return point
    raise AssertionError(f"no link {href!r} in {browser.toHtml()[:2000]}")


@pytest.fixture
def router(window, tmp_path, qtbot):
    from runtime.backends.scripted import ScriptedBackend
    from tests.editor.docks.tests.listing import open_listed

    (tmp_path / "router.json").write_text(json.dumps(ROUTER), encoding="utf-8")
    (tmp_path / "router.suite.yaml").write_text(SUITE, encoding="utf-8")
    window.suite_run.make_backend = ScriptedBackend
    open_listed(qtbot, window, tmp_path / "router.json")
    window.conversation.use_backend(ScriptedBackend)
    window.canvas.finish_building()
    return window


def _talk(window, qtbot) -> None:
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=30_000):
        assert window.conversation.say("greet me please")
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=30_000)


def test_a_click_on_a_replys_node_name_in_the_chat_shows_that_node(router, qtbot):
    window = router
    _talk(window, qtbot)
    chat = window.conversation_dock.chat
    window.conversation_dock.show()
    window.conversation_dock.raise_()
    qtbot.waitUntil(lambda: chat.isVisible() and chat.viewport().height() > 20, timeout=3000)
    _look_away(window)
    point = _anchor_point(chat, "node:hello")
    qtbot.mouseClick(chat.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert_shown(window, "hello")
    window.conversation_dock.grab().save("/tmp/n/chat_node_link.png")


def test_a_click_on_a_node_of_the_inspectors_path_shows_that_node(router, qtbot):
    window = router
    _talk(window, qtbot)
    inspector = window.dock(TurnInspectorDock)
    assert "href='classify'" in inspector.path_label.text()
    _look_away(window)
    inspector.path_label.linkActivated.emit("classify")
    assert_shown(window, "classify")
    assert inspector.current_node_id() == "classify", "the inspector shows that node's details too"


def test_a_click_on_a_tests_check_shows_the_node_it_is_about(router, qtbot):
    window = router
    tests = window.dock(TestsDock)
    with qtbot.waitSignal(tests.run.finished, timeout=30_000):
        assert tests.run_all()
    check = tests.tree.topLevelItem(0).child(0).child(0).child(0)
    assert "hello takes somewhere" in check.text(0)
    _look_away(window)
    tests.tree.itemClicked.emit(check, 0)
    assert_shown(window, "hello")


def test_a_click_on_a_problem_shows_its_node(router, qtbot):
    window = router
    problems = window.problems_dock
    row = next(i for i, p in enumerate(problems.problems) if p.node_id == "far")
    window.canvas.select([])
    window.canvas.center_on("classify")
    problems.tree.itemClicked.emit(problems.tree.topLevelItem(row), 0)
    assert_shown(window, "far")


def test_a_click_on_a_vram_row_shows_its_node(router, qtbot):
    window = router
    vram = window.dock(VramEstimatorDock)
    vram.update_estimate()
    nodes = next(vram.table.topLevelItem(i) for i in range(vram.table.topLevelItemCount())
                 if vram.table.topLevelItem(i).text(0) == "Node contexts")
    row = next(nodes.child(i) for i in range(nodes.childCount()) if nodes.child(i).text(0) == "hello")
    _look_away(window)
    vram.table.itemClicked.emit(row, 0)
    assert_shown(window, "hello")


def test_a_node_of_another_asset_is_said_not_found(router):
    window = router
    window.canvas.select([])
    assert not window.show_node("summarize")
    assert window.canvas.selected_ids() == []
    assert "No node 'summarize'" in window.statusBar().currentMessage()


# --- Ctrl+F ------------------------------------------------------------------------------------------

def _find(qtbot, window, text: str):
    window.canvas.viewer.setFocus()
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    finder = window._node_find
    assert finder is not None, "Ctrl+F opened nothing"
    qtbot.waitUntil(finder.isVisible, timeout=3000)
    qtbot.keyClicks(finder.line, text)
    return finder


@pytest.mark.parametrize(("typed", "found"), [
    ("warn the", ["warn"]),  # a title
    ("smalltalk", ["smalltalk"]),  # an id (and the classifier's fallback exit names it too)
    ("market is north", ["directions"]),  # a prompt
    ("tries to force", ["classify"]),  # an intent's description
    ("ASK_DIRECTIONS", ["classify"]),  # an intent's name, case ignored
])
def test_ctrl_f_finds_nodes_by_what_they_say(qtbot, window, typed, found):
    assert window.open_path(str(examples_dir() / "intent_router.json"), as_example=True)
    finder = _find(qtbot, window, typed)
    assert finder.matches()[:len(found)] == found
    finder.hide()


def test_ctrl_f_finds_a_template_and_enter_shows_the_node(qtbot, window):
    assert window.open_path(str(examples_dir() / "chat.json"), as_example=True)
    assert "{{vars.time_of_day}}" in window.document.node("reply").template
    window.canvas.select([])
    finder = _find(qtbot, window, "time_of_day")
    assert finder.matches() == ["reply"]
    assert "template: It is {{vars.time_of_day}}" in finder.list.item(0).text()
    finder.grab().save("/tmp/n/find.png")
    qtbot.keyClick(finder.line, Qt.Key.Key_Return)
    assert not finder.isVisible()
    assert window.canvas.selected_ids() == ["reply"]


def test_ctrl_f_says_when_no_node_matches(qtbot, window):
    assert window.open_path(str(examples_dir() / "chat.json"), as_example=True)
    finder = _find(qtbot, window, "zzzz-nowhere")
    assert finder.matches() == [] and finder.nothing.isVisibleTo(finder)
    finder.hide()
