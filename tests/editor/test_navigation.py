"""Navigation in the real window: Tab search ranks what is typed, a node named anywhere is one
click from the canvas (selected and centred), and Ctrl+F finds nodes by what they say."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt


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
