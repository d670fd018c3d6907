"""The Diff as two aligned columns: parts of one kind face each other, a part only one prompt has
faces nothing, words gone are marked on the left and words added on the right, and the first part
that differs is marked once; and the Turn Inspector compares test-run turns, each opened afresh."""

from __future__ import annotations

import html
import re

from editor.docks.turn_inspector.side_by_side import (
    FIRST_MARK,
    Row,
    first_difference,
    marked_pair,
    side_by_side_html,
)
from editor.services.suite_run import TurnComparison
from editor.session.record import InspectedTurn
from runtime.asset.model import Asset
from runtime.diagnostics import NodeDiagnostics, NodeInput, PromptMessage, TurnDiagnostics
from runtime.suites.kept import AssetChange

SYSTEM = Row("SYSTEM \u00b7 System prompt", "You are Brann, the gate guard.")


def cells(page: str) -> list[list[str]]:
    """Each table row's cells as plain text."""
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.DOTALL)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.DOTALL)]
            for r in rows]


def test_parts_of_one_kind_face_each_other_and_the_first_difference_is_marked() -> None:
    old = [SYSTEM, Row("USER \u00b7 Current turn", "Where is the market?")]
    new = [SYSTEM, Row("USER \u00b7 Replayed history \u00b7 turn 1", "Where is the market?"),
           Row("USER \u00b7 Current turn", "Where is the market square?")]
    page = side_by_side_html("passed", "now", "North.", "North, past the well.", old, new)
    table = cells(page)
    assert table[0] == ["passed", "now"]
    assert any("1 part the same (System prompt)" in c[0] for c in table if len(c) == 1)
    history = next(c for c in table if len(c) == 2 and "Replayed history" in c[1])
    assert history[0] == "(not in this prompt)" and history[1].strip("\xa0").startswith(FIRST_MARK)
    current = next(c for c in table if len(c) == 2 and "Current turn" in c[0])
    assert current[0].startswith("USER \u00b7 Current turn \u00b7 changed") and FIRST_MARK not in current[0]
    assert page.count(FIRST_MARK) == 1
    assert re.search(r"<span class='add'>\s*square</span>", page), "the word added, on the right"
    assert first_difference(old, new) == 1


def test_two_different_texts_are_marked_whole_not_word_by_word() -> None:
    left, right = marked_pair("Welcome to the wayside, traveller.", "Go away. The gate is shut.")
    assert left == "<span class='del'>Welcome to the wayside, traveller.</span>"
    assert right == "<span class='add'>Go away. The gate is shut.</span>"
    left, right = marked_pair("The market is north.", "The market is south.")
    assert "<span class='del'>north</span>" in left and "<span class='add'>south</span>" in right


def test_the_same_prompts_say_so() -> None:
    page = side_by_side_html("a", "b", "x", "x", [SYSTEM], [SYSTEM])
    assert "The prompts are the same." in page and FIRST_MARK not in page
    assert ["The same: x"] in cells(page)


def _record(system: str, output: str, exit_: str = "intent:ask_directions") -> InspectedTurn:
    node = NodeDiagnostics(node="classify", type="ClassifyIntent", exit=exit_, output=output,
                           input=NodeInput(prompt=[PromptMessage(role="system", content=system)]))
    return InspectedTurn(TurnDiagnostics(turn=0, player="Where is the market?", path=["classify"], nodes=[node]), Asset())


def test_the_inspector_compares_test_turns_and_opens_each_afresh(window) -> None:
    from editor.docks.turn_inspector.dock import TurnInspectorDock

    inspector = window.dock(TurnInspectorDock)
    passing, failing = _record("Pick an intent.", "ask_directions"), _record("Pick one intent.", "threaten")
    change = AssetChange("classify", "system_prompt", "Pick an intent.", "Pick one intent.")
    inspector.show_external(failing, "Test: way \u00b7 turn 1", "\u2717 exits: classify takes intent:ask_directions",
                            TurnComparison(passing, "Test: way \u00b7 turn 1 \u00b7 passed", "classify", [change]))
    assert inspector.compare_picker.currentText() == "Test: way \u00b7 turn 1 \u00b7 passed"
    assert inspector.compare_picker.findData("Test: way \u00b7 turn 1") >= 0, "Compare offers test-run turns"
    assert inspector.tabs.currentWidget() is inspector.diff_page and inspector.current_node_id() == "classify"
    assert FIRST_MARK in inspector.diff_view.toPlainText()
    row = inspector.changes_list.topLevelItem(0)
    assert [row.text(i) for i in range(4)] == ["classify", "system_prompt", "Pick an intent.", "Pick one intent."]
    # A passing turn opened next starts afresh: nothing compared, no edits listed
    inspector.show_external(passing, "Test: other \u00b7 turn 1", "\u2713 path: classify (took classify)")
    assert inspector.compare_picker.currentData() is None
    assert inspector.changes_list.isHidden()
    # no passing run kept: the Diff says why
    inspector.show_external(failing, "Test: new \u00b7 turn 1", "\u2717 ...",
                            TurnComparison(None, "", "classify", [], "this case has not passed yet"))
    assert "Nothing to compare with: this case has not passed yet." in inspector.diff_view.toPlainText()
