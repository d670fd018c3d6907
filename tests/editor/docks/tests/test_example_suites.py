"""An example opens as an unsaved copy (Untitled), yet the Tests dock lists and runs the suites that
ship beside it, on the graph as it is in the editor; the shipped files stay as they are."""

from __future__ import annotations

from editor.docks.tests.dock import TestsDock
from editor.model.commands import SetNodeFieldCommand
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from tests.editor.docks.tests.listing import listed


def test_an_example_shows_and_runs_the_suites_shipped_beside_it(window, qtbot):
    example = examples_dir() / "gate_guard.json"
    shipped = example.read_bytes(), (examples_dir() / "gate_guard.suite.yaml").read_bytes()
    window.suite_run.make_backend = ScriptedBackend
    window.workspace.switch("Test")
    dock = window.dock(TestsDock)
    with listed(qtbot, dock):
        assert window.open_path(str(example), as_example=True)
    assert window.document.path == "", "still an unsaved copy"
    names = [dock.tree.topLevelItem(i).text(0) for i in range(dock.tree.topLevelItemCount())]
    assert names == ["gate_guard.suite.yaml"], names
    assert "ship beside the example gate_guard.json" in dock.status.text()
    dock.resize(520, 360)
    dock.grab().save("/tmp/parley-example-suites.png")

    doc = window.document  # an edit: the run tests the graph as it is here
    node = next(n for n in doc.asset.nodes if hasattr(n, "system_prompt"))
    doc.push(SetNodeFieldCommand(doc, node.id, "system_prompt", node.system_prompt, "Edited in the copy."))
    with qtbot.waitSignal(dock.run.finished, timeout=60_000) as finished:
        assert dock.run_all()
    report = finished.args[0]
    cases = [c.name for c in dock.entries[0].loaded.suite.cases]
    assert [r.case for r in report.results] == cases and cases
    assert dock._assets["gate_guard.suite.yaml"] == doc.asset, "ran on the editor's graph, not the shipped file"
    assert (example.read_bytes(), (examples_dir() / "gate_guard.suite.yaml").read_bytes()) == shipped

    # Its expectations are not edited in the shipped suite
    dock.tree.setCurrentItem(dock.case_items["gate_guard.suite.yaml", cases[0]])
    assert dock.edit_expectations() is None and "ships with the example" in dock.status.text()


def test_a_new_asset_after_an_example_has_no_suites(window, qtbot):
    dock = window.dock(TestsDock)
    with listed(qtbot, dock):
        assert window.open_path(str(examples_dir() / "chat.json"), as_example=True)
    assert dock.tree.topLevelItemCount() == 1
    window.document.undo_stack.setClean()
    with listed(qtbot, dock):
        window.new_action.trigger()
    assert dock.asset_path == "" and dock.entries == []
