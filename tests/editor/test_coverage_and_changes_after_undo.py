"""Issue 38: after an undo, the canvas's coverage badges and the Turn Inspector's "Now" column were
stale. Coverage follows a renamed node (its counts went to "\u00d70" and an undo kept them there), and
the edits listed since the last passing run show the asset as it is now after every edit, undo and redo."""

from __future__ import annotations

from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.model.commands import set_node_field
from editor.services.suite_run import TurnComparison
from editor.session.record import InspectedTurn
from runtime.asset.model import Asset, new_node
from runtime.diagnostics import NodeDiagnostics, NodeInput, PromptMessage, TurnDiagnostics
from runtime.suites.kept import AssetChange
from tests.editor.test_stale_state import failed_run  # noqa: F401 - the fixture


def coverage(window, node_id: str) -> tuple[str, list[tuple[str, bool]]]:
    canvas = window.canvas
    return canvas.visit_badge(node_id), [canvas.exit_label(node_id, p) for p in canvas.drawing.nodes[node_id].outputs()]


def test_coverage_follows_a_rename_and_its_undo(window, failed_run):  # noqa: F811
    doc = window.document
    shown = coverage(window, "hello")
    assert shown == ("\u00d71", [("next \u00d71", False)])
    doc.push(set_node_field(doc, "hello", "id", "hi"))
    doc.push(set_node_field(doc, "hi", "system_prompt", "Greet warmly."))
    assert coverage(window, "hi") == shown, "the renamed node's counts are its own"
    doc.undo_stack.undo()
    doc.undo_stack.undo()
    assert coverage(window, "hello") == shown, "stale \u00d70 after undoing the rename"
    doc.undo_stack.redo()
    assert coverage(window, "hi") == shown
    window.canvas.frame_selection()
    window.canvas.widget.grab().save("/tmp/w38/coverage_after_undo.png")


def _record(asset: Asset) -> InspectedTurn:
    node = NodeDiagnostics(node="classify", type="ClassifyIntent", exit="intent:greet", output="greet",
                           input=NodeInput(prompt=[PromptMessage(role="system", content="Pick.")]))
    return InspectedTurn(TurnDiagnostics(turn=0, player="Hi", path=["classify"], nodes=[node]), asset)


def _asset(prompt: str) -> Asset:
    return Asset(start_node="classify", nodes=[
        new_node("ClassifyIntent", "classify", system_prompt=prompt, intents=[{"name": "greet", "exit": ""}])])


def test_the_now_column_follows_edits_undo_and_redo(window):
    window.set_asset(_asset("Pick one intent."))
    doc = window.document
    inspector = window.dock(TurnInspectorDock)
    change = AssetChange("classify", "system_prompt", "Pick an intent.", "Pick one intent.")
    inspector.show_external(_record(doc.asset), "Test: way \u00b7 turn 1", "\u2717 ...",
                            TurnComparison(_record(_asset("Pick an intent.")), "Test: way \u00b7 turn 1 \u00b7 passed",
                                           "classify", [change]))

    def rows() -> list[list[str]]:
        changes = inspector.changes_list
        return [[changes.topLevelItem(i).text(c) for c in range(4)] for i in range(changes.topLevelItemCount())]

    assert rows() == [["classify", "system_prompt", "Pick an intent.", "Pick one intent."]]
    doc.push(set_node_field(doc, "classify", "system_prompt", "Pick the intent."))
    assert rows() == [["classify", "system_prompt", "Pick an intent.", "Pick the intent."]]
    doc.undo_stack.undo()
    assert rows() == [["classify", "system_prompt", "Pick an intent.", "Pick one intent."]], "stale after undo"
    doc.undo_stack.redo()
    assert rows() == [["classify", "system_prompt", "Pick an intent.", "Pick the intent."]], "stale after redo"
    inspector.resize(700, 500)
    inspector.grab().save("/tmp/w38/now_column_after_redo.png")
