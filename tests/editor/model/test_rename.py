"""A safe rename: renaming a node in the Properties dock renames it in the suites beside the asset too
(a Subgraph node's behaviour's namespaced ids with it), in the same undo step, and the status bar says
how many expectations followed it. A freed id is not given to a new node in that session."""

from __future__ import annotations

import json
from pathlib import Path

from editor.canvas.node_types import view_of
from editor.model.document import Document
from editor.model.rename import rename_node
from runtime.asset.model import Asset
from runtime.suites.file import load_suite
from tests.editor.canvas.test_subgraphs import GUARD, THREATS, write
from tests.editor.docks.tests.listing import listed, open_listed
from tests.editor.docks.tests.test_dock import ASSET

SUITE = """\
# The router's greetings: hand-written.
asset: router.json
cases:
  - name: greets  # by name
    turns:
      - say: "greet me please"
        expect:
          path: [classify, "hello"]
          visits: [hello]
          exits: {classify: intent:greet}
      - say: "and again"
        expect:
          not_visits:
            - classify
"""
# Another asset's suite in the same folder: its "classify" is not the router's
OTHER = """\
asset: other.json
cases:
  - name: elsewhere
    turns:
      - say: hi
        expect: {path: [classify]}
"""


def rename_in_properties(window, old: str, new: str) -> None:
    window.properties.show_selection([old])
    editor = window.properties.form.editors["id"]
    editor.line.setText(new)
    editor.line.editingFinished.emit()


def test_a_rename_renames_the_node_in_the_suites_beside_the_asset_in_one_undo_step(make_window, qtbot, tmp_path):
    asset = tmp_path / "router.json"
    asset.write_text(json.dumps(ASSET), encoding="utf-8")
    suite, other = tmp_path / "router.suite.yaml", tmp_path / "other.suite.yaml"
    suite.write_text(SUITE, encoding="utf-8")
    other.write_text(OTHER, encoding="utf-8")
    window = make_window()
    tests = open_listed(qtbot, window, asset)
    doc = window.document
    steps = doc.undo_stack.count()

    with listed(qtbot, tests):  # the Tests dock reads the suites again
        rename_in_properties(window, "classify", "sort")
    assert doc.has_node("sort") and doc.asset.start_node == "sort"
    (entry,) = [e for e in tests.entries if e.name == "router.suite.yaml"]
    assert entry.loaded is not None and not entry.problems, "checked against the graph as edited, not yet saved"
    assert entry.loaded.suite.cases[0].turns[0].expect.path == ["sort", "hello"]
    assert doc.undo_stack.count() == steps + 1, "one undo step"
    text = suite.read_text(encoding="utf-8")
    assert text.startswith("# The router's greetings: hand-written.\n") and "  - name: greets  # by name\n" in text
    assert '          path: [sort, "hello"]\n' in text and "          visits: [hello]\n" in text
    assert "exits: {sort: intent:greet}" in text and "            - sort\n" in text and "classify" not in text
    assert other.read_text(encoding="utf-8") == OTHER, "another asset's suite is left alone"
    told = window.statusBar().currentMessage()
    assert "3 expectations" in told and "router.suite.yaml" in told, told

    assert window.save()
    expect = load_suite(suite).suite.cases[0].turns[0].expect
    assert expect.path == ["sort", "hello"] and expect.exits == {"sort": "intent:greet"}, "the saved pair loads"

    with listed(qtbot, tests):
        doc.undo_stack.undo()
    assert doc.has_node("classify") and not doc.has_node("sort")
    assert suite.read_text(encoding="utf-8") == SUITE, "undo gives the suite back as it was"
    with listed(qtbot, tests):
        doc.undo_stack.redo()
    assert doc.has_node("sort") and "path: [sort, \"hello\"]" in suite.read_text(encoding="utf-8")


def test_renaming_a_subgraph_node_renames_its_behaviours_namespaced_ids(tmp_path: Path, qtbot):
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    path = write(tmp_path / "guard.json", GUARD)
    before = ("asset: guard.json\ncases:\n  - name: threat\n    turns:\n      - say: I threaten you\n        expect:\n"
              "          path: [guard, guard/classify, guard/warn, guard/refuse, stern]\n"
              "          exits: {guard/classify: intent:threaten}\n          not_visits: [chat, guardian]\n")
    suite = tmp_path / "guard.suite.yaml"
    suite.write_text(before, encoding="utf-8")
    doc = Document(Asset.model_validate(GUARD), str(path))

    told = rename_node(doc, "guard", "gate")
    after = suite.read_text(encoding="utf-8")
    assert "path: [gate, gate/classify, gate/warn, gate/refuse, stern]" in after
    assert "exits: {gate/classify: intent:threaten}" in after
    assert "not_visits: [chat, guardian]" in after, "an id that only starts with the old one is another node"
    assert "2 expectations" in told, told
    doc.undo_stack.undo()
    assert doc.has_node("guard") and suite.read_text(encoding="utf-8") == before


def test_a_rename_no_suite_names_says_so(tmp_path: Path, qtbot):
    doc = Document(Asset.model_validate(ASSET), str(tmp_path / "router.json"))
    assert rename_node(doc, "hello", "greeting") == "Renamed hello to greeting; no test expectation named it."
    assert doc.undo_stack.count() == 1


def test_a_freed_id_is_not_given_to_a_new_node(make_window, qtbot):
    window = make_window()
    doc = window.document
    stem = view_of("GenerateAndSpeak").new_id
    first = window.canvas.add_node("GenerateAndSpeak", (0, 0))
    assert first == stem
    rename_in_properties(window, stem, "greeting")
    assert doc.has_node("greeting") and not doc.has_node(stem)
    added = window.canvas.add_node("GenerateAndSpeak", (0, 300))
    assert added != stem, "the id the rename freed stays free: a stale expectation would name the new node"
    pasted = window.paste_text(json.dumps([{"id": stem, "type": "GenerateAndSpeak"}]), None)
    assert stem not in pasted, "nor does a pasted node take it"
